"""Prefect tasks for the `features` stage: train the built-in encoder, extract shards, assemble, import, probe."""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal
from uuid import UUID

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from prefect import get_run_logger, task
from prefect.artifacts import create_progress_artifact, update_progress_artifact
from prefect.cache_policies import NO_CACHE
from prefect.client.schemas.objects import State
from prefect.futures import as_completed
from prefect.utilities.annotations import unmapped
from tqdm import tqdm

from corpora.io import InputError, atomic_path, write_text
from corpora.tables import read_images
from features.boxes import read_given_boxes
from features.butd_extractor import BUTDExtractor
from features.checkpoints import checkpoint_sha256, load_detector
from features.compact import (
    CompactConfig,
    CompactExtractor,
    CompactTraining,
    labelled_glimpses,
    load_encoder,
    save_encoder,
    train_encoder,
)
from features.extraction import ImageJob, RegionExtractor, Shard, ShardLedger, ShardReport, assemble, extract_shard
from features.images import BadImageError, load_rgb
from features.importers import import_butd_tsv, import_scan_splits
from features.probe import linear_probe
from features.regions import AdaptiveRegions, FixedRegions, GivenRegions, RegionSelection, max_regions
from features.store import FeatureStore
from flows.params import FeaturesParams, RegionParams
from tasks.runtime import Precision, autocast, resolve_device


@dataclass(frozen=True)
class ExtractorSpec:
    """A picklable description of an extractor; shard tasks rebuild it wherever they run."""

    kind: Literal["compact", "butd"]
    checkpoint: str
    selection: RegionSelection
    device: str  # resolved once by the flow ("cpu", "cuda:0")
    precision: Precision
    test_scale: int = 600  # butd only
    max_size: int = 1000  # butd only


def region_selection(regions: RegionParams) -> RegionSelection:
    if regions.mode == "fixed":
        return FixedRegions(count=regions.count, conf_thresh=regions.conf_thresh)
    if regions.mode == "adaptive":
        return AdaptiveRegions(regions.min_count, regions.max_count, regions.conf_thresh)
    return GivenRegions(max_count=regions.max_count)


@functools.lru_cache(maxsize=2)
def build_extractor(spec: ExtractorSpec) -> RegionExtractor:
    """The extractor for ``spec``; cached so a worker process loads the weights once per run."""
    device = resolve_device(spec.device)
    if spec.kind == "compact":
        return CompactExtractor(load_encoder(spec.checkpoint), max_regions=max_regions(spec.selection), device=device)
    model = load_detector(spec.checkpoint, test_scale=spec.test_scale, max_size=spec.max_size)
    return BUTDExtractor(model, spec.selection, device, autocast=functools.partial(autocast, device, spec.precision))


@task(cache_policy=NO_CACHE, persist_result=False)
def plan_image_jobs(prepared: str, images_root: str, boxes_path: str | None) -> list[ImageJob]:
    """One job per prepared image, in images.parquet order, with its given boxes when a boxes file is used."""
    images = read_images(Path(prepared) / "images.parquet")
    given = read_given_boxes(boxes_path) if boxes_path else None
    jobs = [
        ImageJob(image_id, str(Path(images_root) / path), None if given is None else given.of(image_id))
        for image_id, path in zip(images.column("image_id").to_pylist(), images.column("path").to_pylist(), strict=True)
    ]
    get_run_logger().info("Planned %d images from %s", len(jobs), prepared)
    return jobs


@task(cache_policy=NO_CACHE, persist_result=False)
def train_compact_encoder(
    prepared: str, images_root: str, boxes_path: str, config: CompactConfig, training: CompactTraining, work: str
) -> str:
    """Train the built-in encoder on the train split's labelled boxes; reuse it when the same inputs come again."""
    images = read_images(Path(prepared) / "images.parquet")
    train = images.filter(pc.equal(images.column("split"), "train"))
    given = read_given_boxes(boxes_path)
    if given.labels is None or given.attributes is None:
        raise InputError(f"{boxes_path}: the compact encoder trains on `label` and `attributes` columns; none found")
    key = hashlib.sha256(
        json.dumps(
            [asdict(config), asdict(training), checkpoint_sha256(boxes_path), train.column("image_id").to_pylist()]
        ).encode()
    ).hexdigest()[:16]
    checkpoint = Path(work) / "compact" / f"encoder-{key}.pt"
    logger = get_run_logger()
    if checkpoint.is_file():
        logger.info("Reusing the compact encoder trained earlier on the same inputs: %s", checkpoint)
        return str(checkpoint)
    objects = sorted({label for labels in given.labels.values() for label in labels})
    attributes = sorted({name for boxes in given.attributes.values() for names in boxes for name in names})
    examples = []
    for image_id, path in zip(train.column("image_id").to_pylist(), train.column("path").to_pylist(), strict=True):
        try:
            image = load_rgb(Path(images_root) / path)
        except BadImageError as error:  # the extraction pass reports every bad image (or records it)
            logger.warning("Training without %s", error)
            continue
        if image_id in given.boxes:
            examples.append((image, given.of(image_id), given.labels[image_id], given.attributes[image_id]))
    data = labelled_glimpses(examples, config, objects=objects, attributes=attributes)
    logger.info("Training the compact encoder on %d boxes of %d train images", len(data.objects), train.num_rows)
    model = train_encoder(data, config, training, objects=objects, attributes=attributes)
    checkpoint.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(checkpoint) as tmp:
        save_encoder(model, str(tmp))
    return str(checkpoint)


def _transient(task: object, task_run: object, state: State) -> bool:
    """Retry a shard only on errors that may pass (I/O, a lost worker), never on bad input."""
    try:
        state.result()
    except InputError:
        return False
    except Exception:
        return True
    return False


