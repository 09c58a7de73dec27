"""FeatureStore: the region features of every image in one folder (``data/features/<extractor>/``), read row by row.

Files:
    regions.npy: (N, K, D) float16; row r holds the regions of image r, rows past its num_regions are zeros.
    boxes.npy: (N, K, 4) float32 x1, y1, x2, y2 in pixels of the original image; zeros in padding.
    index.parquet: row (int64), image_id (string, unique), width and height (int32, null when unknown),
        num_regions (int32, 0..K) and error (null, or why the image was skipped; then num_regions is 0).
    meta.json: extractor, checkpoint_sha256 (or null), num_images (N), max_regions (K), dim (D),
        dtype ("float16") and the extractor's config.

Memory: the writer holds only the rows of the current call (regions and boxes go to the files with
``pwrite``, never through a long-lived map), plus a few bytes of index per image. Readers map the arrays
lazily: :meth:`FeatureStore.batch` reads only the rows asked for, and :meth:`FeatureStore.read_block` and
:meth:`FeatureStore.check_finite` stream through short-lived maps, so their RSS stays at one block. Pages that
``batch`` touched stay mapped while the store is open: page cache that the kernel reclaims under memory
pressure, but that RSS figures count, so an epoch over a cached store shows an RSS up to the size of
regions.npy without any allocation behind it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from common.errors import InputError
from common.files import atomic_dir, user_cache_dir
from features.npy import RowWriter, create_npy, read_row_set, read_rows
from features.regions import ImageRegions
from features.store_format import (
    FILES,
    INDEX_SCHEMA,
    checked_layout,
    int_column,
    make_meta,
    read_index,
    read_meta,
    row_numbers,
)

_VERIFIED: set[str] = set()  # stores (path and array versions) found finite in this process

FLOAT16_MAX = float(np.finfo(np.float16).max)  # 65504: larger features would become inf
PathLike = str | os.PathLike[str]


class UnknownImageError(KeyError):
    """An image id the store does not hold (a KeyError whose message reads as a sentence)."""

    def __str__(self) -> str:
        return str(self.args[0])


class FeatureStoreWriter:
    """Writes a FeatureStore row by row into a temporary sibling folder; ``close()`` renames it into place.

    Use it as a context manager: leaving the block normally closes the store, an exception aborts it,
    which removes everything temporary and leaves an existing ``out_dir`` untouched. Every image must be
    written (:meth:`write`, :meth:`write_rows`) or skipped (:meth:`skip`) exactly once before closing.
    """

    def __init__(
        self,
        out_dir: PathLike,
        *,
        image_ids: Sequence[str],
        max_regions: int,
        dim: int,
        extractor: str,
        checkpoint_sha256: str | None,
        config: Mapping[str, Any],
    ) -> None:
        """Create the temporary folder and the zero-filled arrays; rows follow ``image_ids``.

        Raises:
            InputError: no images, an empty or duplicate id, K or D below 1, or a config that is not JSON.
        """
        self.out_dir, self.image_ids = Path(out_dir), list(image_ids)
        self.max_regions, self.dim = max_regions, dim
        self._row = row_numbers(self.image_ids, where=str(self.out_dir))
        if max_regions < 1 or dim < 1:
            raise InputError(f"{self.out_dir}: max_regions={max_regions} and dim={dim} must be at least 1")
        self._meta = make_meta(extractor, checkpoint_sha256, len(self.image_ids), max_regions, dim, config)
        count = len(self.image_ids)
        self._num_regions = np.zeros(count, dtype=np.int32)
        self._widths = np.full(count, -1, dtype=np.int64)  # -1 = unknown, stored as null
        self._heights = np.full(count, -1, dtype=np.int64)
        self._errors: list[str | None] = [None] * count
        self._done = np.zeros(count, dtype=bool)
        self._atomic = atomic_dir(self.out_dir)
        self._tmp = self._atomic.__enter__()
        self._open = True
        try:
            shape = (count, max_regions)
            self._regions = RowWriter(
                self._tmp / "regions.npy", create_npy(self._tmp / "regions.npy", (*shape, dim), np.float16)
            )
            self._boxes = RowWriter(
                self._tmp / "boxes.npy", create_npy(self._tmp / "boxes.npy", (*shape, 4), np.float32)
            )
        except BaseException as error:
            self.abort(error)
            raise

    def write(self, image_id: str, regions: ImageRegions, *, width: int, height: int) -> None:
        """Store the k <= K regions of one image; features become float16 (object labels are not stored).

        Raises:
            InputError: an unknown or already stored id, more than K regions, features of the wrong
                dimension, NaN/Inf in features or boxes, or features beyond the float16 range.
        """
        row = self._row_of(image_id)
        count, dim = regions.features.shape
        if dim != self.dim:
            raise InputError(f"image {image_id!r}: features of dimension {dim}, the store holds {self.dim}")
        if count > self.max_regions:
            raise InputError(f"image {image_id!r}: {count} regions, more than max_regions={self.max_regions}")
        features = np.zeros((1, self.max_regions, self.dim), dtype=np.float32)
        boxes = np.zeros((1, self.max_regions, 4), dtype=np.float32)
        features[0, :count], boxes[0, :count] = regions.features, regions.boxes
        self._put(row, features, boxes, np.array([count]), [width], [height])

    def write_rows(
        self,
        start_row: int,
        features: np.ndarray,
        boxes: np.ndarray,
        num_regions: np.ndarray,
        widths: Sequence[int | None] | np.ndarray | None = None,
        heights: Sequence[int | None] | np.ndarray | None = None,
    ) -> None:
        """Store B consecutive rows at once (the importers' path); the same checks as :meth:`write`.

        Args:
            start_row: Row of the first image (its position in ``image_ids``).
            features: (B, K, D) float32 or float16; entries past ``num_regions`` are stored as zeros.
            boxes: (B, K, 4) pixels; entries past ``num_regions`` are stored as zeros.
            num_regions: (B,) valid regions per image, 0..K.
            widths, heights: (B,) image sizes; None (all, or per image) when unknown.
        """
        count = len(features)
        expected = (count, self.max_regions, self.dim)
        if features.shape != expected or boxes.shape != (*expected[:2], 4) or np.shape(num_regions) != (count,):
            raise InputError(
                f"rows {start_row}..: features {features.shape}, boxes {boxes.shape} and num_regions "
                f"{np.shape(num_regions)}; expected {expected}, {(*expected[:2], 4)} and ({count},)"
            )
        if start_row < 0 or start_row + count > len(self.image_ids):
            raise InputError(f"rows {start_row}..{start_row + count} are outside 0..{len(self.image_ids)}")
        self._put(start_row, features, boxes, np.asarray(num_regions), widths, heights)

    def skip(self, image_id: str, reason: str, *, width: int | None = None, height: int | None = None) -> None:
        """Record an image that could not be used: no regions, ``reason`` in the index's error column."""
        row = self._row_of(image_id)
        if not reason:
            raise InputError(f"image {image_id!r}: skipping needs a reason")
        self._check_unwritten(row, 1)
        # Nothing to write: the arrays start as zeros and a row is written at most once.
        self._widths[row], self._heights[row] = _sizes([width], 1, "width")[0], _sizes([height], 1, "height")[0]
        self._errors[row], self._done[row] = reason, True

    def close(self) -> None:
        """Check that every image was stored, write the index and meta.json, rename into ``out_dir``.

        Raises:
            InputError: images neither written nor skipped (the first ids are named); the store is then
                aborted.
        """
        if not self._open:
            raise InputError(f"{self.out_dir}: the writer is already closed")
        try:
            missing = np.flatnonzero(~self._done)
            if missing.size:
                first = [self.image_ids[row] for row in missing[:5]]
                raise InputError(
                    f"{self.out_dir}: {missing.size} of {len(self.image_ids)} images were neither written nor "
                    f"skipped, the first: {first}"
                )
            self._regions.close()
            self._boxes.close()
            pq.write_table(self._index_table(), self._tmp / "index.parquet")
            (self._tmp / "meta.json").write_text(json.dumps(self._meta, indent=2, sort_keys=True) + "\n")
        except BaseException as error:
            self.abort(error)
            raise
        self._open = False
        self._atomic.__exit__(None, None, None)

    def abort(self, error: BaseException | None = None) -> None:
        """Remove the temporary folder; an existing ``out_dir`` stays as it was. Does nothing once closed."""
        if not self._open:
            return
        self._open = False
        for writer in ("_regions", "_boxes"):
            if hasattr(self, writer):
                getattr(self, writer).close()
        error = error or InputError(f"{self.out_dir}: writing the feature store was aborted")
        self._atomic.__exit__(type(error), error, error.__traceback__)  # removes the temporary folder

    def __enter__(self) -> FeatureStoreWriter:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if error is not None:
            self.abort(error)
        elif self._open:
            self.close()

    def _row_of(self, image_id: str) -> int:
        if image_id not in self._row:
            raise UnknownImageError(f"image {image_id!r} is not among the image ids of the store {self.out_dir}")
        return self._row[image_id]

    def _check_unwritten(self, start: int, count: int) -> None:
        if not self._open:
            raise InputError(f"{self.out_dir}: the writer is closed")
        again = np.flatnonzero(self._done[start : start + count])
        if again.size:
            raise InputError(f"image {self.image_ids[start + again[0]]!r} was already written or skipped")

    def _put(
        self,
        start: int,
        features: np.ndarray,
        boxes: np.ndarray,
        num_regions: np.ndarray,
        widths: Sequence[int | None] | np.ndarray | None,
        heights: Sequence[int | None] | np.ndarray | None,
    ) -> None:
        count = len(features)
        self._check_unwritten(start, count)
        ids = self.image_ids[start : start + count]
        if (
            num_regions.dtype.kind not in "iu"
            or num_regions.min(initial=0) < 0
            or num_regions.max(initial=0) > self.max_regions
        ):
            raise InputError(f"images {ids[:5]}...: num_regions must be integers in 0..{self.max_regions}")
        widths_, heights_ = _sizes(widths, count, "width"), _sizes(heights, count, "height")
        valid = np.arange(self.max_regions) < num_regions[:, None]  # (B, K)
        self._regions.write(start, _checked_features(features, valid, ids))
        self._boxes.write(start, _checked_boxes(boxes, valid, ids))
        rows = slice(start, start + count)
        self._num_regions[rows], self._widths[rows], self._heights[rows] = num_regions, widths_, heights_
        self._done[rows] = True

    def _index_table(self) -> pa.Table:
        count = len(self.image_ids)
        columns = {
            "row": pa.array(np.arange(count, dtype=np.int64)),
            "image_id": pa.array(self.image_ids, type=pa.string()),
            "width": pa.array(self._widths.astype(np.int32), mask=self._widths < 0, type=pa.int32()),
            "height": pa.array(self._heights.astype(np.int32), mask=self._heights < 0, type=pa.int32()),
            "num_regions": pa.array(self._num_regions, type=pa.int32()),
            "error": pa.array(self._errors, type=pa.string()),
        }
        return pa.table(columns, schema=INDEX_SCHEMA)


class RegionLookup(Protocol):
    """Region features by image row (:class:`features.store.FeatureStore` is one)."""

    def batch(self, rows: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(B, K, D) features, (B, K) bool mask of valid regions, (B, K, 4) boxes."""
        ...


class FeatureStore:
    """A FeatureStore opened for reading; the arrays stay on disk and batches are read with positioned reads.

    Attributes:
        path: The store folder.
        meta: The contents of meta.json.
        index: index.parquet as a table (N rows).
        image_ids: Image id per row.
        num_regions: (N,) int32 valid regions per image.
        max_regions: K.
        dim: D.
    """

    def __init__(self, path: Path, meta: dict[str, Any], index: pa.Table) -> None:
        self.path, self.meta, self.index = path, meta, index
        self.image_ids: list[str] = index.column("image_id").to_pylist()
        self.num_regions: np.ndarray = int_column(index, "num_regions")
        self.max_regions: int = meta["max_regions"]
        self.dim: int = meta["dim"]
        self._row = {image_id: row for row, image_id in enumerate(self.image_ids)}
        self._layouts = (
            checked_layout(path / "regions.npy", (len(self), self.max_regions, self.dim), np.float16),
            checked_layout(path / "boxes.npy", (len(self), self.max_regions, 4), np.float32),
        )

    @classmethod
    def open(cls, path: PathLike) -> FeatureStore:
        """Open and validate a store folder.

        Raises:
            InputError: a missing file, a bad meta.json, an array whose shape or dtype disagrees with
                meta.json, or an index with the wrong rows, duplicate ids or num_regions outside 0..K.
        """
        root = Path(path)
        missing = [name for name in FILES if not (root / name).is_file()]
        if missing:
            raise InputError(f"{root}: not a feature store, missing {missing}")
        meta = read_meta(root / "meta.json")
        index = read_index(root / "index.parquet", meta["num_images"], meta["max_regions"])
        store = cls(root, meta, index)
        store._check_finite_once()
        return store

    def _check_finite_once(self) -> None:
        """:meth:`check_finite` once per version of the arrays: a success is remembered for this process and in the
        user cache folder (by path, size and modification time of both arrays), so a store changed after it was
        written (NaN ranked as search results, trained on) is caught when next opened, at one streaming pass."""
        stamps = [(self.path / name).stat() for name in ("regions.npy", "boxes.npy")]
        identity = f"{self.path.resolve()}|" + "|".join(f"{s.st_size}:{s.st_mtime_ns}:{s.st_ino}" for s in stamps)
        key = hashlib.sha256(identity.encode()).hexdigest()[:32]
        marker = user_cache_dir() / "verified-stores" / key
        if key in _VERIFIED or marker.is_file():
            return
        self.check_finite()
        _VERIFIED.add(key)
        with contextlib.suppress(OSError):  # an unwritable cache only costs a check next time
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.touch()

    def __len__(self) -> int:
        return len(self.image_ids)

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickling (DataLoader workers started with spawn) must reopen the maps, not copy the arrays.
        return (FeatureStore.open, (str(self.path),))

    @property
    def row_index(self) -> Mapping[str, int]:
        """Image id -> row, for every image of the store (read-only use)."""
        return self._row

    def row_of(self, image_id: str) -> int:
        """Row of ``image_id``; :class:`UnknownImageError` (a KeyError) when the store lacks it."""
        if image_id not in self._row:
            raise UnknownImageError(f"image {image_id!r} is not in the feature store {self.path}")
        return self._row[image_id]

    def rows(self, image_ids: Sequence[str]) -> np.ndarray:
        """(B,) int64 rows of ``image_ids``."""
        return np.array([self.row_of(image_id) for image_id in image_ids], dtype=np.int64)

    def batch(self, rows: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Read the given rows (any order, repeats allowed) into memory.

        Returns:
            features: (B, K, D) float16, zeros in padding.
            mask: (B, K) bool, True for the valid regions.
            boxes: (B, K, 4) float32.
        """
        wanted = np.asarray(rows)
        if wanted.ndim != 1 or (wanted.size and wanted.dtype.kind not in "iu"):
            raise InputError(f"{self.path}: rows must be a 1-D sequence of integers, got {wanted.dtype}{wanted.shape}")
        wanted = wanted.astype(np.int64)
        outside = wanted[(wanted < 0) | (wanted >= len(self))]
        if outside.size:
            raise IndexError(f"{self.path}: rows {outside[:5].tolist()} are outside 0..{len(self) - 1}")
        # Sorted unique rows read the file front to back, once per row; the inverse restores the order asked for.
        unique, inverse = np.unique(wanted, return_inverse=True)
        regions_layout, boxes_layout = self._layouts
        features = read_row_set(self.path / "regions.npy", regions_layout, unique)[inverse]
        boxes = read_row_set(self.path / "boxes.npy", boxes_layout, unique)[inverse]
        mask = np.arange(self.max_regions) < self.num_regions[wanted][:, None]
        return features, mask, boxes

    def read_block(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """Rows ``start:stop`` as in-memory (B, K, D) float16 features and (B, K, 4) boxes, via a short-lived map."""
        regions_layout, boxes_layout = self._layouts
        return (
            read_rows(self.path / "regions.npy", regions_layout, start, stop),
            read_rows(self.path / "boxes.npy", boxes_layout, start, stop),
        )

    def check_finite(self, *, chunk_rows: int = 512) -> None:
        """Stream both arrays in blocks of ``chunk_rows`` rows; memory stays at one block.

        Raises:
            InputError: NaN or Inf in a row; names the file and the first bad image ids.
        """
        for start in range(0, len(self), chunk_rows):
            stop = min(len(self), start + chunk_rows)
            for name, block in zip(("regions.npy", "boxes.npy"), self.read_block(start, stop), strict=True):
                bad = np.flatnonzero(~np.isfinite(block).all(axis=(1, 2)))
                if bad.size:
                    ids = [self.image_ids[start + row] for row in bad[:5]]
                    raise InputError(f"{self.path / name}: NaN or Inf in the rows of image(s) {ids}")


def _sizes(values: Sequence[int | None] | np.ndarray | None, count: int, name: str) -> np.ndarray:
    """(count,) int64 sizes with -1 for unknown."""
    if values is None:
        return np.full(count, -1, dtype=np.int64)
    if len(values) != count:
        raise InputError(f"{len(values)} {name}s for {count} images")
    sizes = np.array([-1 if value is None else int(value) for value in values], dtype=np.int64)
    bad = [value for value in values if value is not None and int(value) < 0]
    if bad:
        raise InputError(f"negative image {name}s {bad[:5]}")
    return sizes


def _checked_features(features: np.ndarray, valid: np.ndarray, ids: list[str]) -> np.ndarray:
    """(B, K, D) float16 with zeros in padding; NaN/Inf or values beyond the float16 range name the image."""
    if features.dtype.kind != "f":
        raise InputError(f"images {ids[:5]}: features of dtype {features.dtype}, expected float32 or float16")
    if not valid.all():
        features = np.where(valid[:, :, None], features, 0)
    # Per image max and min: NaN propagates through both, and no array-sized temporary is needed.
    high, low = features.max(axis=(1, 2)), features.min(axis=(1, 2))
    _raise_for(~(np.isfinite(high) & np.isfinite(low)), ids, "NaN or Inf in the features")
    _raise_for((high > FLOAT16_MAX) | (low < -FLOAT16_MAX), ids, f"features beyond ±{FLOAT16_MAX:g} (float16)")
    return features.astype(np.float16)


def _checked_boxes(boxes: np.ndarray, valid: np.ndarray, ids: list[str]) -> np.ndarray:
    """(B, K, 4) float32 with zeros in padding; NaN/Inf name the image."""
    boxes = np.where(valid[:, :, None], boxes, 0).astype(np.float32)
    _raise_for(~np.isfinite(boxes).all(axis=(1, 2)), ids, "NaN or Inf in the boxes")
    return boxes


def _raise_for(bad: np.ndarray, ids: list[str], what: str) -> None:
    rows = np.flatnonzero(bad)
    if rows.size:
        raise InputError(f"{what} of image(s) {[ids[row] for row in rows[:5]]} ({rows.size} in this block)")
