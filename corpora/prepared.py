"""The ``data/prepared/`` folder as one unit: images, captions and parallel tables, written atomically."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from corpora import tables
from corpora.io import InputError, atomic_dir


@dataclass(frozen=True)
class Corpus:
    """Images and their captions, as produced by one adapter (or by the synthetic generator)."""

    images: pa.Table
    captions: pa.Table
    parallel: Mapping[str, pa.Table] = field(default_factory=dict)  # "<src>-<tgt>" -> parallel table


def write_prepared(corpus: Corpus, out_dir: str | os.PathLike[str]) -> None:
    """Validate every table, then replace ``out_dir`` as a whole (a killed run leaves the old folder)."""
    tables.validate_images(corpus.images, source="images")
    tables.validate_captions(corpus.captions, images=corpus.images, source="captions")
    for name, table in corpus.parallel.items():
        tables.validate_parallel(table, source=f"parallel {name}")
    with atomic_dir(out_dir) as tmp:
        tables.write_parquet(corpus.images, tmp / "images.parquet")
        tables.write_parquet(corpus.captions, tmp / "captions.parquet")
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
    return Corpus(images=images, captions=captions, parallel=parallel)
