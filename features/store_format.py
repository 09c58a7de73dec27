"""What a valid FeatureStore folder holds (the layout is described in :mod:`features.store`), and the checks
that make every disagreement between its files an error naming the file and both values.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from types import NoneType
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from common.errors import InputError
from common.files import read_json
from features.npy import NpyLayout, read_layout

FILES = ("regions.npy", "boxes.npy", "index.parquet", "meta.json")
INDEX_SCHEMA = pa.schema(
    [
        pa.field("row", pa.int64(), nullable=False),
        pa.field("image_id", pa.string(), nullable=False),
        pa.field("width", pa.int32()),
        pa.field("height", pa.int32()),
        pa.field("num_regions", pa.int32(), nullable=False),
        pa.field("error", pa.string()),
    ]
)
META_TYPES: dict[str, tuple[type, ...]] = {
    "extractor": (str,),
    "checkpoint_sha256": (str, NoneType),
    "num_images": (int,),
    "max_regions": (int,),
    "dim": (int,),
    "dtype": (str,),
    "config": (dict,),
}


def row_numbers(image_ids: list[str], *, where: str) -> dict[str, int]:
    """image_id -> row; at least one id, all non-empty strings, none twice (``where`` starts the errors)."""
    if not image_ids:
        raise InputError(f"{where}: a feature store needs at least one image id")
    bad = [image_id for image_id in image_ids if not isinstance(image_id, str) or not image_id]
    if bad:
        raise InputError(f"{where}: image ids must be non-empty strings, got {bad[:5]}")
    rows = {image_id: row for row, image_id in enumerate(image_ids)}
    if len(rows) != len(image_ids):
        duplicates = sorted(image_id for image_id, count in Counter(image_ids).items() if count > 1)
        raise InputError(f"{where}: duplicate image ids {duplicates[:5]}")
    return rows


def make_meta(
    extractor: str, checkpoint: str | None, count: int, max_regions: int, dim: int, config: Mapping[str, Any]
) -> dict[str, Any]:
    """The contents of meta.json; a config that JSON cannot hold is an error now, not after the extraction."""
    meta = {
        "extractor": extractor,
        "checkpoint_sha256": checkpoint,
        "num_images": count,
        "max_regions": max_regions,
        "dim": dim,
        "dtype": "float16",
        "config": dict(config),
    }
    try:
        json.dumps(meta, sort_keys=True)
    except (TypeError, ValueError) as error:
        raise InputError(f"feature store config is not JSON-serialisable: {error}") from None
    return meta


def read_meta(path: Path) -> dict[str, Any]:
    """meta.json with every key of :data:`META_TYPES` present and of its type, dtype float16, N, K, D >= 1."""
    meta = read_json(path)
    if not isinstance(meta, dict):
        raise InputError(f"{path}: expected a JSON object, got {type(meta).__name__}")
    for key, types in META_TYPES.items():
        if key not in meta:
            raise InputError(f"{path}: missing key {key!r}")
        if isinstance(meta[key], bool) or not isinstance(meta[key], types):
            names = " or ".join("null" if kind is NoneType else kind.__name__ for kind in types)
            raise InputError(f"{path}: {key} = {meta[key]!r}, expected {names}")
    if meta["dtype"] != "float16":
        raise InputError(f"{path}: dtype = {meta['dtype']!r}, expected 'float16'")
    for key in ("num_images", "max_regions", "dim"):
        if meta[key] < 1:
            raise InputError(f"{path}: {key} = {meta[key]}, expected at least 1")
    return meta


def read_index(path: Path, count: int, max_regions: int) -> pa.Table:
    """index.parquet with the columns of :data:`INDEX_SCHEMA`, rows 0..count-1, unique ids, num_regions in 0..K."""
    # ParquetFile, not read_table: read_table imports pyarrow.dataset and pandas, half a second of every command that
    # opens a store (`mmtr search` answers in seconds)
    try:
        with pq.ParquetFile(path) as file:
            table = file.read()
    except (OSError, pa.ArrowInvalid) as error:
        raise InputError(f"{path}: not a readable parquet file ({error})") from None
    for field in INDEX_SCHEMA:
        if field.name not in table.column_names or table.schema.field(field.name).type != field.type:
            found = table.schema.field(field.name).type if field.name in table.column_names else "missing"
            raise InputError(f"{path}: column {field.name} is {found}, expected {field.type}")
    table = table.select(INDEX_SCHEMA.names)
    for field in INDEX_SCHEMA:
        nulls = table.column(field.name).null_count
        if nulls and not field.nullable:
            raise InputError(f"{path}: column {field.name} holds {nulls} nulls")
    if table.num_rows != count:
        raise InputError(f"{path}: {table.num_rows} rows, but meta.json says num_images = {count}")
    if table.column("row").to_pylist() != list(range(count)):
        raise InputError(f"{path}: column row must be 0..{count - 1} in order")
    row_numbers(table.column("image_id").to_pylist(), where=str(path))
    _check_num_regions(path, table, max_regions)
    return table


def int_column(table: pa.Table, name: str) -> np.ndarray:
    """The int32 column ``name`` of ``table`` (without nulls) as an array. Through Python ints, not pyarrow's
    ``to_numpy``, which imports pandas: half a second of every `mmtr search` for a column of a few thousand numbers."""
    return np.array(table.column(name).to_pylist(), dtype=np.int32)


def _check_num_regions(path: Path, table: pa.Table, max_regions: int) -> None:
    num_regions = int_column(table, "num_regions")
    ids = table.column("image_id").to_pylist()
    outside = np.flatnonzero((num_regions < 0) | (num_regions > max_regions))
    if outside.size:
        row = outside[0]
        raise InputError(
            f"{path}: num_regions = {num_regions[row]} for image {ids[row]!r}, but meta.json says max_regions = "
            f"{max_regions}"
        )
    skipped = np.array([error is not None for error in table.column("error").to_pylist()], dtype=bool)
    regions_of_skipped = np.flatnonzero(skipped & (num_regions > 0))
    if regions_of_skipped.size:
        raise InputError(f"{path}: image {ids[regions_of_skipped[0]]!r} has an error and regions at once")


def checked_layout(path: Path, shape: tuple[int, ...], dtype: type) -> NpyLayout:
    """The layout of a ``.npy`` file that must have ``shape`` and ``dtype`` (those of meta.json)."""
    layout = read_layout(path)
    if layout.shape != shape:
        raise InputError(f"{path}: shape {layout.shape}, but meta.json says {shape}")
    if layout.dtype != np.dtype(dtype):
        raise InputError(f"{path}: dtype {layout.dtype}, expected {np.dtype(dtype)}")
    return layout
