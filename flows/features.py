"""Stage `features`: region features of every prepared image into a FeatureStore (extracted or imported)."""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from prefect import flow, tags
from prefect.artifacts import create_table_artifact

from features.checkpoints import checkpoint_sha256
from features.compact import CompactConfig, CompactTraining, weights_sha256
from features.extraction import BadImagesError, ShardReport, fingerprint, plan_shards
from flows.params import FeaturesParams, Params
from flows.stage import run_stage, run_tags, stage_parser, task_runner
from tasks.features import (
    ExtractorSpec,
    assemble_store,
    import_features,
    plan_image_jobs,
    probe_features,
    region_selection,
    run_shards,
    train_compact_encoder,
    write_metrics,
)
from tasks.runtime import Precision, device_name


@dataclass(frozen=True)
class FeaturesPaths:
    prepared: str
    images: str
    boxes: str
    inputs: str  # paths.feature_inputs
    out: str  # the FeatureStore folder
    work: str
    metrics: str  # the metrics JSON file


@flow(name="features", log_prints=True, persist_result=False)
def features(
    params: FeaturesParams, paths: FeaturesPaths, seed: int, device: str, precision: Precision
) -> dict[str, object]:
    """Extract (or import) region features into ``paths.out``; write and return the stage metrics."""
    started = time.perf_counter()
    if params.extractor in ("scan-npy", "butd-tsv"):
        imported = import_features(params, paths.prepared, paths.inputs, paths.out)
        return _finish(params, paths, imported, started, [])
    boxes = paths.boxes if params.regions.mode == "given" else None
    jobs = plan_image_jobs(paths.prepared, paths.images, boxes)
    spec = _extractor_spec(params, paths, seed, device, precision)
    checkpoint_sha = weights_sha256(spec.checkpoint) if spec.kind == "compact" else checkpoint_sha256(spec.checkpoint)
    description: dict[str, object] = {
        "extractor": spec.kind,
        "checkpoint_sha256": checkpoint_sha,
        "selection": asdict(spec.selection),
    }
    if spec.kind == "butd":
        description |= {"test_scale": spec.test_scale, "max_size": spec.max_size}
    key = fingerprint(jobs, shard_size=params.shard_size, extractor=description)
    shards = plan_shards(jobs, params.shard_size)
    reports = run_shards(shards, spec, paths.work, key, params, checkpoint_sha, description)
    bad = [item for report in reports for item in report.bad]
    if bad and params.on_bad_image == "fail":
        raise BadImagesError(bad)
    assemble_store(paths.work, key, shards, paths.out)
    metrics: dict[str, object] = {
        "images": len(jobs),
        "bad_images": len(bad),
        "regions": sum(report.regions for report in reports),
    }
    if params.probe and boxes is not None:
        metrics["probe"] = probe_features(paths.out, paths.prepared, boxes)
    return _finish(params, paths, metrics, started, reports)


def _extractor_spec(
    params: FeaturesParams, paths: FeaturesPaths, seed: int, device: str, precision: Precision
) -> ExtractorSpec:
    """The extractor to run; the built-in preset is trained first (or reused from an earlier identical run)."""
    selection = region_selection(params.regions)
    if params.extractor == "butd":
        checkpoint = str(Path(paths.inputs) / str(params.butd.checkpoint))
        return ExtractorSpec(
            "butd", checkpoint, selection, device, precision, params.butd.test_scale, params.butd.max_size
        )
    compact = params.compact
    config = CompactConfig(compact.glimpse, compact.input_size, compact.widths, compact.dim)
    training = CompactTraining(compact.epochs, compact.batch_size, compact.lr, seed)
    checkpoint = train_compact_encoder(paths.prepared, paths.images, paths.boxes, config, training, paths.work)
    return ExtractorSpec("compact", checkpoint, selection, device, precision)


def _finish(
    params: FeaturesParams, paths: FeaturesPaths, metrics: dict[str, object], started: float, reports: list[ShardReport]
) -> dict[str, object]:
    write_metrics(paths.metrics, metrics)  # no timings here: metrics must be identical for identical inputs
    rows: list[dict[str, object]] = [
        {
            "shard": report.shard,
            "images": report.images,
            "regions": report.regions,
            "bad": len(report.bad),
            "seconds": round(report.seconds, 2),
        }
        for report in reports
    ]
    rows.append(
        {
            "shard": "all",
            "images": metrics.get("images"),
            "regions": metrics.get("regions"),
            "bad": metrics.get("bad_images"),
            "seconds": round(time.perf_counter() - started, 2),
        }
    )
    create_table_artifact(key="features-shards", table=rows, description=f"{params.extractor}: shards and timing")
    return metrics


def main(argv: Sequence[str] | None = None) -> None:
    parser = stage_parser("features", __doc__ or "")
    for name, help_text in [
        ("prepared", "prepared tables (paths.prepared)"),
        ("images", "image folder (paths.images)"),
        ("boxes", "given boxes table (paths.boxes)"),
        ("inputs", "checkpoints and precomputed features you hold (paths.feature_inputs)"),
        ("out", "FeatureStore folder to write"),
        ("work", "work folder for resumable shards (paths.work)"),
        ("metrics", "metrics JSON file to write"),
    ]:
        parser.add_argument(f"--{name}", required=True, help=help_text)

    def body(args: argparse.Namespace, params: Params) -> None:
        paths = FeaturesPaths(args.prepared, args.images, args.boxes, args.inputs, args.out, args.work, args.metrics)
        runnable = features.with_options(task_runner=task_runner(params.runner))  # type: ignore[arg-type]
        with tags(*run_tags("features")):
            runnable(params.features, paths, params.seed, device_name(params.device), params.precision)

    run_stage(parser, argv, body)


if __name__ == "__main__":
    main()
