"""Synthesized captions for the report page: thumbnails, and for the first train images that were translated, a
human caption with each system's chain of captions translated from it."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
from PIL import Image

from corpora import tables
from report.samples import Sample, sample_captions, thumbnail


def _png(path: Path, size: tuple[int, int], mode: str = "RGB", colour: Any = (200, 30, 30)) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new(mode, size, colour).save(path)


def _decoded(png: bytes) -> Image.Image:
    image = Image.open(io.BytesIO(png))
    assert image.format == "PNG"
    return image


def test_thumbnail_fits_the_box_and_keeps_small_images(tmp_path: Path) -> None:
    _png(tmp_path / "wide.png", (320, 200))
    _png(tmp_path / "small.png", (50, 40), mode="L", colour=90)
    wide = _decoded(thumbnail(tmp_path / "wide.png"))
    assert wide.size == (160, 100) and wide.mode == "RGB" and wide.getpixel((80, 50)) == (200, 30, 30)
    small = _decoded(thumbnail(tmp_path / "small.png", size=64))
    assert small.size == (50, 40) and small.mode == "RGB" and small.getpixel((0, 0)) == (90, 90, 90)


def _sampled_rows() -> list[dict[str, Any]]:
    """Image a: human en c1 -> mmt de (hop 1) -> mmt en (hop 2) -> mmt de (hop 3), c1 -> mmt fr (hop 1) and
    c1 -> mt de (hop 1); a second human caption without translations. Image b: human only. Image c (test split):
    translated, but not a train image. Image d: the second sampled one (MMT only)."""

    def row(
        caption_id: str,
        image_id: str,
        lang: str,
        text: str,
        parent: str | None = None,
        hop: int = 0,
        system: str | None = None,
        split: str = "train",
    ) -> dict[str, Any]:
        return {
            "caption_id": caption_id,
            "image_id": image_id,
            "split": split,
            "lang": lang,
            "text": text,
            "origin": "human" if system is None else system.partition("-")[0],
            "system": system,
            "hop": hop,
            "parent_id": parent,
            "kind": "comparable",
        }

    return [
        row("a#en#c0", "a", "en", "an untranslated caption"),
        row("a#en#c1", "a", "en", "a red circle"),
        row("b#en#c1", "b", "en", "a blue star"),
        row("c#en#c1", "c", "en", "a green heart", split="test"),
        row("d#en#c1", "d", "en", "a black square"),
        row("a#en#2", "a", "en", "a red ring", "a#de#1", 2, "mmt-de-en"),  # before its parent: order is by hop
        row("a#de#1", "a", "de", "ein roter Kreis", "a#en#c1", 1, "mmt-en-de"),
        row("a#fr#1", "a", "fr", "un cercle rouge", "a#en#c1", 1, "mmt-en-fr"),
        row("a#de#3", "a", "de", "ein roter Ring", "a#en#2", 3, "mmt-en-de"),
        row("a#de#mt1", "a", "de", "ein rotes Rund", "a#en#c1", 1, "mt-en-de"),
        row("c#de#1", "c", "de", "ein grünes Herz", "c#en#c1", 1, "mmt-en-de", split="test"),
        row("d#de#1", "d", "de", "ein schwarzes Quadrat", "d#en#c1", 1, "mmt-en-de"),
    ]


def _write_captions(root: Path) -> tuple[list[Path], Path, Path]:
    """The prepared folder (images, human captions), synthesize's files de.parquet and fr.parquet, the images."""
    rows = _sampled_rows()
    ids, splits = ["a", "b", "c", "d"], ["train", "train", "test", "train"]
    images = tables.images_table(
        {
            "image_id": ids,
            "split": splits,
            "path": [f"pics/{i}.png" for i in ids],
            "width": [None] * 4,
            "height": [None] * 4,
            "dataset": ["toy"] * 4,
        }
    )
    tables.write_images(images, root / "prepared" / "images.parquet")

    captions = tables.captions_table(
        {name: [r[name] for r in rows] for name in tables.CAPTIONS_SCHEMA.names}, images=images
    )
    human = captions.filter(pc.equal(captions["origin"], "human"))
    tables.write_captions(human, root / "prepared" / "captions.parquet")
    synthesized = [root / "synthesized" / f"{target}.parquet" for target in ("de", "fr")]
    for path, target in zip(synthesized, ("de", "fr"), strict=True):  # as the synthesize stage writes them
        tables.write_parquet(captions.filter(pc.match_substring(captions["system"], target)), path)
    for index, image_id in enumerate(ids):
        _png(root / "images" / "pics" / f"{image_id}.png", (200, 100 + 20 * index))
    return synthesized, root / "prepared", root / "images"


def test_sample_captions_put_each_systems_chain_beside_the_human_caption(tmp_path: Path) -> None:
    synthesized, prepared, images = _write_captions(tmp_path)
    samples = sample_captions(synthesized, prepared, images, count=5)
    assert [sample.image_id for sample in samples] == ["a", "d"]  # b: nothing synthesized; c: a test image
    assert samples[0] == Sample(
        "a",
        thumbnail(images / "pics" / "a.png"),
        ("human en", "a red circle"),
        (
            ("mt", (("mt-en-de hop 1 de", "ein rotes Rund"),)),
            (
                "mmt",
                (
                    ("mmt-en-de hop 1 de", "ein roter Kreis"),
                    ("mmt-de-en hop 2 en", "a red ring"),
                    ("mmt-en-de hop 3 de", "ein roter Ring"),
                    ("mmt-en-fr hop 1 fr", "un cercle rouge"),
                ),
            ),
        ),
    )
    assert samples[1].human == ("human en", "a black square")
    assert samples[1].chains == (("mmt", (("mmt-en-de hop 1 de", "ein schwarzes Quadrat"),)),)
    assert _decoded(samples[1].png).size == (160, 128)  # d.png is 200 x 160
    assert [s.image_id for s in sample_captions(synthesized, prepared, images, count=1)] == ["a"]


def test_sample_captions_skip_missing_files_and_count_zero(tmp_path: Path) -> None:
    synthesized, prepared, images = _write_captions(tmp_path)
    only_fr = sample_captions([tmp_path / "none.parquet", synthesized[1]], prepared, images, count=5)
    french = ("mmt", (("mmt-en-fr hop 1 fr", "un cercle rouge"),))
    assert [(s.image_id, s.chains) for s in only_fr] == [("a", (french,))]
    assert sample_captions(synthesized, prepared, images, count=0) == []
    assert sample_captions([tmp_path / "nowhere.parquet"], prepared, images, count=3) == []
