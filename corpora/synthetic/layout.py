"""Writers for the files of the dataset folders: text lists, gzip caption files, the objects table, and the
Karpathy split file of the second corpus."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from common.files import write_text
from corpora.synthetic.scenes import Scene
from corpora.tables import write_parquet

OBJECTS_SCHEMA = pa.schema(
    [
        pa.field("image_id", pa.string(), nullable=False),
        pa.field("object", pa.int32(), nullable=False),  # index of the shape within its image
        pa.field("shape", pa.string(), nullable=False),
        pa.field("colour", pa.string(), nullable=False),
        pa.field("size", pa.string(), nullable=False),  # "small" | "big"
        pa.field("x0", pa.float32(), nullable=False),  # box in pixels
        pa.field("y0", pa.float32(), nullable=False),
        pa.field("x1", pa.float32(), nullable=False),
        pa.field("y1", pa.float32(), nullable=False),
        pa.field("label", pa.string(), nullable=False),  # the shape, named as a detector's class (English)
        pa.field("attributes", pa.list_(pa.string()), nullable=False),  # [colour, size]
    ]
)


def write_lines(path: Path, lines: Sequence[str]) -> None:
    """One line per item (a ``.gz`` path is gzipped with a fixed mtime by ``write_text``)."""
    write_text(path, "".join(f"{line}\n" for line in lines))


def write_split_texts(folder: Path, suffix: str, texts: Mapping[str, Sequence[str]]) -> None:
    """Write ``texts[split]`` to ``folder / f"{split}.{suffix}"`` for every split (suffix e.g. "2.de.gz")."""
    for split, lines in texts.items():
        write_lines(folder / f"{split}.{suffix}", lines)


def write_image_splits(root: Path, ids: Mapping[str, Sequence[str]]) -> None:
    """The image file names per split, under both task folders' names for them."""
    for split, image_ids in ids.items():
        names = [f"{image_id}.png" for image_id in image_ids]
        write_lines(root / "task1" / "image_splits" / f"{split}.txt", names)
        write_lines(root / "task2" / "image_splits" / f"{split}_images.txt", names)


def write_objects(path: Path, scenes: Sequence[tuple[str, Scene]]) -> None:
    """``objects.parquet``: one row per drawn shape with its labels and pixel box."""
    rows = [(image_id, index, obj) for image_id, scene in scenes for index, obj in enumerate(scene.objects)]
    columns = {
        "image_id": [image_id for image_id, _, _ in rows],
        "object": [index for _, index, _ in rows],
        "shape": [obj.shape for _, _, obj in rows],
        "colour": [obj.colour for _, _, obj in rows],
        "size": [obj.size for _, _, obj in rows],
        **{name: [obj.box[axis] for _, _, obj in rows] for axis, name in enumerate(("x0", "y0", "x1", "y1"))},
        "label": [obj.shape for _, _, obj in rows],
        "attributes": [[obj.colour, obj.size] for _, _, obj in rows],
    }
    write_parquet(pa.table(columns, schema=OBJECTS_SCHEMA), path)


def write_karpathy_split_file(path: Path, entries: Sequence[tuple[str, str, Sequence[str]]], *, dataset: str) -> None:
    """A Karpathy split file (the ``dataset_flickr30k.json`` format) from ``(filename, split, captions)`` entries.

    Image and sentence ids count from 0 in file order, as in the real files.
    """
    images: list[dict[str, Any]] = []
    next_sentid = 0
    for imgid, (filename, split, captions) in enumerate(entries):
        sentids = list(range(next_sentid, next_sentid + len(captions)))
        next_sentid += len(captions)
        sentences = [
            {"raw": raw, "tokens": karpathy_tokens(raw), "imgid": imgid, "sentid": sentid}
            for raw, sentid in zip(captions, sentids, strict=True)
        ]
        images.append(
            {"filename": filename, "split": split, "sentences": sentences, "imgid": imgid, "sentids": sentids}
        )
    write_text(path, json.dumps({"images": images, "dataset": dataset}, ensure_ascii=False) + "\n")


def karpathy_tokens(raw: str) -> list[str]:
    """Lowercased words without punctuation, like the ``tokens`` of the real split files."""
    return re.findall(r"\w+", raw.lower())
