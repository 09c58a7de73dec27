"""Metrics files hold numbers only; everything else goes to the notes beside them, and reading joins them back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from common.metrics_files import is_notes_file, join_numbers, notes_path, read_metrics, split_numbers, write_metrics

# the shape of train_mmt's and train_retrieval's metrics: numbers, signatures, a reason in place of a number, a null,
# a list of seeds, an empty mapping and a mapping with no number at all
TREE = {
    "bleu": 75.23,
    "bleu_signature": "nrefs:1|case:lc|tok:none",
    "contrastive": "the corpus has no contrastive items for this direction",
    "image_awareness": None,
    "meteor": {"score": 51.2, "note": "METEOR 1.5"},
    "de": {"i2t": {"r1": 55.0, "r5": 85, "medr": 1.0}, "rsum": 428.0},
    "seeds": [0, 1, 2],
    "translate_search": {},
    "flags": {"shuffled": True, "protocol": "full"},
}


def test_the_numbers_and_the_notes_part_at_each_key_path() -> None:
    numbers, notes = split_numbers(TREE)
    assert numbers == {
        "bleu": 75.23,
        "meteor": {"score": 51.2},
        "de": {"i2t": {"r1": 55.0, "r5": 85, "medr": 1.0}, "rsum": 428.0},
    }
    assert notes == {
        "bleu_signature": "nrefs:1|case:lc|tok:none",
        "contrastive": "the corpus has no contrastive items for this direction",
        "image_awareness": None,
        "meteor": {"note": "METEOR 1.5"},
        "seeds": [0, 1, 2],
        "translate_search": {},
        "flags": {"shuffled": True, "protocol": "full"},  # a boolean is not a metric
    }


def test_a_round_trip_through_the_files_gives_the_tree_with_its_keys_sorted(tmp_path: Path) -> None:
    path = tmp_path / "mmt-en-de.json"
    write_metrics(path, TREE)
    assert notes_path(path) == tmp_path / "mmt-en-de.notes.json"
    written = json.loads(path.read_text())
    assert "bleu_signature" not in written and written["bleu"] == 75.23
    assert read_metrics(path) == TREE
    assert list(read_metrics(path)) == sorted(TREE)
    assert json.dumps(read_metrics(path)) == json.dumps(TREE, sort_keys=True)


def test_a_tree_of_numbers_gets_an_empty_notes_file_and_an_old_file_reads_alone(tmp_path: Path) -> None:
    write_metrics(tmp_path / "features.json", {"regions": 36, "probe": {"color": 0.9}})
    assert json.loads((tmp_path / "features.notes.json").read_text()) == {}
    (tmp_path / "old.json").write_text('{"bleu": 1.5, "bleu_signature": "x"}\n')
    assert read_metrics(tmp_path / "old.json") == {"bleu": 1.5, "bleu_signature": "x"}


def test_a_key_in_both_files_that_cannot_be_joined_is_refused() -> None:
    with pytest.raises(ValueError, match="bleu: in both"):
        join_numbers({"bleu": 1.0}, {"bleu": "n/a"})


def test_notes_files_are_told_apart_from_metrics_files() -> None:
    assert is_notes_file("data/metrics/mmt/mt-en-de.notes.json")
    assert not is_notes_file("data/metrics/mmt/mt-en-de.json")
