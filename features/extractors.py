"""Every region extractor by name (``features.extractor``): one row each.

A row is a :class:`NetworkExtractor` (a network run over the images, shard by shard: the built-in compact
preset, the bottom-up-attention detector) or a :class:`FeatureImporter` (features users already hold,
copied into a FeatureStore as they are). Add an extractor: write its module, add its row here and the check of
the settings it needs to :data:`~features.config.EXTRACTOR_NEEDS` (the `features` settings,
:class:`~features.config.FeaturesConfig`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from common.errors import InputError
from common.files import file_sha256, file_stamp
from common.paths import inside_root
from common.runtime import Runtime
from corpora.image_files import OUTSIDE_SETTING
from features.bottom_up.detectron2_model import load_detectron2_detector, require_detectron2
from features.bottom_up.extractor import BUTDExtractor
from features.bottom_up.weights import load_detector
from features.boxes import read_given_boxes
from features.compact import (
    CompactExtractor,
    builtin_training_set,
    encoder_for,
    load_encoder,
    weights_sha256,
)
from features.config import FeaturesConfig
from features.extraction import ImageJob, RegionExtractor
from features.importers import import_butd_tsv, import_scan_splits
from features.regions import RegionSelection, max_regions


@dataclass(frozen=True)
class ExtractionInputs:
    """What an extractor's weights may come from."""

    images: pa.Table  # the prepared images table
    images_root: Path
    boxes: Path  # the given boxes table (with labels on the built-in data)
    inputs: Path  # checkpoints and precomputed features users hold
    work: Path  # resumable intermediate work
    seed: int
    # The built-in dataset folder (Multi30K layout, images/, objects.parquet) whose train split trains the compact
    # encoder, so that every corpus is featurized by one encoder, as one detector serves every real corpus; None:
    # train on this corpus's own train split.
    detector_data: Path | None = None


@dataclass(frozen=True)
class ExtractorSpec:
    """A picklable, hashable description of a network extractor; shard tasks rebuild it wherever they run."""

    name: str
    weights: str
    selection: RegionSelection
    runtime: Runtime
    options: tuple[tuple[str, int], ...] = ()  # the extractor's own settings that change the features

    def description(self, weights_sha256: str) -> dict[str, object]:
        """What determines the features: recorded in meta.json and part of the shard fingerprint."""
        return {
            "extractor": self.name,
            "checkpoint_sha256": weights_sha256,
            "selection": asdict(self.selection),
            **dict(self.options),
        }


@dataclass(frozen=True)
class NetworkExtractor:
    weights: Callable[[FeaturesConfig, ExtractionInputs], Path]  # the checkpoint to run (trained first, if need be)
    weights_sha256: Callable[[Path], str]
    options: Callable[[FeaturesConfig], dict[str, int]]
    build: Callable[[ExtractorSpec], RegionExtractor]

    def spec(self, name: str, config: FeaturesConfig, weights: Path, runtime: Runtime) -> ExtractorSpec:
        options = tuple(sorted(self.options(config).items()))
        return ExtractorSpec(name, str(weights), config.regions.selection(), runtime, options)


@dataclass(frozen=True)
class FeatureImporter:
    # (config, images table, captions table, inputs folder, store folder)
    run: Callable[[FeaturesConfig, pa.Table, pa.Table, Path, Path], None]


def _compact_weights(config: FeaturesConfig, inputs: ExtractionInputs) -> Path:
    images, images_root, boxes = inputs.images, inputs.images_root, inputs.boxes
    if inputs.detector_data is not None:
        images, images_root, boxes = builtin_training_set(inputs.detector_data)
    return encoder_for(images, images_root, read_given_boxes(boxes), config.compact, seed=inputs.seed, work=inputs.work)


def _compact_build(spec: ExtractorSpec) -> RegionExtractor:
    device = spec.runtime.torch_device()
    return CompactExtractor(load_encoder(spec.weights), max_regions=max_regions(spec.selection), device=device)


def _butd_weights(config: FeaturesConfig, inputs: ExtractionInputs) -> Path:
    return inputs.inputs / str(config.butd.checkpoint)


def _butd_build(spec: ExtractorSpec) -> RegionExtractor:
    model = load_detector(spec.weights, **dict(spec.options))
    device = spec.runtime.torch_device()
    return BUTDExtractor(model, spec.selection, device, autocast=spec.runtime.autocast())


def _butd_detectron2_build(spec: ExtractorSpec) -> RegionExtractor:
    model = load_detectron2_detector(spec.weights, **dict(spec.options))
    device = spec.runtime.torch_device()
    return BUTDExtractor(model, spec.selection, device, autocast=spec.runtime.autocast(), name="butd-r101-detectron2")


def _butd_detectron2_weights(config: FeaturesConfig, inputs: ExtractionInputs) -> Path:
    require_detectron2()  # before any shard runs: the error names the extra to install
    return _butd_weights(config, inputs)


