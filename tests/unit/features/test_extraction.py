"""Shards, receipts, bad-image policies and assembly, with a stand-in extractor whose output is known."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from common.stopping import Cancelled
from features.extraction import (
    BadImagesError,
    ImageJob,
    ShardLedger,
    assemble,
    extract_into_ledger,
    fingerprint,
    plan_shards,
)
from features.regions import ImageRegions
from features.store import FeatureStore


class MeanColourExtractor:
    """Each box's feature is the mean RGB inside it plus the box width: easy to check by hand."""

    name, dim, max_regions = "mean-colour", 4, 3

    def extract(self, images: list[np.ndarray], given_boxes: list[np.ndarray] | None = None) -> list[ImageRegions]:
        assert given_boxes is not None
        results = []
        for image, boxes in zip(images, given_boxes, strict=True):
            rows = [
                [*image[int(y0) : int(y1), int(x0) : int(x1)].reshape(-1, 3).mean(0), x1 - x0]
                for x0, y0, x1, y1 in boxes
            ]
            results.append(ImageRegions(np.array(rows, np.float32).reshape(-1, 4), boxes.astype(np.float32)))
        return results


def make_jobs(root: Path, count: int) -> list[ImageJob]:
    jobs = []
    for index in range(count):
        path = root / f"im{index}.png"
        Image.new("RGB", (20, 10), (index * 10, 0, 0)).save(path)
        boxes = np.array([[0, 0, 10, 10], [5, 0, 20, 10]][: 1 + index % 2], np.float32)
        jobs.append(ImageJob(f"im{index}", str(path), boxes))
    return jobs


def test_plan_shards_and_fingerprint(tmp_path: Path) -> None:
    jobs = make_jobs(tmp_path, 5)
    shards = plan_shards(jobs, 2)
    assert [len(shard.jobs) for shard in shards] == [2, 2, 1] and shards[2].name == "shard-00002"
    base = fingerprint(jobs, shard_size=2, extractor={"name": "x"})
    assert base == fingerprint(jobs, shard_size=2, extractor={"name": "x"})
    assert base != fingerprint(jobs, shard_size=3, extractor={"name": "x"})
    assert base != fingerprint(jobs, shard_size=2, extractor={"name": "y"})
    moved = [*jobs[:-1], ImageJob(jobs[-1].image_id, jobs[-1].path, jobs[-1].boxes + 1)]
    assert base != fingerprint(moved, shard_size=2, extractor={"name": "x"})


def run_all(tmp_path: Path, jobs: list[ImageJob], on_bad_image: str = "fail") -> tuple[ShardLedger, list]:
    shards = plan_shards(jobs, 2)
    ledger = ShardLedger(tmp_path / "work", "f" * 64)
    reports = []
    for shard in shards:
        report = extract_into_ledger(
            ledger,
            shard,
            MeanColourExtractor,
            batch_size=2,
            on_bad_image=on_bad_image,
            checkpoint_sha256=None,
            config={},
        )  # type: ignore[arg-type]
        reports.append(report)
    return ledger, reports


def test_a_finished_shard_is_never_extracted_again(tmp_path: Path) -> None:
    """A rerun after a kill takes finished shards from their receipts and loads no extractor for them."""
    jobs = make_jobs(tmp_path, 3)
    ledger, first = run_all(tmp_path, jobs)
    built: list[str] = []

    def counting() -> MeanColourExtractor:
        built.append("extractor")
        return MeanColourExtractor()

    shards = plan_shards(jobs, 2)
    again = [
        extract_into_ledger(
            ledger, shard, counting, batch_size=2, on_bad_image="fail", checkpoint_sha256=None, config={}
        )
        for shard in shards
    ]
    assert built == [] and [(r.shard, r.images, r.regions) for r in again] == [
        (r.shard, r.images, r.regions) for r in first
    ]
    (ledger.root / "done" / f"{shards[1].name}.json").unlink()  # killed before its receipt: extracted again
    extract_into_ledger(
        ledger, shards[1], counting, batch_size=2, on_bad_image="fail", checkpoint_sha256=None, config={}
    )
    assert built == ["extractor"]


def test_shards_assemble_into_the_expected_store(tmp_path: Path) -> None:
    jobs = make_jobs(tmp_path, 5)
    ledger, reports = run_all(tmp_path, jobs)
    shards = plan_shards(jobs, 2)
    assert ledger.finished(shards) == shards and sum(report.regions for report in reports) == 7
    assemble(ledger, shards, tmp_path / "store")
    store = FeatureStore.open(tmp_path / "store")
    assert store.image_ids == [f"im{i}" for i in range(5)]
    features, mask, boxes = store.batch(np.arange(5))
    assert features.shape == (5, 3, 4) and mask.sum(1).tolist() == [1, 2, 1, 2, 1]
    np.testing.assert_allclose(features[3, 0], [30, 0, 0, 10])  # mean red of image 3 in box 0, width 10
    np.testing.assert_allclose(features[3, 1], [30, 0, 0, 15])
    np.testing.assert_array_equal(boxes[1, 1], [5, 0, 20, 10])
    assert ledger.report(shards[1]).images == 2


