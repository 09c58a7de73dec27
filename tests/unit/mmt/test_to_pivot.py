"""The targets' human captions translated into the pivot (MULE's Table 4(b)): which captions a to-pivot pass
translates, the rows it writes, and the variants that take them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
import yaml

from common.checks import SettingError
from common.errors import InputError
from corpora import tables
from mmt.augment import VARIANTS, Variant, build_variant
from mmt.synthesis import SynthesisTask, select_sources, synthesize, to_pivot_mask, to_pivot_sources
from mmtr.params import ParamsError, parse_params
from tests.unit.mmt.test_synthesis import Recorder

IMAGES = tables.images_table(
    {
        "image_id": ["a", "b", "c"],
        "split": ["train", "train", "test"],
        "path": ["a", "b", "c"],
        "width": [None] * 3,
        "height": [None] * 3,
        "dataset": ["toy"] * 3,
    }
)
ROWS = [  # caption_id, image_id, split, lang, text, kind
    ("a#en#c1", "a", "train", "en", "A red circle.", "comparable"),
    ("a#de#c1", "a", "train", "de", "Ein roter Kreis.", "comparable"),
    ("a#de#t", "a", "train", "de", "Ein großer Kreis.", "translation"),
    ("b#en#c1", "b", "train", "en", "Two blue stars.", "comparable"),
    ("b#de#c1", "b", "train", "de", "Zwei blaue Sterne.", "comparable"),
    ("b#fr#c1", "b", "train", "fr", "Deux étoiles bleues.", "comparable"),
    ("c#de#c1", "c", "test", "de", "Ein Kreuz.", "comparable"),
]
REPO = Path(__file__).resolve().parents[3]
TO_PIVOT = SynthesisTask(system="mmt-de-en", origin="mmt", tgt_lang="en", hop=1, weights_sha256="w")


def human() -> pa.Table:
    names = ["caption_id", "image_id", "split", "lang", "text", "kind"]
    columns = dict(zip(names, zip(*ROWS, strict=True), strict=True))
    count = len(ROWS)
    return tables.captions_table(
        {
            **{name: list(values) for name, values in columns.items()},
            "origin": ["human"] * count,
            "system": [None] * count,
            "hop": [0] * count,
            "parent_id": [None] * count,
        },
        images=IMAGES,
    )


def test_a_to_pivot_pass_translates_the_targets_human_train_captions_into_the_pivot(tmp_path: Path) -> None:
    sources = to_pivot_sources(human(), target="de", split="train", kinds=["comparable"], source="toy")
    assert sources.column("caption_id").to_pylist() == ["a#de#c1", "b#de#c1"]  # not task 1's, not test's
    recorder = Recorder()
    out = synthesize(sources, TO_PIVOT, recorder, work=tmp_path, shard_size=8)
    assert recorder.calls == [["Ein roter Kreis.", "Zwei blaue Sterne."]]
    rows = [
        (row["caption_id"], row["image_id"], row["lang"], row["origin"], row["system"], row["hop"], row["parent_id"])
        for row in out.to_pylist()
    ]
    assert rows == [
        ("a#de#c1>mmt-de-en", "a", "en", "mmt", "mmt-de-en", 1, "a#de#c1"),
        ("b#de#c1>mmt-de-en", "b", "en", "mmt", "mmt-de-en", 1, "b#de#c1"),
    ]
    assert out.column("text").to_pylist() == ["<a> EIN ROTER KREIS.", "<b> ZWEI BLAUE STERNE."]
    tables.validate_captions(pa.concat_tables([human(), out]), images=IMAGES, source="toy")


def test_a_target_without_human_train_captions_is_an_error_naming_the_table() -> None:
    with pytest.raises(
        InputError,
        match=r"^toy: no human cs captions of kind comparable in the train split to translate into the pivot "
        r"\(synthesis\.to_pivot\)$",
    ):
        to_pivot_sources(human(), target="cs", split="train", kinds=["comparable"], source="toy")


def _synthesized(tmp_path: Path) -> pa.Table:
    """Both systems' forward pass of the English captions and their to-pivot pass of the German ones."""
    captions = human()
    english = select_sources(captions, lang="en", split="train", kinds=["comparable"])
    german = select_sources(captions, lang="de", split="train", kinds=["comparable"])
    parts = []
    for origin in ("mmt", "mt"):
        forward = SynthesisTask(f"{origin}-en-de", origin, "de", 1, "w")
        to_pivot = SynthesisTask(f"{origin}-de-en", origin, "en", 1, "w")
        parts.append(synthesize(english, forward, Recorder(), work=tmp_path, shard_size=8))
        parts.append(synthesize(german, to_pivot, Recorder(), work=tmp_path, shard_size=8))
    return pa.concat_tables(parts)


