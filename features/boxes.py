"""Given boxes per image (the generator's objects.parquet, or any table with the same box columns).

Required columns: image_id, x0, y0, x1, y1 (pixels). Optional: ``label`` (object class) and ``attributes``
(list of attribute names), used to train the compact encoder and to probe features.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from common.errors import InputError

BOX_COLUMNS = ("x0", "y0", "x1", "y1")


@dataclass(frozen=True)
class GivenBoxes:
    """Boxes (and labels, when the file has them) grouped by image, in file order."""

    source: Path  # the boxes file
    boxes: dict[str, np.ndarray]  # image_id -> (k, 4) float32
    labels: dict[str, list[str]] | None  # image_id -> object class per box
    attributes: dict[str, list[list[str]]] | None  # image_id -> attribute names per box

    def of(self, image_id: str) -> np.ndarray:
        return self.boxes.get(image_id, np.zeros((0, 4), dtype=np.float32))


def read_given_boxes(path: str | Path) -> GivenBoxes:
    """Read and check a boxes table: finite coordinates with x0 < x1 and y0 < y1 (errors name the row)."""
    source = Path(path)
    if not source.is_file():
        raise InputError(f"{source}: boxes file not found")
    table = pq.read_table(source)
    missing = [name for name in ("image_id", *BOX_COLUMNS) if name not in table.column_names]
    if missing:
        raise InputError(f"{source}: missing column(s) {missing}; a boxes table needs image_id, x0, y0, x1, y1")
    coords = np.stack([table.column(name).to_numpy().astype(np.float32) for name in BOX_COLUMNS], axis=1)
    bad = ~np.isfinite(coords).all(axis=1) | (coords[:, 2] <= coords[:, 0]) | (coords[:, 3] <= coords[:, 1])
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise InputError(f"{source}: row {row}: box {coords[row].tolist()} is not finite with x0 < x1 and y0 < y1")
    image_ids = table.column("image_id").to_pylist()
    groups: dict[str, list[int]] = {}
    for row, image_id in enumerate(image_ids):
        groups.setdefault(image_id, []).append(row)
    boxes = {image_id: coords[rows] for image_id, rows in groups.items()}
    labels = _group(table, "label", groups)
    attributes = _group(table, "attributes", groups)
    return GivenBoxes(source=source, boxes=boxes, labels=labels, attributes=attributes)


def _group(table: pa.Table, column: str, groups: dict[str, list[int]]) -> dict[str, list] | None:
    if column not in table.column_names:
        return None
    values = table.column(column)
    if values.null_count:
        row = int(pc.index(pc.is_null(values), True).as_py())
        raise InputError(f"boxes table: row {row}: {column} is null")
    listed = values.to_pylist()
    return {image_id: [listed[row] for row in rows] for image_id, rows in groups.items()}