def test_a_stop_between_batches_gives_the_shard_up_leaving_nothing(tmp_path: Path) -> None:
    """Set while the first batch runs, the stop ends the shard before the second: no shard store, no receipt, no
    temporary; the next run extracts it whole."""
    jobs = make_jobs(tmp_path, 4)
    (shard,) = plan_shards(jobs, 4)
    ledger = ShardLedger(tmp_path / "work", "f" * 64)
    stop, batches = threading.Event(), []

    class StoppedDuringFirstBatch(MeanColourExtractor):
        def extract(self, images: list[np.ndarray], given_boxes: list[np.ndarray] | None = None) -> list[ImageRegions]:
            batches.append(len(images))
            stop.set()
            return super().extract(images, given_boxes)

    with pytest.raises(Cancelled, match=r"^extracting shard-00000: given up, the process is stopping$"):
        extract_into_ledger(
            ledger,
            shard,
            StoppedDuringFirstBatch,
            batch_size=2,
            on_bad_image="fail",
            checkpoint_sha256=None,
            config={},
            stop=stop,
        )  # type: ignore[arg-type]
    assert batches == [2] and ledger.finished([shard]) == []
    assert sorted(str(path.relative_to(ledger.root)) for path in ledger.root.rglob("*")) == ["done", "shards"]
    report = extract_into_ledger(
        ledger, shard, MeanColourExtractor, batch_size=2, on_bad_image="fail", checkpoint_sha256=None, config={}
    )  # type: ignore[arg-type]
    assert report.images == 4 and ledger.finished([shard]) == [shard]


def test_bad_images_fail_without_writing_or_skip_with_the_reason(tmp_path: Path) -> None:
    jobs = make_jobs(tmp_path, 4)
    Path(jobs[1].path).write_bytes(b"broken")
    Path(jobs[2].path).unlink()
    ledger, reports = run_all(tmp_path / "fail", jobs, "fail")
    assert [report.written for report in reports] == [False, False]
    assert ledger.finished(plan_shards(jobs, 2)) == []
    bad = [item for report in reports for item in report.bad]
    with pytest.raises(BadImagesError, match=r"2 bad image\(s\)") as raised:
        raise BadImagesError(bad)
    assert jobs[1].path in str(raised.value) and "missing" in str(raised.value)

    ledger, reports = run_all(tmp_path / "skip", jobs, "skip")
    assemble(ledger, plan_shards(jobs, 2), tmp_path / "store")
    store = FeatureStore.open(tmp_path / "store")
    errors = store.index.column("error").to_pylist()
    assert errors[0] is None and errors[2] == "missing" and "not a readable image" in errors[1]
    assert store.num_regions.tolist() == [1, 0, 0, 2]


def test_assemble_refuses_unfinished_shards(tmp_path: Path) -> None:
    jobs = make_jobs(tmp_path, 3)
    ledger = ShardLedger(tmp_path / "work", "a" * 64)
    with pytest.raises(RuntimeError, match=r"shards not finished: \['shard-00000', 'shard-00001'\]"):
        assemble(ledger, plan_shards(jobs, 2), tmp_path / "store")


def test_given_boxes_outside_a_tiny_image_and_a_decompression_bomb_are_bad_images(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A box wholly outside its image would give a "valid" region of nothing; an image over PIL's pixel limit is
    refused as bad input (recorded or failing like any bad image), never retried as a transient error."""
    jobs = make_jobs(tmp_path, 3)
    tiny = tmp_path / "tiny.png"
    Image.new("RGB", (4, 4), (255, 0, 0)).save(tiny)
    jobs[1] = ImageJob("im1", str(tiny), np.array([[0, 0, 3, 3], [10, 10, 20, 20]], np.float32))
    big = tmp_path / "big.png"
    Image.new("RGB", (40, 40)).save(big)
    jobs[2] = ImageJob("im2", str(big), jobs[2].boxes)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 500)  # 1,600 pixels: over twice the limit
    ledger, _ = run_all(tmp_path / "skip", jobs, "skip")
    assemble(ledger, plan_shards(jobs, 2), tmp_path / "store")
    errors = FeatureStore.open(tmp_path / "store").index.column("error").to_pylist()
    assert errors[0] is None
    assert errors[1] == "given box 1 (10, 10, 20, 20) lies outside the 4x4 image"
    assert errors[2].startswith("too many pixels, a possible decompression bomb")
