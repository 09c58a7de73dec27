"""Caption variants: their checks, kept hops, display names, and the synthesized rows each one takes."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from common.checks import SettingError
from corpora.tables import CAPTIONS_SCHEMA
from mmt.augment import RETIRED, VARIANTS, Variant, build_variant
from mmt.config import AugmentConfig


def test_presets_keep_their_hops_and_read_as_in_the_paper() -> None:
    shown = {name: (variant.kept_hops(), variant.display_name()) for name, variant in VARIANTS.items()}
    assert shown == {  # section 4.2: MMT(f+b) = English plus MMT-translated English, the k-th pass alone
        "none": ((), "-"),
        "mt_f": ((1,), "MT(f)"),
        "mt_fb": ((2,), "MT(f+b)"),
        "mt_fbf": ((3,), "MT(f+b+f)"),
        "mt_fbfb": ((4,), "MT(f+b+f+b)"),
        "mt_f_fb": ((1, 2), "MT(f)+(f+b)"),
        "mmt_f": ((1,), "MMT(f)"),
        "mmt_fb": ((2,), "MMT(f+b)"),
        "mmt_fbf": ((3,), "MMT(f+b+f)"),
        "mmt_fbfb": ((4,), "MMT(f+b+f+b)"),
        "mmt_f_fb": ((1, 2), "MMT(f)+(f+b)"),
        "mt_to_pivot": ((), "MT(t→p)"),
        "mmt_to_pivot": ((), "MMT(t→p)"),
    }


def test_kept_hops_are_sorted_and_the_name_shows_each_kept_hop_not_the_passes_after_it() -> None:
    assert Variant("mmt", hops=3, keep=(3, 1)).kept_hops() == (1, 3)
    assert Variant("mmt", hops=3, keep=(3, 1)).display_name() == "MMT(f)+(f+b+f)"
    assert Variant("mt", hops=2, keep=(2, 1)).display_name() == "MT(f)+(f+b)"
    assert Variant("mt", hops=4).display_name() == "MT(f)+(f+b)+(f+b+f)+(f+b+f+b)"
    assert Variant("mmt", hops=3, keep=(2,)).display_name() == "MMT(f+b)"  # hop 3 is made, its captions not kept


def test_the_retired_back_translation_names_say_what_they_are_now() -> None:
    assert RETIRED == {
        "mt_b": "mt_b is retired: the back-translated pivot captions alone (hop 2) are now mt_fb, MT(f+b) as the "
        "paper defines it; hops 1 and 2 together are mt_f_fb",
        "mmt_b": "mmt_b is retired: the back-translated pivot captions alone (hop 2) are now mmt_fb, MMT(f+b) as "
        "the paper defines it; hops 1 and 2 together are mmt_f_fb",
    }
    assert not set(RETIRED) & set(VARIANTS)


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"origin": None, "hops": 2}, r"^origin: missing: hops 2 need a system to translate with \(mt or mmt\)$"),
        ({"origin": "mmt", "hops": 0}, r"^hops: got 0, allowed: 1 to 8 with origin mmt$"),
        ({"origin": "mmt", "hops": 9}, r"^hops: got 9, allowed: 0 to 8$"),
        ({"origin": "nmt", "hops": 1}, r"^origin: got 'nmt', allowed: mt, mmt or null$"),
        ({"origin": "mt", "hops": 2, "keep": (3,)}, r"^keep\[0\]: got 3, allowed: a hop from 1 to 2$"),
        ({"origin": "mt", "hops": 2, "keep": (0,)}, r"^keep\[0\]: got 0, allowed: a hop from 1 to 2$"),
        ({"keep": (1,)}, r"^keep\[0\]: got 1, allowed: none \(this variant has no hops\)$"),
        ({"origin": "mt", "hops": 2, "keep": (2, 2)}, r"^keep: got \[2, 2\]: a hop is listed twice$"),
    ],
)
def test_bad_variants_name_the_field(fields: dict[str, Any], expected: str) -> None:
    with pytest.raises(SettingError, match=expected):
        Variant(**fields)


def test_custom_variants_come_after_the_presets_and_may_not_shadow_them() -> None:
    own = Variant("mmt", hops=3, keep=(2,))
    assert list(AugmentConfig({"paraphrases": own}).variants) == [*VARIANTS, "paraphrases"]
    assert AugmentConfig({"paraphrases": own}).variants["paraphrases"] is own
    with pytest.raises(SettingError, match=r"^custom_variants\.mmt_fb: a preset has this name; presets: none, "):
        AugmentConfig({"mmt_fb": own})
    for bad in ("mmt-b", "Mmt", "2hops", ""):
        with pytest.raises(SettingError, match=rf"^custom_variants\.{bad}: got '{bad}', allowed: lowercase letters"):
            AugmentConfig({bad: own})


def _captions(rows: list[tuple[str, str, str, str | None, int, str | None]]) -> pa.Table:
    """(caption_id, lang, origin, system, hop, parent_id) rows of one train image, unvalidated (as a synthesized
    file is: its first hop's parents live in the prepared table)."""
    records = [
        {
            "caption_id": caption_id,
            "image_id": "a",
            "split": "train",
            "lang": lang,
            "text": f"text of {caption_id}",
            "origin": origin,
            "system": system,
            "hop": hop,
            "parent_id": parent,
            "kind": "comparable",
        }
        for caption_id, lang, origin, system, hop, parent in rows
    ]
    return pa.Table.from_pylist(records, schema=CAPTIONS_SCHEMA)


PREPARED = _captions([("h1", "en", "human", None, 0, None), ("h2", "de", "human", None, 0, None)])
SYNTHESIZED = _captions(
    [
        ("h1>mmt-en-de", "de", "mmt", "mmt-en-de", 1, "h1"),
        ("h1>mmt-en-de>mmt-de-en", "en", "mmt", "mmt-de-en", 2, "h1>mmt-en-de"),
        ("h1>mmt-en-de>mmt-de-en>mmt-en-de", "de", "mmt", "mmt-en-de", 3, "h1>mmt-en-de>mmt-de-en"),
        ("h1>mt-en-de", "de", "mt", "mt-en-de", 1, "h1"),
        ("h1>mt-en-de>mt-de-en", "en", "mt", "mt-de-en", 2, "h1>mt-en-de"),
    ]
)


def _synthesized_rows(variant: Variant) -> list[tuple[str, str, str]]:
    """(caption_id, lang, parent_id) of the synthesized rows ``variant`` adds to PREPARED."""
    table = build_variant(PREPARED, SYNTHESIZED, variant, pivot="en")
    assert table.slice(0, PREPARED.num_rows).equals(PREPARED)
    added = table.filter(pc.not_equal(table.column("origin"), "human"))
    columns = (added.column(name).to_pylist() for name in ("caption_id", "lang", "parent_id"))
    return list(zip(*columns, strict=True))


def test_a_variant_takes_the_kept_hops_of_its_own_system() -> None:
    assert build_variant(PREPARED, SYNTHESIZED, VARIANTS["none"], pivot="en").equals(PREPARED)
    assert _synthesized_rows(VARIANTS["mt_f"]) == [("h1>mt-en-de", "de", "h1")]
    assert [row[0] for row in _synthesized_rows(VARIANTS["mt_f_fb"])] == ["h1>mt-en-de", "h1>mt-en-de>mt-de-en"]
    assert [row[0] for row in _synthesized_rows(VARIANTS["mmt_f_fb"])] == SYNTHESIZED.column("caption_id")[
        :2
    ].to_pylist()


def test_the_k_pass_variant_holds_the_kth_pass_alone_parented_by_the_human_captions() -> None:
    assert _synthesized_rows(VARIANTS["mmt_fb"]) == [("h1>mmt-en-de>mmt-de-en", "en", "h1")]
    assert _synthesized_rows(VARIANTS["mt_fb"]) == [("h1>mt-en-de>mt-de-en", "en", "h1")]
    assert _synthesized_rows(VARIANTS["mmt_fbf"]) == [("h1>mmt-en-de>mmt-de-en>mmt-en-de", "de", "h1")]


def test_a_dropped_middle_hop_points_parents_at_the_nearest_kept_ancestor() -> None:
    assert _synthesized_rows(Variant("mmt", hops=3, keep=(1, 3))) == [
        ("h1>mmt-en-de", "de", "h1"),
        ("h1>mmt-en-de>mmt-de-en>mmt-en-de", "de", "h1>mmt-en-de"),
    ]
    assert _synthesized_rows(Variant("mmt", hops=3, keep=(3,))) == [("h1>mmt-en-de>mmt-de-en>mmt-en-de", "de", "h1")]