@task(cache_policy=NO_CACHE, persist_result=False, retries=1, retry_delay_seconds=5, retry_condition_fn=_transient)
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
    """Extract one shard into the ledger (skipped if a killed run already finished it)."""
    ledger = ShardLedger(ledger_root, fingerprint)
    if shard in ledger.finished([shard]):
        return ledger.report(shard)
    report = extract_shard(
        shard,
        build_extractor(spec),
        out_dir=ledger.shard_dir(shard),
        batch_size=batch_size,
        on_bad_image=on_bad_image,
        checkpoint_sha256=checkpoint_sha256,
        config=config,
    )
    if report.written:
        ledger.record(shard, report)
    return report


def run_shards(
    shards: list[Shard],
    spec: ExtractorSpec,
    work: str,
    fingerprint: str,
    params: FeaturesParams,
    checkpoint_sha256: str,
    config: dict[str, object],
) -> list[ShardReport]:
    """Map the shards over the flow's task runner; a CLI bar and a Prefect progress artifact follow them."""
    futures = extract_shard_task.map(
        shards,
        unmapped(spec),
        unmapped(work),
        unmapped(fingerprint),
        unmapped(params.batch_size),
        unmapped(params.on_bad_image),
        unmapped(checkpoint_sha256),
        unmapped(config),
    )
    artifact_id = create_progress_artifact(progress=0.0, description="Feature shards finished")
    assert isinstance(artifact_id, UUID)
    reports: list[ShardReport] = []
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
    FeatureStore.open(out).check_finite()
    ledger.remove()
    get_run_logger().info(
        "Wrote the FeatureStore %s (%d images); removed its shards", out, sum(len(s.jobs) for s in shards)
    )


@task(cache_policy=NO_CACHE, persist_result=False)
def probe_features(store_path: str, prepared: str, boxes_path: str) -> dict[str, dict[str, float]]:
    """Linear probes, train split -> test split, for every label column of the boxes table (built-in data)."""
    store = FeatureStore.open(store_path)
    images = read_images(Path(prepared) / "images.parquet")
    split_of = dict(zip(images.column("image_id").to_pylist(), images.column("split").to_pylist(), strict=True))
    results: dict[str, dict[str, float]] = {}
    for column, values in _label_columns(boxes_path).items():
        train = _region_rows(store, split_of, values, "train")
        test = _region_rows(store, split_of, values, "test")
        result = linear_probe(train[0], train[1], test[0], test[1])
        results[column] = {
            "accuracy": round(100 * result.accuracy, 2),
            "chance": round(100 * result.chance, 2),
            "classes": result.classes,
            "test_regions": result.test_size,
        }
        get_run_logger().info(
            "Probe %-7s accuracy %.1f%% (chance %.1f%%)", column, 100 * result.accuracy, 100 * result.chance
        )
    return results


def _label_columns(boxes_path: str) -> dict[str, dict[str, list[str]]]:
    """Every string column of the boxes table (e.g. shape, colour, size), grouped by image in box order."""
    table = pq.read_table(boxes_path)
    image_ids = table.column("image_id").to_pylist()
    columns: dict[str, dict[str, list[str]]] = {}
    for name in table.column_names:
        if name == "image_id" or table.schema.field(name).type != pa.string():
            continue
        grouped: dict[str, list[str]] = {}
        for image_id, value in zip(image_ids, table.column(name).to_pylist(), strict=True):
            grouped.setdefault(image_id, []).append(value)
        columns[name] = grouped
    return columns


def _region_rows(
    store: FeatureStore, split_of: dict[str, str], values: dict[str, list[str]], split: str
) -> tuple[np.ndarray, list[str]]:
    """Features of the given-box regions of one split, with the label of each box (region i = box i)."""
    ids = [image_id for image_id in store.image_ids if split_of.get(image_id) == split and image_id in values]
    features, mask, _ = store.batch(store.rows(ids))
    rows, labels = [], []
    for position, image_id in enumerate(ids):
        count = int(mask[position].sum())
        rows.append(features[position, :count].astype(np.float32))
        labels += values[image_id][:count]
    return np.concatenate(rows), labels


def write_metrics(path: str, metrics: dict[str, object]) -> None:
    write_text(path, json.dumps(metrics, indent=2, sort_keys=True) + "\n")


@task(cache_policy=NO_CACHE, persist_result=False)
def import_features(params: FeaturesParams, prepared: str, inputs: str, out: str) -> dict[str, object]:
    """Import SCAN ``<stem>_ims.npy`` arrays or bottom-up TSV files for the prepared images (no extraction)."""
    images = read_images(Path(prepared) / "images.parquet")
    image_ids = images.column("image_id").to_pylist()
    if params.extractor == "scan-npy":
        splits = params.imported.scan_splits
        split_column = images.column("split").to_pylist()
        ids_by_split = {
            split: [image_id for image_id, of in zip(image_ids, split_column, strict=True) if of == split]
            for split in splits
        }
        import_scan_splits(inputs, splits, ids_by_split, out)
    else:
        paths = [Path(inputs) / name for name in params.imported.tsv_files]
        import_butd_tsv(paths, out_dir=out, max_regions=_imported_k(params.regions), image_ids=image_ids)
    store = FeatureStore.open(out)
    store.check_finite()
    get_run_logger().info("Imported %d images into %s", len(store), out)
    return {"images": len(store), "bad_images": 0, "regions": int(store.num_regions.sum())}


def _imported_k(regions: RegionParams) -> int:
    """K of an imported store: imported features come without given boxes, so `given` counts as `fixed`."""
    return regions.count if regions.mode == "given" else max_regions(region_selection(regions))
