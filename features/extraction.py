"""Sharded, resumable region extraction: plan shards, extract one shard into its own small store, merge.

A shard is a fixed slice of the image list. Each finished shard is a complete FeatureStore folder (written
atomically by the store writer) plus a ``done/<shard>.json`` receipt written after it; only shards with both
are taken as finished. Everything lives in a work folder named by a fingerprint of what determines the
features (extractor, its checkpoint, region selection, images, boxes, shard size), so a rerun with the same
inputs resumes where a killed run stopped, and a run with other inputs never reuses stale shards.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np

from common.errors import InputError
from common.files import read_json, write_text
from common.stopping import check
from features.images import BadImageError, load_rgb
from features.merge import merge_stores
from features.regions import ImageRegions
from features.store import FeatureStoreWriter

OnBadImage = Literal["fail", "skip"]


class RegionExtractor(Protocol):
    name: str

    @property
    def dim(self) -> int: ...  # D

    @property
    def max_regions(self) -> int: ...  # K

    def extract(
        self, images: Sequence[np.ndarray], given_boxes: Sequence[np.ndarray] | None = None
    ) -> list[ImageRegions]: ...


@dataclass(frozen=True)
class ImageJob:
    image_id: str
    path: str  # absolute, or relative to the working directory
    boxes: np.ndarray | None = None  # (k, 4) given boxes, or None when the extractor proposes regions


@dataclass(frozen=True)
class Shard:
    index: int
    jobs: tuple[ImageJob, ...]

    @property
    def name(self) -> str:
        return f"shard-{self.index:05d}"


@dataclass(frozen=True)
class ShardReport:
    shard: int
    images: int
    regions: int
    seconds: float
    bad: tuple[tuple[str, str], ...] = field(default_factory=tuple)  # (path, reason) of unusable images
    written: bool = True  # False when bad images stopped the shard (on_bad_image="fail")


class BadImagesError(InputError):
    """Raised once, after every shard ran, naming every unusable image."""

    def __init__(self, bad: Sequence[tuple[str, str]]) -> None:
        listing = "\n".join(f"  {path}: {reason}" for path, reason in bad)
        super().__init__(
            f"{len(bad)} bad image(s) (set features.on_bad_image: skip to record them and go on):\n{listing}"
        )
        self.bad = list(bad)


def plan_shards(jobs: Sequence[ImageJob], shard_size: int) -> list[Shard]:
    if shard_size < 1:
        raise ValueError(f"shard_size must be at least 1, got {shard_size}")
    return [
        Shard(index, tuple(jobs[start : start + shard_size]))
        for index, start in enumerate(range(0, len(jobs), shard_size))
    ]


def fingerprint(jobs: Sequence[ImageJob], *, shard_size: int, extractor: Mapping[str, Any]) -> str:
    """sha256 of everything that decides the shards' contents (image files are named, not hashed: DVC
    reruns the stage when they change, and a new run of a changed folder gets new shards through the list)."""
    digest = hashlib.sha256()
    digest.update(json.dumps({"shard_size": shard_size, "extractor": extractor}, sort_keys=True).encode())
    for job in jobs:
        digest.update(f"\n{job.image_id}\t{job.path}\t".encode())
        if job.boxes is not None:
            digest.update(np.ascontiguousarray(job.boxes, dtype=np.float32).tobytes())
    return digest.hexdigest()


class ShardLedger:
    """The work folder of one fingerprint: finished shard stores and their receipts."""

    def __init__(self, work_root: str | Path, fingerprint: str) -> None:
        self.root = Path(work_root) / fingerprint[:16]
        (self.root / "done").mkdir(parents=True, exist_ok=True)

    def shard_dir(self, shard: Shard) -> Path:
        return self.root / "shards" / shard.name

    def finished(self, shards: Sequence[Shard]) -> list[Shard]:
        return [
            shard
            for shard in shards
            if (self.root / "done" / f"{shard.name}.json").is_file() and self.shard_dir(shard).is_dir()
        ]

    def record(self, shard: Shard, report: ShardReport) -> None:
        receipt = {
            "images": report.images,
            "regions": report.regions,
            "seconds": round(report.seconds, 3),
            "bad": [list(item) for item in report.bad],
        }
        write_text(self.root / "done" / f"{shard.name}.json", json.dumps(receipt, indent=2) + "\n")

    def report(self, shard: Shard) -> ShardReport:
        receipt = read_json(self.root / "done" / f"{shard.name}.json")
        bad = tuple((path, reason) for path, reason in receipt["bad"])
        return ShardReport(shard.index, receipt["images"], receipt["regions"], receipt["seconds"], bad)

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def extract_shard(
    shard: Shard,
    extractor: RegionExtractor,
    *,
    out_dir: Path,
    batch_size: int,
    on_bad_image: OnBadImage,
    checkpoint_sha256: str | None,
    config: Mapping[str, Any],
    stop: threading.Event | None = None,
) -> ShardReport:
    """Extract one shard into its own store at ``out_dir``; bad images are recorded or stop the shard.

    Raises:
        Cancelled: ``stop`` was set before a batch (:mod:`common.stopping`); nothing is left at ``out_dir``.
    """
    started = time.perf_counter()
    loaded, bad = _load_images(shard.jobs)
    if bad and on_bad_image == "fail":
        return ShardReport(shard.index, len(shard.jobs), 0, time.perf_counter() - started, tuple(bad), written=False)
    regions = 0
    with FeatureStoreWriter(
        out_dir,
        image_ids=[job.image_id for job in shard.jobs],
        max_regions=extractor.max_regions,
        dim=extractor.dim,
        extractor=extractor.name,
        checkpoint_sha256=checkpoint_sha256,
        config=config,
    ) as writer:
        for path, reason in bad:
            writer.skip(_job_of(shard, path).image_id, reason)
        good = [(job, image) for job, image in zip(shard.jobs, loaded, strict=True) if image is not None]
        for start in range(0, len(good), batch_size):
            check(stop, f"extracting {shard.name}")
            batch = good[start : start + batch_size]
            boxes = None if batch[0][0].boxes is None else [_boxes_of(job) for job, _ in batch]
            results = extractor.extract([image for _, image in batch], boxes)
            for (job, image), result in zip(batch, results, strict=True):
                writer.write(job.image_id, result, width=image.shape[1], height=image.shape[0])
                regions += len(result.features)
    return ShardReport(shard.index, len(shard.jobs), regions, time.perf_counter() - started, tuple(bad))


def extract_into_ledger(
    ledger: ShardLedger,
    shard: Shard,
    extractor: Callable[[], RegionExtractor],
    *,
    batch_size: int,
    on_bad_image: OnBadImage,
    checkpoint_sha256: str | None,
    config: Mapping[str, Any],
    stop: threading.Event | None = None,
) -> ShardReport:
    """Extract ``shard`` into ``ledger`` and record it, unless a killed run already finished it (then its receipt
    gives the report and ``extractor``, a factory, is never called: no weights are loaded for nothing); ``stop``
    set, the shard is given up between two batches (:func:`extract_shard`)."""
    if shard in ledger.finished([shard]):
        return ledger.report(shard)
    report = extract_shard(
        shard,
        extractor(),
        out_dir=ledger.shard_dir(shard),
        batch_size=batch_size,
        on_bad_image=on_bad_image,
        checkpoint_sha256=checkpoint_sha256,
        config=config,
        stop=stop,
    )
    if report.written:
        ledger.record(shard, report)
    return report


def _load_images(jobs: Sequence[ImageJob]) -> tuple[list[np.ndarray | None], list[tuple[str, str]]]:
    loaded: list[np.ndarray | None] = []
    bad: list[tuple[str, str]] = []
    for job in jobs:
        try:
            image = load_rgb(job.path)
            _check_given_boxes(job, image)
            loaded.append(image)
        except BadImageError as error:
            loaded.append(None)
            bad.append((job.path, error.reason))
    return loaded, bad


def _check_given_boxes(job: ImageJob, image: np.ndarray) -> None:
    """A given box must overlap its image: one wholly outside would yield a "valid" region of nothing.

    Raises:
        BadImageError: naming the first such box and the image's size.
    """
    if job.boxes is None or not len(job.boxes):
        return
    height, width = image.shape[:2]
    boxes = np.asarray(job.boxes, dtype=np.float64)
    outside = (boxes[:, 0] >= width) | (boxes[:, 1] >= height) | (boxes[:, 2] <= 0) | (boxes[:, 3] <= 0)
    if outside.any():
        first = int(np.flatnonzero(outside)[0])
        box = ", ".join(f"{value:g}" for value in boxes[first])
        raise BadImageError(Path(job.path), f"given box {first} ({box}) lies outside the {width}x{height} image")


def _boxes_of(job: ImageJob) -> np.ndarray:
    if job.boxes is None:
        raise ValueError(f"image {job.image_id}: no given boxes, but other images of its batch have some")
    return job.boxes


def _job_of(shard: Shard, path: str) -> ImageJob:
    return next(job for job in shard.jobs if job.path == path)


def assemble(ledger: ShardLedger, shards: Sequence[Shard], out_dir: Path) -> None:
    """Merge every finished shard, in shard order, into the final store (streamed, atomic)."""
    finished = {shard.name for shard in ledger.finished(shards)}
    missing = [shard.name for shard in shards if shard.name not in finished]
    if missing:
        raise RuntimeError(f"cannot assemble {out_dir}: shards not finished: {missing[:5]}")
    image_ids = [job.image_id for shard in shards for job in shard.jobs]
    merge_stores([ledger.shard_dir(shard) for shard in shards], out_dir, image_ids=image_ids)
