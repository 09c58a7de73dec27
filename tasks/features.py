"""Prefect tasks for the `features` stage: plan, get the extractor's weights, extract shards, assemble, import,
probe. Thin: extractors, shards, stores and probes live in ``features/``."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from prefect import get_run_logger, task
from prefect.artifacts import update_progress_artifact
from prefect.cache_policies import NO_CACHE
from prefect.client.schemas.objects import State
from prefect.futures import as_completed
from prefect.utilities.annotations import unmapped
from tqdm import tqdm

from common import stopping
from common.errors import InputError
from corpora.prepared import read_shared_captions, read_shared_images
from features.config import FeaturesConfig
from features.extraction import ImageJob, Shard, ShardLedger, ShardReport, assemble, extract_into_ledger
from features.extractors import (
    EXTRACTORS,
    ExtractionInputs,
    ExtractorSpec,
    FeatureImporter,
    NetworkExtractor,
    build_extractor,
    image_jobs,
)
from features.probe import probe_store
from features.store import FeatureStore
from tasks import named_by, progress_artifact


@task(cache_policy=NO_CACHE, persist_result=False)
def plan_image_jobs(
    prepared: list[str], images_root: str, boxes_path: str | None, outside_allowed: bool = False
) -> list[ImageJob]:
    """One job per image of the prepared corpora (each image once, in order of first appearance), with its given
    boxes when a boxes file is used; every path stays inside ``images_root`` unless ``outside_allowed``."""
    images = read_shared_images(prepared)
    source = ", ".join(f"{folder}/images.parquet" for folder in prepared)
    boxes = Path(boxes_path) if boxes_path else None
    jobs = image_jobs(images, Path(images_root), boxes, source=source, outside_allowed=outside_allowed)
    get_run_logger().info("Planned %d images from %s", len(jobs), ", ".join(prepared))
    return jobs


@task(cache_policy=NO_CACHE, persist_result=False)
def extractor_weights(config: FeaturesConfig, inputs: ExtractionInputs) -> str:
    """The checkpoint the extractor runs; the built-in preset is trained here (or reused from an identical run)."""
    entry = EXTRACTORS[config.extractor]
    assert isinstance(entry, NetworkExtractor)
    weights = entry.weights(config, inputs)
    get_run_logger().info("%s runs %s", config.extractor, weights)
    return str(weights)


def _transient(task: object, task_run: object, state: State) -> bool:
    """Retry a shard only on errors that may pass (I/O, a lost worker), never on bad input."""
    try:
        state.result()
    except InputError:
        return False
    except Exception:
        return True
    return False


def _shard_name(parameters: dict[str, Any]) -> str:
    shard: Shard = parameters["shard"]
    return f"extract {shard.name}"


@task(
    cache_policy=NO_CACHE,
    persist_result=False,
    retries=1,
    retry_delay_seconds=5,
    retry_condition_fn=_transient,
    task_run_name=named_by(_shard_name),
)
def extract_shard_task(
    shard: Shard,
    spec: ExtractorSpec,
    ledger_root: str,
    fingerprint: str,
    batch_size: int,
    on_bad_image: Literal["fail", "skip"],
    checkpoint_sha256: str,
    config: dict[str, object],
) -> ShardReport:
    """Extract one shard into the ledger (skipped if a killed run already finished it; given up between two batches
    once the stage is stopping: :func:`run_shards`)."""
    return extract_into_ledger(
        ShardLedger(ledger_root, fingerprint),
        shard,
        lambda: build_extractor(spec),
        batch_size=batch_size,
        on_bad_image=on_bad_image,
        checkpoint_sha256=checkpoint_sha256,
        config=config,
        stop=stopping.requested,
    )


def run_shards(
    shards: list[Shard],
    spec: ExtractorSpec,
    work: str,
    fingerprint: str,
    config: FeaturesConfig,
    checkpoint_sha256: str,
    description: dict[str, object],
) -> list[ShardReport]:
    """Map the shards over the flow's task runner; a CLI bar and a Prefect progress artifact follow them. A stop
    signal meanwhile ends the running shards at their next batch (:func:`common.stopping.cancel_on_interrupt`)."""
    artifact_id = progress_artifact("Feature shards finished")
    reports: list[ShardReport] = []
    with stopping.cancel_on_interrupt():
        futures = extract_shard_task.map(
            shards,
            unmapped(spec),
            unmapped(work),
            unmapped(fingerprint),
            unmapped(config.batch_size),
            unmapped(config.on_bad_image),
            unmapped(checkpoint_sha256),
            unmapped(description),
        )
        with tqdm(total=sum(len(shard.jobs) for shard in shards), unit="img", desc="features") as bar:
            for future in as_completed(futures):
                reports.append(future.result())
                bar.update(reports[-1].images)
                update_progress_artifact(artifact_id=artifact_id, progress=100.0 * len(reports) / len(shards))
    return sorted(reports, key=lambda report: report.shard)


@task(cache_policy=NO_CACHE, persist_result=False)
def assemble_store(ledger_root: str, fingerprint: str, shards: list[Shard], out: str) -> None:
    ledger = ShardLedger(ledger_root, fingerprint)
    assemble(ledger, shards, Path(out))
    FeatureStore.open(out)  # opening checks every value is finite
    ledger.remove()
    get_run_logger().info(
        "Wrote the FeatureStore %s (%d images); removed its shards", out, sum(len(s.jobs) for s in shards)
    )


@task(cache_policy=NO_CACHE, persist_result=False)
def probe_features(store_path: str, prepared: list[str], boxes_path: str) -> dict[str, dict[str, float]]:
    """Linear probes, train split -> test split, for every label column of the boxes table (built-in data)."""
    images = read_shared_images(prepared)
    return probe_store(FeatureStore.open(store_path), images, Path(boxes_path))


@task(cache_policy=NO_CACHE, persist_result=False)
def import_features(config: FeaturesConfig, prepared: list[str], inputs: str, out: str) -> dict[str, object]:
    """Import SCAN ``<stem>_ims.npy`` arrays (checked against the prepared images or captions) or bottom-up TSV files
    for the prepared images (no extraction)."""
    entry = EXTRACTORS[config.extractor]
    assert isinstance(entry, FeatureImporter)
    images = read_shared_images(prepared)
    entry.run(config, images, read_shared_captions(prepared, images), Path(inputs), Path(out))
    store = FeatureStore.open(out)  # opening checks every value is finite
    get_run_logger().info("Imported %d images into %s", len(store), out)
    return {"images": len(store), "bad_images": 0, "regions": int(store.num_regions.sum())}