def _import_scan(config: FeaturesConfig, images: pa.Table, captions: pa.Table, inputs: Path, out: Path) -> None:
    splits = config.imported.scan_splits
    pairs = list(zip(images.column("image_id").to_pylist(), images.column("split").to_pylist(), strict=True))
    unlisted = sorted({split for _, split in pairs} - set(splits))
    if unlisted:  # their images would be left out of the store, and every later stage would miss them
        raise InputError(
            f"imported.scan_splits: no file stem for the {', '.join(unlisted)} split of the prepared "
            f"images; add `{unlisted[0]}: <stem>` for {inputs}/<stem>_ims.npy"
        )
    ids_by_split = {split: [image_id for image_id, of in pairs if of == split] for split in splits}
    own = _human_captions(captions, config.imported.caption_lang)
    captions_by_split = {split: [own.get(image_id, []) for image_id in ids] for split, ids in ids_by_split.items()}
    import_scan_splits(inputs, splits, ids_by_split, out, captions_by_split=captions_by_split)


def _human_captions(captions: pa.Table, lang: str) -> dict[str, list[str]]:
    """image_id -> its human comparable captions in ``lang``, in table order (the order the adapters wrote)."""
    wanted = pc.and_(
        pc.and_(pc.equal(captions.column("origin"), "human"), pc.equal(captions.column("kind"), "comparable")),
        pc.equal(captions.column("lang"), lang),
    )
    rows = captions.filter(wanted)
    own: dict[str, list[str]] = {}
    for image_id, text in zip(rows.column("image_id").to_pylist(), rows.column("text").to_pylist(), strict=True):
        own.setdefault(image_id, []).append(text)
    return own


def _import_tsv(config: FeaturesConfig, images: pa.Table, captions: pa.Table, inputs: Path, out: Path) -> None:
    paths = [inputs / name for name in config.imported.tsv_files]
    import_butd_tsv(
        paths, out_dir=out, max_regions=config.regions.imported_count(), image_ids=images.column("image_id").to_pylist()
    )


def _compact_sha256(weights: Path) -> str:
    return weights_sha256(str(weights))


def _no_options(config: FeaturesConfig) -> dict[str, int]:
    return {}


def _butd_options(config: FeaturesConfig) -> dict[str, int]:
    return {"test_scale": config.butd.test_scale, "max_size": config.butd.max_size}


EXTRACTORS: dict[str, NetworkExtractor | FeatureImporter] = {
    # the built-in preset: a small CNN trained on the given boxes' labels (the built-in data)
    "compact": NetworkExtractor(_compact_weights, _compact_sha256, _no_options, _compact_build),
    # bottom-up attention Faster R-CNN R101-C4 (Anderson et al. 2018) from a public checkpoint
    "butd": NetworkExtractor(_butd_weights, file_sha256, _butd_options, _butd_build),
    # the same network and checkpoint run through detectron2's modules (the detectron2 extra)
    "butd-detectron2": NetworkExtractor(_butd_detectron2_weights, file_sha256, _butd_options, _butd_detectron2_build),
    "scan-npy": FeatureImporter(_import_scan),  # SCAN precomp <stem>_ims.npy
    "butd-tsv": FeatureImporter(_import_tsv),  # bottom-up TSV files (generate_tsv.py)
}


def build_extractor(spec: ExtractorSpec) -> RegionExtractor:
    """The extractor of ``spec``; a worker process loads the weights once per run, and again when the
    weights file is rewritten."""
    entry = EXTRACTORS[spec.name]
    if not isinstance(entry, NetworkExtractor):
        raise TypeError(f"{spec.name} imports features; it has no network to build")
    if not Path(spec.weights).is_file():
        raise InputError(f"{spec.weights}: not found; extractor {spec.name} needs this weights file")
    return _build_extractor(spec, file_stamp(spec.weights))


@functools.lru_cache(maxsize=2)
def _build_extractor(spec: ExtractorSpec, weights_stamp: tuple[int, int, int]) -> RegionExtractor:
    entry = EXTRACTORS[spec.name]
    assert isinstance(entry, NetworkExtractor)
    return entry.build(spec)


def image_jobs(
    images: pa.Table,
    images_root: Path,
    boxes_path: Path | None,
    *,
    source: str = "images table",
    outside_allowed: bool = False,
) -> list[ImageJob]:
    """One job per prepared image, in table order, with its given boxes when a boxes file is used.

    Args:
        images: The prepared images (id and path relative to ``images_root``).
        images_root: The image folder.
        boxes_path: The given boxes, or None.
        source: Where ``images`` was read from, for error messages.
        outside_allowed: Paths may lead out of ``images_root`` (``prepare.images_outside_root``).

    Raises:
        InputError: a path that leads out of ``images_root``, naming ``source`` and the image.
    """
    given = read_given_boxes(boxes_path) if boxes_path else None
    jobs = []
    for image_id, path in zip(images.column("image_id").to_pylist(), images.column("path").to_pylist(), strict=True):
        where = f"{source}: image {image_id!r}"
        file = inside_root(images_root, path, where, outside_allowed=outside_allowed, setting=OUTSIDE_SETTING)
        jobs.append(ImageJob(image_id, str(file), None if given is None else given.of(image_id)))
    return jobs
