"""Examples of synthesized captions for the report: human pivot captions that the text-only MT and the MMT translated
differently, each with both translations, a human caption of the same image in the target language and the image.

The choice is deterministic: per target language, the source captions whose first-hop MT and MMT translations still
differ once whitespace is collapsed and case folded, one per image, the first ``count``: captions of kind
``translation`` first (the image's human caption in the target language is then a reference translation of the
source, as in Multi30K's task 1), then the others, each group in caption-id order.
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq

from common.errors import InputError
from common.paths import inside_root
from corpora.image_files import OUTSIDE_SETTING
from corpora.prepared import read_prepared
from report.markdown import literal
from report.tables import arrow

SYSTEMS = ("mt", "mmt")  # the `origin` of the two translations an example shows


@dataclass(frozen=True)
class Example:
    """A human caption translated differently by the two systems, and the image it describes.

    Attributes:
        image_id: The image.
        png: Its thumbnail.
        source_lang: The source caption's language (the pivot).
        source: The human caption that was translated.
        target_lang: The language it was translated into.
        mt: The text-only MT's translation (hop 1).
        mmt: The MMT's translation (hop 1).
        human: A human caption of the image in the target language (the image's first by kind, ``translation``
            before ``comparable``, then caption id); None when the image has none.
    """

    image_id: str
    png: bytes
    source_lang: str
    source: str
    target_lang: str
    mt: str
    mmt: str
    human: str | None


def differing_examples(
    synthesized: Sequence[Path], prepared: Path, images: Path, count: int, *, outside_allowed: bool = False
) -> list[Example]:
    """Up to ``count`` examples per target language (the order of ``synthesized``), chosen as the module says.

    Args:
        synthesized: The `synthesize` stage's caption files (one per target language; missing ones are skipped).
        prepared: The target corpus's prepared folder (its human captions and image paths).
        images: The folder the image paths are relative to.
        count: Examples per target language.
        outside_allowed: Image paths may lead out of ``images`` (``prepare.images_outside_root``).

    Raises:
        InputError: a sampled image's path leads out of ``images``, or the image cannot be read.
    """
    files = [path for path in synthesized if path.is_file()]
    if not files or count == 0:
        return []
    corpus = read_prepared(prepared)
    human = corpus.captions.filter(pc.equal(corpus.captions["origin"], "human")).to_pylist()
    sources = {row["caption_id"]: row for row in human}
    paths = dict(zip(corpus.images["image_id"].to_pylist(), corpus.images["path"].to_pylist(), strict=True))
    examples: list[Example] = []
    for path in files:
        translations = _first_hop(pq.read_table(path).to_pylist())
        shown: set[str] = set()
        for caption_id in sorted(translations, key=lambda caption: _source_order(sources.get(caption), caption)):
            (target, texts), source = translations[caption_id], sources.get(caption_id)
            if source is None or source["image_id"] in shown or set(texts) != set(SYSTEMS):
                continue
            if _normalised(texts["mt"]) == _normalised(texts["mmt"]):
                continue
            shown.add(source["image_id"])
            examples.append(
                Example(
                    image_id=source["image_id"],
                    png=thumbnail(
                        inside_root(
                            images,
                            paths[source["image_id"]],
                            f"{prepared / 'images.parquet'}: image {source['image_id']!r}",
                            outside_allowed=outside_allowed,
                            setting=OUTSIDE_SETTING,
                        )
                    ),
                    source_lang=source["lang"],
                    source=source["text"],
                    target_lang=target,
                    mt=texts["mt"],
                    mmt=texts["mmt"],
                    human=_human_caption(human, source["image_id"], target),
                )
            )
            if len(shown) == count:
                break
    return examples


def _first_hop(rows: Sequence[Mapping[str, Any]]) -> dict[str, tuple[str, dict[str, str]]]:
    """Source caption id -> (the target language, {origin: its first-hop translation})."""
    translations: dict[str, tuple[str, dict[str, str]]] = {}
    for row in rows:
        if row["hop"] == 1 and row["origin"] in SYSTEMS:
            translations.setdefault(row["parent_id"], (row["lang"], {}))[1][row["origin"]] = row["text"]
    return translations


def _source_order(source: Mapping[str, Any] | None, caption_id: str) -> tuple[bool, str]:
    return (source is None or source["kind"] != "translation", caption_id)


def _normalised(text: str) -> str:
    return " ".join(text.split()).casefold()


def _human_caption(human: Sequence[Mapping[str, Any]], image_id: str, lang: str) -> str | None:
    candidates = [row for row in human if row["image_id"] == image_id and row["lang"] == lang]
    if not candidates:
        return None
    return min(candidates, key=lambda row: (row["kind"] != "translation", row["caption_id"]))["text"]


EXAMPLES_HEADING = "Examples: where the MT and the MMT translate differently"
EXAMPLES_NOTE = (
    "Per target language, the first human captions (one per image; translation captions first, then by caption id) "
    "whose text-only MT and MMT translations (first hop) differ after whitespace and case are normalised; the last "
    "column is the image's own human caption in the target language: the source's reference translation where the "
    "source is a translation caption, else an independent description. index.html shows the images."
)


def examples_markdown(examples: Sequence[Example]) -> list[str]:
    """A section with a table per translation direction: image, source caption, both translations and the human
    target-language caption (``-`` where the image has none); captions are escaped so that they print as written."""
    if not examples:
        return []
    lines = [
        f"## {EXAMPLES_HEADING}",
        "",
        EXAMPLES_NOTE,
        "",
    ]
    directions = dict.fromkeys(f"{example.source_lang}-{example.target_lang}" for example in examples)
    for direction in directions:
        source, target = direction.split("-")
        lines += [
            f"### {arrow(direction)}",
            "",
            f"| image | {source} (human, translated) | MT | MMT | {target} (human, same image) |",
            "|---|---|---|---|---|",
        ]
        for example in (e for e in examples if f"{e.source_lang}-{e.target_lang}" == direction):
            cells = [example.image_id, example.source, example.mt, example.mmt, example.human or "-"]
            lines.append("| " + " | ".join(literal(cell) for cell in cells) + " |")
        lines.append("")
    return lines


def thumbnail(path: Path, size: int = 160) -> bytes:
    """PNG bytes of the image at ``path``, fitted into ``size`` x ``size``."""
    from PIL import Image

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(path) as original:
                image = original.convert("RGB")
    except (Image.DecompressionBombWarning, Image.DecompressionBombError) as error:
        raise InputError(f"{path}: too many pixels, a possible decompression bomb ({error})") from None
    except OSError as error:
        raise InputError(f"{path}: not a readable image ({error})") from None
    image.thumbnail((size, size))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()
