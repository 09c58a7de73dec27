"""Examples for the report: captions the text-only MT and the MMT translated differently, chosen deterministically,
with the human caption of the same image in the target language and the image's thumbnail."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
from PIL import Image

from corpora import tables
from report.samples import EXAMPLES_NOTE, Example, differing_examples, examples_markdown, thumbnail


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


def _row(
    caption_id: str,
    image_id: str,
    lang: str,
    text: str,
    parent: str | None = None,
    hop: int = 0,
    system: str | None = None,
    kind: str = "comparable",
) -> dict[str, Any]:
    return {
        "caption_id": caption_id,
        "image_id": image_id,
        "split": "train",
        "lang": lang,
        "text": text,
        "origin": "human" if system is None else system.partition("-")[0],
        "system": system,
        "hop": hop,
        "parent_id": parent,
        "kind": kind,
    }


def _rows() -> list[dict[str, Any]]:
    """Image a: c1's translations differ only in case and spacing, c2's differ; two human German captions (the
    translation caption is shown). Image b: the MT did not translate it. Image c: differs, no German caption.
    Image d: two differing captions (one example per image), c2 a translation caption with its German reference,
    so it comes first of all. Hop 2 and French rows beside them."""
    return [
        _row("a#en#c1", "a", "en", "a red circle"),
        _row("a#en#c2", "a", "en", "a red ring"),
        _row("a#de#c1", "a", "de", "ein Kreis"),
        _row("a#de#t", "a", "de", "ein roter Ring <b>&</b>", kind="translation"),
        _row("b#en#c1", "b", "en", "a blue star"),
        _row("c#en#c1", "c", "en", "a green heart"),
        _row("d#en#c1", "d", "en", "a black | square"),
        _row("d#en#c2", "d", "en", "a black box", kind="translation"),
        _row("d#de#t", "d", "de", "eine schwarze Schachtel", kind="translation"),
        _row("a#de#c1>mt", "a", "de", "ein roter Kreis", "a#en#c1", 1, "mt-en-de"),
        _row("a#de#c1>mmt", "a", "de", "Ein  roter  KREIS ", "a#en#c1", 1, "mmt-en-de"),
        _row("a#de#c2>mt", "a", "de", "ein rotes Rund", "a#en#c2", 1, "mt-en-de"),
        _row("a#de#c2>mmt", "a", "de", "ein roter Ring", "a#en#c2", 1, "mmt-en-de"),
        _row("a#de#c2>mmt>en", "a", "en", "a red ring", "a#de#c2>mmt", 2, "mmt-de-en"),
        _row("b#de#c1>mmt", "b", "de", "ein blauer Stern", "b#en#c1", 1, "mmt-en-de"),
        _row("c#de#c1>mt", "c", "de", "ein grünes Herz", "c#en#c1", 1, "mt-en-de"),
        _row("c#de#c1>mmt", "c", "de", "ein grünes Herzchen", "c#en#c1", 1, "mmt-en-de"),
        _row("d#de#c2>mt", "d", "de", "eine schwarze Kiste", "d#en#c2", 1, "mt-en-de"),
        _row("d#de#c2>mmt", "d", "de", "ein schwarzer Kasten", "d#en#c2", 1, "mmt-en-de"),
        _row("d#de#c1>mt", "d", "de", "ein schwarzes | Quadrat", "d#en#c1", 1, "mt-en-de"),
        _row("d#de#c1>mmt", "d", "de", "ein *schwarzes* Quadrat", "d#en#c1", 1, "mmt-en-de"),
        _row("a#fr#c2>mt", "a", "fr", "un anneau", "a#en#c2", 1, "mt-en-fr"),
        _row("a#fr#c2>mmt", "a", "fr", "un anneau rouge", "a#en#c2", 1, "mmt-en-fr"),
    ]


def _write(root: Path) -> tuple[list[Path], Path, Path]:
    """The prepared folder (images, human captions), synthesize's de.parquet and fr.parquet, the images."""
    rows = _rows()
    ids = ["a", "b", "c", "d"]
    images = tables.images_table(
        {
            "image_id": ids,
            "split": ["train"] * 4,
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
    tables.write_captions(
        captions.filter(pc.equal(captions["origin"], "human")), root / "prepared" / "captions.parquet"
    )
    synthesized = [root / "synthesized" / f"{target}.parquet" for target in ("de", "fr")]
    for path, target in zip(synthesized, ("de", "fr"), strict=True):  # as the synthesize stage writes them
        tables.write_parquet(captions.filter(pc.match_substring(captions["system"], target)), path)
    for index, image_id in enumerate(ids):
        _png(root / "images" / "pics" / f"{image_id}.png", (200, 100 + 20 * index))
    return synthesized, root / "prepared", root / "images"


def test_examples_are_the_first_differing_captions_one_per_image(tmp_path: Path) -> None:
    synthesized, prepared, images = _write(tmp_path)
    examples = differing_examples(synthesized, prepared, images, count=5)
    assert [(e.target_lang, e.image_id) for e in examples] == [("de", "d"), ("de", "a"), ("de", "c"), ("fr", "a")]
    # the translation caption leads, with its reference translation as the human caption
    assert (examples[0].source, examples[0].human) == ("a black box", "eine schwarze Schachtel")
    assert examples[1] == Example(
        image_id="a",
        png=thumbnail(images / "pics" / "a.png"),
        source_lang="en",
        source="a red ring",  # c1's translations are the same once case and spaces are normalised
        target_lang="de",
        mt="ein rotes Rund",
        mmt="ein roter Ring",
        human="ein roter Ring <b>&</b>",  # the translation caption before the comparable one
    )
    assert examples[2].human is None  # image c has no German caption
    assert examples[3].human is None and examples[3].mmt == "un anneau rouge"
    assert _decoded(examples[0].png).size == (160, 128)  # d.png is 200 x 160
    first_each = differing_examples(synthesized, prepared, images, count=1)
    assert [(e.target_lang, e.image_id) for e in first_each] == [("de", "d"), ("fr", "a")]


def test_no_files_or_count_zero_give_no_examples(tmp_path: Path) -> None:
    synthesized, prepared, images = _write(tmp_path)
    assert [
        e.target_lang for e in differing_examples([tmp_path / "no.parquet", synthesized[1]], prepared, images, 3)
    ] == ["fr"]
    assert differing_examples(synthesized, prepared, images, count=0) == []
    assert differing_examples([tmp_path / "nowhere.parquet"], prepared, images, count=3) == []


def test_examples_markdown_escapes_captions_and_groups_directions() -> None:
    example = Example("d", b"", "en", "a black | square", "de", "ein *schwarzes* Quadrat", "ein `Quadrat`", None)
    french = Example("a", b"", "en", "a red ring", "fr", "un anneau", "un anneau rouge", "un anneau <rouge>")
    assert examples_markdown([example, french]) == [
        "## Examples: where the MT and the MMT translate differently",
        "",
        EXAMPLES_NOTE,
        "",
        "### en→de",
        "",
        "| image | en (human, translated) | MT | MMT | de (human, same image) |",
        "|---|---|---|---|---|",
        r"| d | a black \| square | ein \*schwarzes\* Quadrat | ein \`Quadrat\` | - |",
        "",
        "### en→fr",
        "",
        "| image | en (human, translated) | MT | MMT | fr (human, same image) |",
        "|---|---|---|---|---|",
        r"| a | a red ring | un anneau | un anneau rouge | un anneau \<rouge\> |",
        "",
    ]
    assert examples_markdown([]) == []
