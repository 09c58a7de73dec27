"""Synthesized captions for the report page: for a few train images, one human caption and, per system kind
(text-only MT, MMT), the chain of captions translated from it, with the image's thumbnail.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq

# the columns of a sample on the page: the text-only system, then the multimodal one (the `origin` column)
SAMPLED_ORIGINS = {"mt": "MT (text-only)", "mmt": "MMT (with the image)"}

Chain = tuple[tuple[str, str], ...]  # (label, text) of each caption, hop after hop


@dataclass(frozen=True)
class Sample:
    """An image, one of its human captions, and per system kind the captions synthesized from that caption.

    Attributes:
        image_id: The image.
        png: Its thumbnail.
        human: (label, text) of the human caption, e.g. ("human en", "A red circle.").
        chains: (origin, its chain) for each origin of :data:`SAMPLED_ORIGINS` that translated the caption, in
            that order.
    """

    image_id: str
    png: bytes
    human: tuple[str, str]
    chains: tuple[tuple[str, Chain], ...]


def sample_captions(synthesized: Sequence[Path], prepared: Path, images: Path, count: int) -> list[Sample]:
    """The first ``count`` train images (in the prepared table's order) one of whose human captions was translated,
    each with that caption and, per system kind (text-only MT, MMT), the chain of captions translated from it.

    Args:
        synthesized: The `synthesize` stage's caption files (one per target language; missing ones are skipped).
        prepared: The target corpus's prepared folder (its human captions and image paths).
        images: The folder the image paths are relative to.
        count: How many images.
    """
    files = [path for path in synthesized if path.is_file()]
    if not files or count == 0:
        return []
    made = [row for path in files for row in pq.read_table(path).to_pylist() if row["split"] == "train"]
    children: dict[str, list[dict[str, Any]]] = {}
    for row in sorted(made, key=lambda row: (row["hop"], row["lang"], row["system"])):
        children.setdefault(row["parent_id"], []).append(row)
    human = pq.read_table(prepared / "captions.parquet")
    human = human.filter(pc.and_(pc.equal(human["split"], "train"), pc.equal(human["origin"], "human")))
    paths = {row["image_id"]: row["path"] for row in pq.read_table(prepared / "images.parquet").to_pylist()}
    samples: list[Sample] = []
    shown: set[str] = set()
    for source in human.to_pylist():
        if source["image_id"] in shown or source["caption_id"] not in children:
            continue
        chains = tuple(
            (origin, chain)
            for origin in SAMPLED_ORIGINS
            if (chain := _descendants(source["caption_id"], children, origin))
        )
        label = ("human " + source["lang"], source["text"])
        samples.append(Sample(source["image_id"], thumbnail(images / paths[source["image_id"]]), label, chains))
        shown.add(source["image_id"])
        if len(samples) == count:
            break
    return samples


def _descendants(parent_id: str, children: Mapping[str, Sequence[dict[str, Any]]], origin: str) -> Chain:
    """(label, text) of every caption of ``origin`` translated from ``parent_id``, each followed by its own."""
    chain: list[tuple[str, str]] = []
    for child in (c for c in children.get(parent_id, ()) if c["origin"] == origin):
        chain.append((f"{child['system']} hop {child['hop']} {child['lang']}", child["text"]))
        chain += _descendants(child["caption_id"], children, origin)
    return tuple(chain)


def thumbnail(path: Path, size: int = 160) -> bytes:
    """PNG bytes of the image at ``path``, fitted into ``size`` x ``size``."""
    from PIL import Image

    with Image.open(path) as original:
        image = original.convert("RGB")
    image.thumbnail((size, size))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()
