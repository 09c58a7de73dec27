"""Synthesis provenance, resuming from finished shards, variants and lexical diversity."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pytest

from corpora import tables
from mmt.augment import VARIANTS, build_variant
from mmt.diversity import lexical_diversity
from mmt.synthesis import SynthesisTask, hop_languages, select_sources, synthesize


def prepared() -> pa.Table:
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
    rows = [
        ("a#en#c1", "a", "train", "en", "A red circle.", "comparable"),
        ("a#en#c2", "a", "train", "en", "A circle.", "comparable"),
        ("a#en#t", "a", "train", "en", "A big circle.", "translation"),
        ("b#en#c1", "b", "train", "en", "Two blue stars.", "comparable"),
        ("b#de#c1", "b", "train", "de", "Zwei blaue Sterne.", "comparable"),
        ("c#en#c1", "c", "test", "en", "A cross.", "comparable"),
    ]
    columns = dict(
        zip(["caption_id", "image_id", "split", "lang", "text", "kind"], zip(*rows, strict=True), strict=True)
    )
    count = len(rows)
    return tables.captions_table(
        {
            **{k: list(v) for k, v in columns.items()},
            "origin": ["human"] * count,
            "system": [None] * count,
            "hop": [0] * count,
            "parent_id": [None] * count,
        },
        images=images,
    )


class Recorder:
    def __init__(self, fail_on: str | None = None) -> None:
        self.calls: list[list[str]] = []
        self.fail_on = fail_on

    def __call__(self, texts: Sequence[str], image_ids: Sequence[str]) -> list[str]:
        if self.fail_on in texts:
            raise KeyboardInterrupt("killed")
        self.calls.append(list(texts))
        return [f"<{image_id}> {text.upper()}" for text, image_id in zip(texts, image_ids, strict=True)]


FORWARD = SynthesisTask(system="mmt-en-de", origin="mmt", tgt_lang="de", hop=1, weights_sha256="w1")


def test_sources_are_human_captions_of_one_language_split_and_kind() -> None:
    sources = select_sources(prepared(), lang="en", split="train", kinds=["comparable"])
    assert sources.column("caption_id").to_pylist() == ["a#en#c1", "a#en#c2", "b#en#c1"]


def test_synthesized_rows_carry_their_provenance(tmp_path: Path) -> None:
    sources = select_sources(prepared(), lang="en", split="train", kinds=["comparable"])
    out = synthesize(sources, FORWARD, Recorder(), work=tmp_path, shard_size=2)
    assert out.column("caption_id").to_pylist() == ["a#en#c1>mmt-en-de", "a#en#c2>mmt-en-de", "b#en#c1>mmt-en-de"]
    assert out.column("text").to_pylist()[0] == "<a> A RED CIRCLE."
    assert set(out.column("lang").to_pylist()) == {"de"} and set(out.column("hop").to_pylist()) == {1}
    assert out.column("parent_id").to_pylist() == sources.column("caption_id").to_pylist()
    assert out.column("system").to_pylist() == ["mmt-en-de"] * 3 and out.schema == tables.CAPTIONS_SCHEMA


def test_a_killed_run_resumes_from_finished_shards(tmp_path: Path) -> None:
    sources = select_sources(prepared(), lang="en", split="train", kinds=["comparable"])
    with pytest.raises(KeyboardInterrupt):
        synthesize(sources, FORWARD, Recorder(fail_on="Two blue stars."), work=tmp_path, shard_size=2)
    again = Recorder()
    out = synthesize(sources, FORWARD, again, work=tmp_path, shard_size=2)
    assert again.calls == [["Two blue stars."]]  # the first shard was not translated again
    assert out.num_rows == 3
    retrained = Recorder()
    synthesize(sources, SynthesisTask("mmt-en-de", "mmt", "de", 1, "w2"), retrained, work=tmp_path, shard_size=2)
    assert len(retrained.calls) == 2  # other weights: nothing reused


def test_variants_take_the_right_hops_and_origins(tmp_path: Path) -> None:
    captions = prepared()
    sources = select_sources(captions, lang="en", split="train", kinds=["comparable"])
    forward = synthesize(sources, FORWARD, Recorder(), work=tmp_path, shard_size=8)
    backward = synthesize(
        forward, SynthesisTask("mmt-de-en", "mmt", "en", 2, "w"), Recorder(), work=tmp_path, shard_size=8
    )
    text_only = synthesize(
        sources, SynthesisTask("mt-en-de", "mt", "de", 1, "w"), Recorder(), work=tmp_path, shard_size=8
    )
    synthesized = pa.concat_tables([forward, backward, text_only])
    sizes = {
        name: build_variant(captions, synthesized, VARIANTS[name], pivot="en").num_rows
        for name in ("none", "mmt_f", "mmt_fb", "mmt_f_fb", "mt_f", "mt_f_fb")
    }
    assert sizes == {"none": 6, "mmt_f": 9, "mmt_fb": 9, "mmt_f_fb": 12, "mt_f": 9, "mt_f_fb": 9}
    assert backward.column("parent_id").to_pylist() == forward.column("caption_id").to_pylist()


def test_passes_alternate_starting_forward() -> None:
    assert [hop_languages(hop, "en", "de") for hop in (1, 2, 3, 4)] == [("en", "de"), ("de", "en")] * 2


def test_lexical_diversity_counts_lowercased_moses_tokens_and_bigrams_of_the_train_split() -> None:
    # en train: "a red circle ." "a circle ." "a big circle ." "two blue stars ." -> 8 types; bigrams:
    # a-red red-circle circle-. a-circle a-big big-circle two-blue blue-stars stars-. -> 9 (the test "a cross ." not)
    assert lexical_diversity(prepared()) == {
        "de": {"token_types": 4, "bigrams": 3},
        "en": {"token_types": 8, "bigrams": 9},
    }
