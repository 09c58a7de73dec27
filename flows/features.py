"""Stage `features@<image set>`: region features of every image the corpora over one image folder use, into one
FeatureStore (extracted or imported): corpora that share images (Multi30K and Flickr30K) share one extraction."""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from prefect import flow, tags
from prefect.artifacts import create_table_artifact

from common.files import write_json
from common.runtime import Runtime
from corpora.prepared import read_shared_images
from features.config import FeaturesConfig
from features.extraction import BadImagesError, ShardReport, fingerprint, plan_shards
from features.extractors import EXTRACTORS, ExtractionInputs, FeatureImporter
from mmtr.params import Params
from mmtr.stage import named, run_stage, run_tags, stage_parser, task_runner
from tasks import artifact_key
from tasks.features import (
    assemble_store,
    extractor_weights,
    import_features,
    plan_image_jobs,
    probe_features,
    run_shards,
)


@dataclass(frozen=True)
class FeaturesPaths:
    prepared: tuple[str, ...]  # the prepared folders of every corpus over this image folder
    images: str
    boxes: str
    inputs: str  # paths.feature_inputs
    out: str  # the FeatureStore folder
    work: str
    metrics: str  # the metrics JSON file
    detector_data: str | None = None  # the built-in dataset whose train split trains the compact encoder
    images_outside_root: bool = False  # image paths may lead out of `images` (prepare.images_outside_root)


@flow(name="features", log_prints=True, persist_result=False)
def features(config: FeaturesConfig, paths: FeaturesPaths, seed: int, runtime: Runtime) -> dict[str, object]:
    """Extract (or import) region features into ``paths.out``; write and return the stage metrics."""
    started = time.perf_counter()
    entry = EXTRACTORS[config.extractor]
    if isinstance(entry, FeatureImporter):
        imported = import_features(config, list(paths.prepared), paths.inputs, paths.out)
        return _finish(config, paths, imported, started, [])
    boxes = paths.boxes if config.regions.mode == "given" else None
    jobs = plan_image_jobs(list(paths.prepared), paths.images, boxes, paths.images_outside_root)
    images = read_shared_images(paths.prepared)
    detector_data = Path(paths.detector_data) if paths.detector_data else None
    inputs = ExtractionInputs(
        images, Path(paths.images), Path(paths.boxes), Path(paths.inputs), Path(paths.work), seed, detector_data
    )
    weights = extractor_weights(config, inputs)
    spec = entry.spec(config.extractor, config, Path(weights), runtime)
    weights_sha = entry.weights_sha256(Path(weights))
    description = spec.description(weights_sha)
    key = fingerprint(jobs, shard_size=config.shard_size, extractor=description)
    shards = plan_shards(jobs, config.shard_size)
    reports = run_shards(shards, spec, paths.work, key, config, weights_sha, description)
    bad = [item for report in reports for item in report.bad]
    if bad and config.on_bad_image == "fail":
        raise BadImagesError(bad)
    assemble_store(paths.work, key, shards, paths.out)
    metrics: dict[str, object] = {
        "images": len(jobs),
        "bad_images": len(bad),
        "regions": sum(report.regions for report in reports),
    }
    if config.probe and boxes is not None:
        metrics["probe"] = probe_features(paths.out, list(paths.prepared), boxes)
    return _finish(config, paths, metrics, started, reports)


def _finish(
    config: FeaturesConfig, paths: FeaturesPaths, metrics: dict[str, object], started: float, reports: list[ShardReport]
) -> dict[str, object]:
    write_json(paths.metrics, metrics)  # no timings here: metrics must be identical for identical inputs
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
    description = f"{config.extractor}: shards and timing"
    create_table_artifact(key=artifact_key("features-shards"), table=rows, description=description)
    return metrics


def main(argv: Sequence[str] | None = None) -> None:
    parser = stage_parser("features", __doc__ or "")
    parser.add_argument(
        "--prepared", required=True, action="append", help="a prepared corpus folder over this image folder (repeat)"
    )
    for name, help_text in [
        ("images", "image folder (paths.images)"),
        ("boxes", "given boxes table (paths.boxes)"),
        ("inputs", "checkpoints and precomputed features you hold (paths.feature_inputs)"),
        ("out", "FeatureStore folder to write"),
        ("work", "work folder for resumable shards (paths.work)"),
        ("metrics", "metrics JSON file to write"),
    ]:
        parser.add_argument(f"--{name}", required=True, help=help_text)
    detector_help = (
        "the built-in dataset (paths.synthetic): its train split trains the compact encoder for every corpus; "
        "default: the corpus's own train split"
    )
    parser.add_argument("--detector-data", help=detector_help)

    def body(args: argparse.Namespace, params: Params) -> None:
        paths = FeaturesPaths(
            tuple(args.prepared),
            args.images,
            args.boxes,
            args.inputs,
            args.out,
            args.work,
            args.metrics,
            args.detector_data,
            params.prepare.images_outside_root,
        )
        runnable = named(features, args.params).with_options(task_runner=task_runner(params.runner))  # type: ignore[arg-type]
        with tags(*run_tags("features")):
            runnable(params.features, paths, params.seed, Runtime.resolve(params.device, params.precision))

    run_stage(parser, argv, body)


if __name__ == "__main__":
    main()
