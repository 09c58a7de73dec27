"""Round-trip change share: hand-made pairs, token-level comparison, errors."""

from __future__ import annotations

import pyarrow as pa
import pytest

from mmt.diversity import changed_share, round_trip_changes, tokenized


def test_changed_share_counts_pairs_whose_tokens_differ() -> None:
    sources = ["A red circle.", "Two blue stars.", "A big cross.", "A star."]
    results = ["a red circle .", "Two stars that are blue.", "A  BIG cross.", "A small star."]
    # 1: same tokens (case and spacing only); 2: rewritten; 3: same; 4: an added word -> 2 of 4 changed
    assert changed_share(sources, results, "en") == 0.5


def test_changed_share_edge_cases() -> None:
    assert changed_share([], [], "en") == 0.0
    assert changed_share(["Ein Kreis."], ["Ein Kreis ."], "de") == 0.0
    with pytest.raises(ValueError, match="2 sources but 1 results"):
        changed_share(["a", "b"], ["a"], "en")


def test_tokens_are_lowercased_moses_tokens_without_escapes() -> None:
    assert tokenized(["Don't move, Bob's hat!"], "en") == [["don", "'t", "move", ",", "bob", "'s", "hat", "!"]]


def _captions(rows: list[tuple[str, str, str, str | None]]) -> pa.Table:
    ids, langs, texts, parents = (list(column) for column in zip(*rows, strict=True))
    return pa.table({"caption_id": ids, "lang": langs, "text": texts, "parent_id": parents})


def test_round_trips_compare_each_hop_with_the_caption_two_hops_up() -> None:
    sources = _captions([("h1", "en", "A red circle.", None), ("h2", "en", "Two stars.", None)])
    hop1 = _captions([("f1", "de", "Ein roter Kreis.", "h1"), ("f2", "de", "Zwei Sterne.", "h2")])
    hop2 = _captions([("b2", "en", "Two stars.", "f2"), ("b1", "en", "A red ring.", "f1")])  # order differs
    hop3 = _captions([("g1", "de", "Ein roter Ring.", "b1"), ("g2", "de", "Zwei Sterne .", "b2")])
    assert round_trip_changes(sources, [hop1, hop2, hop3]) == {
        # b1 differs from h1, b2 equals h2; "ring" is the one word the human captions never use (6 types in all)
        "hop2": {"captions": 2, "changed": 0.5, "token_types": 6, "new_types": 1},
        # g1 differs from f1, g2 equals f2 up to spacing; "ring" is new against hop 1 ("kreis" is gone)
        "hop3": {"captions": 2, "changed": 0.5, "token_types": 6, "new_types": 1},
    }
    assert round_trip_changes(sources, [hop1]) == {}