def _added(table: pa.Table) -> list[str]:
    return table.filter(pc.not_equal(table.column("origin"), "human")).column("caption_id").to_pylist()


def test_the_to_pivot_variants_take_only_their_systems_translations_into_the_pivot(tmp_path: Path) -> None:
    synthesized = _synthesized(tmp_path)
    assert to_pivot_mask(synthesized, "en").to_pylist() == [False, False, True, True] * 2
    mmt = build_variant(human(), synthesized, VARIANTS["mmt_to_pivot"], pivot="en")
    assert mmt.slice(0, len(ROWS)).equals(human())
    assert _added(mmt) == ["a#de#c1>mmt-de-en", "b#de#c1>mmt-de-en"]
    assert _added(build_variant(human(), synthesized, VARIANTS["mt_to_pivot"], pivot="en")) == [
        "a#de#c1>mt-de-en",
        "b#de#c1>mt-de-en",
    ]
    both = build_variant(human(), synthesized, Variant("mmt", hops=1, to_pivot=True), pivot="en")
    assert _added(both) == ["a#en#c1>mmt-en-de", "b#en#c1>mmt-en-de", "a#de#c1>mmt-de-en", "b#de#c1>mmt-de-en"]


def test_the_forward_variants_leave_the_translations_into_the_pivot_out(tmp_path: Path) -> None:
    synthesized = _synthesized(tmp_path)
    assert _added(build_variant(human(), synthesized, VARIANTS["mmt_f"], pivot="en")) == [
        "a#en#c1>mmt-en-de",
        "b#en#c1>mmt-en-de",
    ]
    assert _added(build_variant(human(), synthesized, VARIANTS["mmt_fb"], pivot="en")) == []


def test_to_pivot_reads_in_the_variant_name_and_needs_a_system() -> None:
    assert Variant("mmt", to_pivot=True).display_name() == "MMT(t→p)"
    assert Variant("mt", hops=2, to_pivot=True).display_name() == "MT(f)+(f+b)+(t→p)"
    with pytest.raises(SettingError, match=r"^origin: missing: to_pivot needs a system to translate with"):
        Variant(to_pivot=True)
    with pytest.raises(SettingError, match=r"^hops: got 0, allowed: 1 to 8 with origin mmt$"):
        Variant("mmt")


def _params_tree(**synthesis: object) -> dict[str, Any]:
    tree = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
    tree["synthesis"].update(synthesis)
    tree["augment"]["custom_variants"] = {"both_ways": {"origin": "mmt", "hops": 1, "to_pivot": True}}
    tree["retrieval"]["variants"] = ["none", "mmt_to_pivot", "both_ways"]
    return tree


def test_a_variant_with_translations_into_the_pivot_needs_the_synthesis_to_make_them() -> None:
    with pytest.raises(
        ParamsError,
        match=r"retrieval\.variants\[1\]: mmt_to_pivot adds the targets' captions translated into the pivot; set "
        r"synthesis\.to_pivot$",
    ):
        parse_params(_params_tree())
    params = parse_params(_params_tree(to_pivot=True))
    assert params.augment.variants["both_ways"] == Variant("mmt", hops=1, to_pivot=True)
    assert params.augment.variant_labels()["both_ways"] == "MMT(f)+(t→p)"
