"""The ``data/prepared/`` folder as one unit: images, captions, parallel and the optional evaluation tables, written
atomically."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from common.errors import InputError
from common.files import atomic_dir
from corpora import tables

IMAGE_DEPENDENT_FILE = "image_dependent.parquet"  # optional: Corpus.image_dependent
CONTRASTIVE_FILE = "contrastive.parquet"  # optional: Corpus.contrastive


@dataclass(frozen=True)
class Corpus:
    """Images and their captions, as produced by one adapter (or by the synthetic generator).

    Attributes:
        images: The images table.
        captions: The captions table.
        parallel: "<src>-<tgt>" -> the text-only parallel table.
        image_dependent: The words of each translation caption that the image decides, where the dataset records
            them (evaluation only; real Multi30K does not: None).
        contrastive: Ambiguous pivot sentences with two images and the right translation with each (evaluation
            only; None when the corpus has none).
    """

    images: pa.Table
    captions: pa.Table
    parallel: Mapping[str, pa.Table] = field(default_factory=dict)
    image_dependent: pa.Table | None = None
    contrastive: pa.Table | None = None


def write_prepared(corpus: Corpus, out_dir: str | os.PathLike[str]) -> None:
    """Validate every table, then replace ``out_dir`` as a whole (a killed run leaves the old folder)."""
    tables.validate_images(corpus.images, source="images")
    tables.validate_captions(corpus.captions, images=corpus.images, source="captions")
    for name, table in corpus.parallel.items():
        tables.validate_parallel(table, source=f"parallel {name}")
    if corpus.image_dependent is not None:
        tables.validate_image_dependent(corpus.image_dependent, images=corpus.images, source="image-dependent words")
    if corpus.contrastive is not None:
        tables.validate_contrastive(corpus.contrastive, images=corpus.images, source="contrastive items")
    with atomic_dir(out_dir) as tmp:
        tables.write_parquet(corpus.images, tmp / "images.parquet")
        tables.write_parquet(corpus.captions, tmp / "captions.parquet")
        if corpus.image_dependent is not None:
            tables.write_parquet(corpus.image_dependent, tmp / IMAGE_DEPENDENT_FILE)
        if corpus.contrastive is not None:
            tables.write_parquet(corpus.contrastive, tmp / CONTRASTIVE_FILE)
        if corpus.parallel:
            (tmp / "parallel").mkdir()
        for name, table in sorted(corpus.parallel.items()):
            tables.write_parquet(table, tmp / "parallel" / f"{name}.parquet")


def read_prepared(prepared_dir: str | os.PathLike[str]) -> Corpus:
    """Read and validate a prepared folder written by :func:`write_prepared`."""
    root = Path(prepared_dir)
    if not root.is_dir():
        raise InputError(f"{root}: prepared folder not found (run the prepare stage first)")
    images = tables.read_images(root / "images.parquet")
    captions = tables.read_captions(root / "captions.parquet", images=images)
    parallel = {path.stem: tables.read_parallel(path) for path in sorted((root / "parallel").glob("*.parquet"))}
    image_dependent = contrastive = None
    if (root / IMAGE_DEPENDENT_FILE).is_file():
        image_dependent = tables.read_image_dependent(root / IMAGE_DEPENDENT_FILE, images=images)
    if (root / CONTRASTIVE_FILE).is_file():
        contrastive = tables.read_contrastive(root / CONTRASTIVE_FILE, images=images)
    return Corpus(images, captions, parallel, image_dependent, contrastive)


def write_parallel_tables(parallel: Mapping[str, pa.Table], out_dir: str | os.PathLike[str]) -> None:
    """Validate the text-only corpus's tables, then replace ``out_dir`` with ``<src>-<tgt>.parquet`` files."""
    for name, table in parallel.items():
        tables.validate_parallel(table, source=f"parallel {name}")
    with atomic_dir(out_dir) as tmp:
        for name, table in sorted(parallel.items()):
            tables.write_parquet(table, tmp / f"{name}.parquet")


def read_parallel_tables(parallel_dir: str | os.PathLike[str]) -> dict[str, pa.Table]:
    """The text-only corpus written by :func:`write_parallel_tables`: ``"<src>-<tgt>"`` -> table."""
    root = Path(parallel_dir)
    if not root.is_dir():
        raise InputError(f"{root}: prepared parallel folder not found (run the prepare_parallel stage first)")
    return {path.stem: tables.read_parallel(path) for path in sorted(root.glob("*.parquet"))}


def count_captions(corpus: Corpus) -> list[dict[str, object]]:
    """Per split and language: images, comparable captions, translation captions."""
    images, captions = corpus.images, corpus.captions
    rows: list[dict[str, object]] = []
    for split in pc.unique(images.column("split")).to_pylist():
        in_split = captions.filter(pc.equal(captions.column("split"), split))
        split_images = pc.sum(pc.equal(images.column("split"), split)).as_py()
        for lang in sorted(pc.unique(in_split.column("lang")).to_pylist()):
            kinds = in_split.filter(pc.equal(in_split.column("lang"), lang)).column("kind")
            rows.append(
                {
                    "split": split,
                    "lang": lang,
                    "images": split_images,
                    "comparable": pc.sum(pc.equal(kinds, "comparable")).as_py() or 0,
                    "translation": pc.sum(pc.equal(kinds, "translation")).as_py() or 0,
                }
            )
    return rows


def count_parallel(parallel: Mapping[str, pa.Table]) -> list[dict[str, object]]:
    """Per language pair and split: sentence pairs of the text-only corpus."""
    rows: list[dict[str, object]] = []
    for name, table in sorted(parallel.items()):
        for split in pc.unique(table.column("split")).to_pylist():
            rows.append({"pair": name, "split": split, "pairs": pc.sum(pc.equal(table.column("split"), split)).as_py()})
    return rows
