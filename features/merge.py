"""Assemble the small stores written by parallel extraction shards into one FeatureStore.

Memory: the shards are copied in blocks of ``chunk_rows`` rows (each read through a short-lived map and
written with ``pwrite``), so the RSS holds one block plus the index, whatever the size of the store.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from common.errors import InputError
from features.store import FeatureStore, FeatureStoreWriter

AGREEING_META = ("extractor", "checkpoint_sha256", "max_regions", "dim", "config")


def merge_stores(
    shard_dirs: Sequence[str | os.PathLike[str]],
    out_dir: str | os.PathLike[str],
    *,
    image_ids: Sequence[str],
    chunk_rows: int = 256,
) -> None:
    """Merge shard stores into ``out_dir`` with rows in ``image_ids`` order (written atomically).

    Every id must be in exactly one shard, and every shard id among ``image_ids``. Skipped images stay
    skipped with their reason.

    Raises:
        InputError: no shards, a shard that is not a valid store, shards whose extractor, checkpoint, K, D
            or config disagree (names the shard), an id in two shards, or ids missing on either side.
    """
    if not shard_dirs:
        raise InputError(f"{out_dir}: no shard folders to merge")
    shards = [FeatureStore.open(path) for path in shard_dirs]
    first = shards[0]
    for shard in shards[1:]:
        for key in AGREEING_META:
            if shard.meta[key] != first.meta[key]:
                raise InputError(f"{shard.path}: {key} = {shard.meta[key]!r}, but {first.path} has {first.meta[key]!r}")
    targets = _target_rows(shards, list(image_ids), Path(out_dir))
    with FeatureStoreWriter(
        out_dir,
        image_ids=image_ids,
        max_regions=first.max_regions,
        dim=first.dim,
        extractor=first.meta["extractor"],
        checkpoint_sha256=first.meta["checkpoint_sha256"],
        config=first.meta["config"],
    ) as writer:
        for shard, rows in zip(shards, targets, strict=True):
            _copy_shard(shard, rows, writer, chunk_rows)


def _target_rows(shards: list[FeatureStore], image_ids: list[str], out_dir: Path) -> list[np.ndarray]:
    """Per shard, the (N_shard,) output rows of its images."""
    position = {image_id: row for row, image_id in enumerate(image_ids)}
    owner: dict[str, Path] = {}
    targets: list[np.ndarray] = []
    for shard in shards:
        for image_id in shard.image_ids:
            if image_id in owner:
                raise InputError(f"image {image_id!r} is in two shards: {owner[image_id]} and {shard.path}")
            owner[image_id] = shard.path
        extra = [image_id for image_id in shard.image_ids if image_id not in position]
        if extra:
            raise InputError(f"{shard.path}: {len(extra)} images are not among the ids to merge, e.g. {extra[:5]}")
        targets.append(np.array([position[image_id] for image_id in shard.image_ids], dtype=np.int64))
    missing = [image_id for image_id in image_ids if image_id not in owner]
    if missing:
        raise InputError(f"{out_dir}: {len(missing)} images are in no shard, e.g. {missing[:5]}")
    return targets


def _copy_shard(shard: FeatureStore, targets: np.ndarray, writer: FeatureStoreWriter, chunk_rows: int) -> None:
    errors = shard.index.column("error").to_pylist()
    widths, heights = shard.index.column("width").to_pylist(), shard.index.column("height").to_pylist()
    for start in range(0, len(shard), chunk_rows):
        stop = min(len(shard), start + chunk_rows)
        features, boxes = shard.read_block(start, stop)
        good = np.array([errors[row] is None for row in range(start, stop)], dtype=bool)
        for row in np.flatnonzero(~good) + start:
            writer.skip(shard.image_ids[row], errors[row], width=widths[row], height=heights[row])
        for begin, end in _runs(np.flatnonzero(good), targets[start:stop]):
            rows = slice(start + begin, start + end)
            writer.write_rows(
                int(targets[start + begin]),
                features[begin:end],
                boxes[begin:end],
                shard.num_regions[rows],
                widths=widths[rows],
                heights=heights[rows],
            )


def _runs(positions: np.ndarray, targets: np.ndarray) -> list[tuple[int, int]]:
    """Spans [begin, end) of block positions whose positions and output rows both run consecutively.

    Each span becomes one ``write_rows`` call (one ``pwrite``); shards in output order give one span per block.
    """
    if positions.size == 0:
        return []
    rows = targets[positions]
    breaks = np.flatnonzero((np.diff(positions) != 1) | (np.diff(rows) != 1)) + 1
    starts = positions[np.r_[0, breaks]]
    ends = positions[np.r_[breaks - 1, positions.size - 1]] + 1
    return list(zip(starts.tolist(), ends.tolist(), strict=True))
