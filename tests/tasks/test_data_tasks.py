"""The data tasks' plumbing: adapter dispatch covers every format, and the count tables."""

from __future__ import annotations

from typing import get_args, get_type_hints

from corpora import tables
from corpora.prepared import Corpus
from flows.params import PrepareParams
from tasks import data


def test_every_configurable_format_has_an_adapter() -> None:
    allowed = get_args(get_type_hints(PrepareParams)["format"])
    assert allowed and set(data._ADAPTERS) == set(allowed)


def small_corpus() -> Corpus:
    images = tables.images_table(
        {
            "image_id": ["a", "b", "c"],
            "split": ["train", "train", "test"],
            "path": ["a", "b", "c"],
            "width": [None] * 3,
            "height": [None] * 3,
            "dataset": ["toy"] * 3,
        }
    )
    captions = tables.captions_table(
        {
            "caption_id": ["a1", "a2", "at", "bt", "ct", "cd"],
            "image_id": ["a", "a", "a", "b", "c", "c"],
            "split": ["train", "train", "train", "train", "test", "test"],
            "lang": ["en", "en", "en", "en", "en", "de"],
            "text": ["x"] * 6,
            "origin": ["human"] * 6,
            "system": [None] * 6,
            "hop": [0] * 6,
            "parent_id": [None] * 6,
            "kind": ["comparable", "comparable", "translation", "translation", "translation", "comparable"],
        },
        images=images,
    )
    parallel = tables.parallel_table(
        {"split": ["train", "train", "val"], "src": ["a", "b", "c"], "tgt": ["x", "y", "z"]}
    )
    return Corpus(images, captions, {"en-de": parallel})


def test_count_tables_match_hand_counts() -> None:
    corpus = small_corpus()
    assert data.count_captions(corpus) == [
        {"split": "train", "lang": "en", "images": 2, "comparable": 2, "translation": 2},
        {"split": "test", "lang": "de", "images": 1, "comparable": 1, "translation": 0},
        {"split": "test", "lang": "en", "images": 1, "comparable": 0, "translation": 1},
    ]
    assert data.count_parallel(corpus) == [
        {"pair": "en-de", "split": "train", "pairs": 2},
        {"pair": "en-de", "split": "val", "pairs": 1},
    ]
