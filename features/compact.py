"""The built-in compact region encoder: the cheap, honest stand-in for bottom-up features on the synthetic data.

Bottom-up attention (Anderson et al. 2018) is a detector trained on Visual Genome objects and attributes whose
per-region features feed the retrieval and translation models. No such checkpoint can be had here and the
R101-C4 network costs ~20 s per image on a CPU, so the built-in dataset gets a miniature of the same recipe:
- regions are the boxes the generator stored (the "given boxes" mode of the real detector);
- each region is seen through a square *glimpse* centred on its box, whose side is a fixed fraction of the
  image (R-CNN-style crops, but at a fixed scale, so a big object fills more of its glimpse than a small one
  and size stays visible in the feature);
- a small CNN maps each glimpse to a D-dim feature and is trained on the train split with an object-class
  head (softmax) and a multi-label attribute head (sigmoid), as the Visual Genome heads are.
Features of val/test images come from a network that never saw them.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch
import torch.nn.functional as F
from torch import nn

from common.checkpoints import (
    FIELDS_SUFFIX,
    LEGACY_SUFFIX,
    TENSORS_KEY,
    CheckpointFiles,
    checkpoint_files,
    read_checkpoint,
    stored_files,
    write_checkpoint,
)
from common.checks import check_not_empty, check_positive, check_range
from common.errors import InputError
from common.files import file_sha256
from common.paths import inside_root
from common.weights import check_fits
from features.boxes import GivenBoxes
from features.images import BadImageError, load_rgb
from features.regions import ImageRegions

logger = logging.getLogger(__name__)

ENCODER_KIND = "compact encoder"


@dataclass(frozen=True)
class CompactConfig:
    glimpse: float = 0.43  # glimpse side as a fraction of the image's longer side (fits the largest object)
    input_size: int = 64  # glimpses are resampled to input_size x input_size pixels
    widths: tuple[int, ...] = (16, 32, 64, 128)  # conv stage widths; every stage after the first halves the size
    dim: int = 256  # region feature size D

    def __post_init__(self) -> None:
        check_range("glimpse", self.glimpse, 0.05, 1.0)
        check_range("input_size", self.input_size, 4, 1024)
        check_not_empty("widths", self.widths, "stage width")
        for index, width in enumerate(self.widths):
            check_range(f"widths[{index}]", width, 1, 4096)
        check_range("dim", self.dim, 8, 8192)


@dataclass(frozen=True)
class CompactTraining:
    epochs: int = 6
    batch_size: int = 64
    lr: float = 2e-3

    def __post_init__(self) -> None:
        check_range("epochs", self.epochs, 1, 1000)
        check_range("batch_size", self.batch_size, 1, 65_536)
        check_positive("lr", self.lr, below=1.0)


@dataclass(frozen=True)
class CompactPreset:
    """The built-in preset (the `features.compact` section of params.yaml): the encoder and its training."""

    encoder: CompactConfig = field(default_factory=CompactConfig)
    training: CompactTraining = field(default_factory=CompactTraining)


class CompactRegionEncoder(nn.Module):
    """Glimpses (B, 3, S, S) in [0, 1] -> region features (B, D), plus object and attribute logits."""

    def __init__(self, config: CompactConfig, objects: Sequence[str], attributes: Sequence[str]) -> None:
        super().__init__()
        self.config, self.objects, self.attributes = config, list(objects), list(attributes)
        layers: list[nn.Module] = []
        channels = 3
        for stage, width in enumerate(config.widths):
            stride = 1 if stage == 0 else 2
            layers += [nn.Conv2d(channels, width, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(width)]
            layers += [nn.ReLU(inplace=True), nn.Conv2d(width, width, 3, padding=1, bias=False)]
            layers += [nn.BatchNorm2d(width), nn.ReLU(inplace=True)]
            channels = width
        self.trunk = nn.Sequential(*layers)
        self.embed = nn.Sequential(nn.Linear(channels, config.dim), nn.ReLU(inplace=True))
        self.object_head = nn.Linear(config.dim, len(self.objects))
        self.attribute_head = nn.Linear(config.dim, len(self.attributes))

    def forward(self, glimpses: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        centred = glimpses - 0.5
        pooled = self.trunk(centred).mean(dim=(2, 3))  # (B, C)
        features = self.embed(pooled)  # (B, D)
        return features, self.object_head(features), self.attribute_head(features)


def glimpses(image: np.ndarray, boxes: np.ndarray, config: CompactConfig) -> torch.Tensor:
    """Cut one square glimpse per box, centred on it, bilinear-resampled to ``input_size``.

    Args:
        image: (H, W, 3) uint8 RGB.
        boxes: (k, 4) x1, y1, x2, y2 in pixels.

    Returns:
        (k, 3, S, S) float32 in [0, 1]; outside the image is grey (0.5), like the generator's backgrounds.
    """
    height, width = image.shape[:2]
    pixels = (
        torch.from_numpy(np.array(image, dtype=np.uint8, copy=True)).permute(2, 0, 1).float().div_(255.0)
    )  # (3, H, W)
    boxes_t = torch.as_tensor(boxes, dtype=torch.float32).reshape(-1, 4)
    side = config.glimpse * max(height, width)
    centre_x = (boxes_t[:, 0] + boxes_t[:, 2]) / 2
    centre_y = (boxes_t[:, 1] + boxes_t[:, 3]) / 2
    theta = torch.zeros(len(boxes_t), 2, 3)
    theta[:, 0, 0] = side / width  # affine_grid works in [-1, 1] image coordinates
    theta[:, 1, 1] = side / height
    theta[:, 0, 2] = centre_x / width * 2 - 1
    theta[:, 1, 2] = centre_y / height * 2 - 1
    size = config.input_size
    grid = F.affine_grid(theta, [len(boxes_t), 3, size, size], align_corners=False)
    batch = (pixels - 0.5).unsqueeze(0).expand(len(boxes_t), -1, -1, -1)
    return F.grid_sample(batch, grid, mode="bilinear", padding_mode="zeros", align_corners=False) + 0.5


@dataclass(frozen=True)
class LabelledGlimpses:
    """Training material: glimpses with the index of their object class and a multi-hot attribute vector."""

    glimpses: torch.Tensor  # (n, 3, S, S) float32
    objects: torch.Tensor  # (n,) int64
    attributes: torch.Tensor  # (n, A) float32


def train_encoder(
    data: LabelledGlimpses,
    config: CompactConfig,
    training: CompactTraining,
    *,
    objects: Sequence[str],
    attributes: Sequence[str],
    seed: int = 0,
    progress: Callable[[int, float], None] | None = None,
) -> CompactRegionEncoder:
    """Train the encoder on labelled glimpses (cross-entropy on objects + binary cross-entropy on attributes).

    Deterministic on CPU for a fixed ``seed``. ``progress(epoch, mean_loss)`` is called per epoch.
    """
    torch.manual_seed(seed)
    model = CompactRegionEncoder(config, objects, attributes)
    optimizer = torch.optim.Adam(model.parameters(), lr=training.lr)
    order_rng = torch.Generator().manual_seed(seed)
    model.train()
    for epoch in range(1, training.epochs + 1):
        started, losses = time.perf_counter(), []
        for batch in torch.randperm(len(data.objects), generator=order_rng).split(training.batch_size):
            _, object_logits, attribute_logits = model(data.glimpses[batch])
            loss = F.cross_entropy(object_logits, data.objects[batch])
            # Summed over attributes: averaged over all of them, a 1-in-8 colour target barely moves the net.
            attribute_loss = F.binary_cross_entropy_with_logits(
                attribute_logits, data.attributes[batch], reduction="sum"
            )
            loss = loss + attribute_loss / len(batch)
            if not math.isfinite(loss.item()):
                raise FloatingPointError(
                    f"compact encoder training diverged at epoch {epoch}: the loss is "
                    f"{loss.item()} (try a lower features.compact.training.lr)"
                )
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        mean_loss = float(np.mean(losses))
        logger.info(
            "compact encoder epoch %d/%d: loss %.4f (%.1f s)",
            epoch,
            training.epochs,
            mean_loss,
            time.perf_counter() - started,
        )
        if progress is not None:
            progress(epoch, mean_loss)
    return model.eval()


def save_encoder(model: CompactRegionEncoder, path: str | Path) -> None:
    """Weights with their config and vocabularies, as a checkpoint (:mod:`common.checkpoints`): ``<stem>.safetensors``
    and ``<stem>.json``, written atomically; the same model gives the same bytes."""
    fields = {"config": asdict(model.config), "objects": model.objects, "attributes": model.attributes}
    write_checkpoint(path, model.state_dict(), fields)


def load_encoder(path: str | Path) -> CompactRegionEncoder:
    """The encoder saved by :func:`save_encoder` (its stem or one of its files).

    Raises:
        InputError: a missing or damaged file, a cache of the earlier pickle format (never unpickled), fields that
            are not an encoder's, or weights that do not fit them (first parameters named) or are not finite.
    """
    checkpoint, files = _read_encoder(path)
    config, objects, attributes = _encoder_fields(files.fields, checkpoint)
    model = CompactRegionEncoder(config, objects, attributes)
    check_fits(files.weights, checkpoint[TENSORS_KEY], model.state_dict(), f"the encoder {files.fields.name} describes")
    model.load_state_dict(checkpoint[TENSORS_KEY])
    return model.eval()


def _read_encoder(path: str | Path) -> tuple[dict[str, Any], CheckpointFiles]:
    files = checkpoint_files(path)
    if files.legacy:
        raise InputError(
            f"{files.weights}: a compact encoder of the earlier pickle format is never read; delete it (the features "
            "stage trains the encoder again into a .safetensors/.json pair)"
        )
    return read_checkpoint(path, device=torch.device("cpu"), kind=ENCODER_KIND)


def _encoder_fields(source: Path, checkpoint: dict[str, Any]) -> tuple[CompactConfig, list[str], list[str]]:
    try:
        stored = dict(checkpoint["config"])
        config = CompactConfig(**{**stored, "widths": tuple(stored["widths"])})
        objects, attributes = [str(name) for name in checkpoint["objects"]], [str(n) for n in checkpoint["attributes"]]
    except (KeyError, TypeError, ValueError) as error:
        raise InputError(f"{source}: not {ENCODER_KIND} fields ({type(error).__name__}: {error})") from None
    return config, objects, attributes


class CompactExtractor:
    """Region features of given boxes with a trained :class:`CompactRegionEncoder`."""

    name = "compact"

    def __init__(self, model: CompactRegionEncoder, *, max_regions: int, device: torch.device) -> None:
        self.model, self.max_regions, self.device = model.to(device).eval(), max_regions, device
        self.dim = model.config.dim

    @torch.inference_mode()
    def extract(
        self, images: Sequence[np.ndarray], given_boxes: Sequence[np.ndarray] | None = None
    ) -> list[ImageRegions]:
        """One :class:`ImageRegions` per image; ``given_boxes[i]`` (k, 4) are its regions (k <= max_regions)."""
        if given_boxes is None:
            raise ValueError("the compact extractor needs given boxes (features.regions.mode: given)")
        cuts = [glimpses(image, boxes, self.model.config) for image, boxes in zip(images, given_boxes, strict=True)]
        counts = [len(cut) for cut in cuts]
        if any(count > self.max_regions for count in counts):
            raise ValueError(f"an image has {max(counts)} boxes, more than max_regions={self.max_regions}")
        features, object_logits, attribute_logits = self.model(torch.cat(cuts).to(self.device))
        object_prob, attribute_prob = object_logits.softmax(-1), attribute_logits.sigmoid()
        results, start = [], 0
        for boxes, count in zip(given_boxes, counts, strict=True):
            part = slice(start, start + count)
            object_conf, object_ids = object_prob[part].max(-1)
            attr_conf, attr_ids = attribute_prob[part].max(-1)
            results.append(
                ImageRegions(
                    features=features[part].float().cpu().numpy(),
                    boxes=np.asarray(boxes, dtype=np.float32).reshape(-1, 4),
                    object_ids=object_ids.cpu().numpy(),
                    object_conf=object_conf.float().cpu().numpy(),
                    attr_ids=attr_ids.cpu().numpy(),
                    attr_conf=attr_conf.float().cpu().numpy(),
                )
            )
            start += count
        return results


def labelled_glimpses(
    examples: Iterable[tuple[np.ndarray, np.ndarray, Sequence[str], Sequence[Sequence[str]]]],
    config: CompactConfig,
    *,
    objects: Sequence[str],
    attributes: Sequence[str],
) -> LabelledGlimpses:
    """Glimpses and targets from (image, boxes (k, 4), object label per box, attribute names per box)."""
    object_index = {name: index for index, name in enumerate(objects)}
    attribute_index = {name: index for index, name in enumerate(attributes)}
    cuts, object_targets, attribute_rows = [], [], []
    for image, boxes, labels, box_attributes in examples:
        cuts.append(glimpses(image, boxes, config))
        object_targets += [object_index[label] for label in labels]
        for names in box_attributes:
            row = torch.zeros(len(attributes))
            row[[attribute_index[name] for name in names]] = 1.0
            attribute_rows.append(row)
    return LabelledGlimpses(
        glimpses=torch.cat(cuts),
        objects=torch.tensor(object_targets, dtype=torch.int64),
        attributes=torch.stack(attribute_rows),
    )


def weights_sha256(path: str | Path) -> str:
    """sha256 of an encoder's config, vocabularies and tensors (what its features depend on, in any file format)."""
    checkpoint, files = _read_encoder(path)
    config, objects, attributes = _encoder_fields(files.fields, checkpoint)
    stored = {**asdict(config), "widths": list(config.widths)}
    digest = hashlib.sha256(json.dumps([stored, objects, attributes]).encode())
    for name, tensor in sorted(checkpoint[TENSORS_KEY].items()):
        digest.update(name.encode())
        digest.update(tensor.contiguous().numpy().tobytes())
    return digest.hexdigest()


def _content_sha256(path: Path) -> str | None:
    """The file's hash; None for a missing file (training skips it, and the extraction pass reports it)."""
    return file_sha256(path) if path.is_file() else None


def builtin_training_set(root: Path) -> tuple[pa.Table, Path, Path]:
    """The compact encoder's training set in the built-in dataset folder ``root``: its train images (listed in
    ``task1/image_splits/train.txt``), the image folder and the labelled boxes (``objects.parquet``).

    Returns:
        (images table with image_id, path and split columns, images root, boxes table path).

    Raises:
        InputError: the folder lacks the list or the boxes.
    """
    listing, boxes = root / "task1" / "image_splits" / "train.txt", root / "objects.parquet"
    for path in (listing, boxes):
        if not path.is_file():
            raise InputError(f"{path}: not found; the compact encoder trains on the built-in dataset in {root}")
    lines = enumerate(listing.read_text(encoding="utf-8").splitlines(), start=1)
    named = [(number, line.strip()) for number, line in lines if line.strip()]
    for number, name in named:
        inside_root(root / "images", name, f"{listing}:{number}")
    names = [name for _, name in named]
    images = pa.table({"image_id": [Path(name).stem for name in names], "path": names, "split": ["train"] * len(names)})
    return images, root / "images", boxes


def encoder_for(
    images: pa.Table, images_root: Path, boxes: GivenBoxes, preset: CompactPreset, *, seed: int, work: Path
) -> Path:
    """The encoder trained on the train split's labelled boxes of ``images``, saved under ``work``.

    The file is named by a fingerprint of everything that determines it (preset, seed, boxes, the train images'
    ids and bytes), so a rerun with the same inputs reuses it and a changed input trains a new one.

    Raises:
        InputError: the boxes carry no ``label``/``attributes`` to train on.
    """
    train = images.filter(pc.equal(images.column("split"), "train"))
    if boxes.labels is None or boxes.attributes is None:
        raise InputError(f"{boxes.source}: the compact encoder trains on `label` and `attributes` columns; none found")
    training = {**asdict(preset.training), "seed": seed}
    pixels = [_content_sha256(images_root / path) for path in train.column("path").to_pylist()]
    key = hashlib.sha256(
        json.dumps(
            [asdict(preset.encoder), training, file_sha256(boxes.source), train.column("image_id").to_pylist(), pixels]
        ).encode()
    ).hexdigest()[:16]
    checkpoint = stored_files(work / "compact" / f"encoder-{key}").weights
    if checkpoint.is_file() and checkpoint.with_suffix(FIELDS_SUFFIX).is_file():
        logger.info("Reusing the compact encoder trained earlier on the same inputs: %s", checkpoint)
        return checkpoint
    if checkpoint.with_suffix(LEGACY_SUFFIX).is_file():  # removed by save_encoder, unread: a pickle can run code
        logger.info("Training the compact encoder again: %s is of the earlier pickle format", checkpoint.stem + ".pt")
    objects = sorted({label for labels in boxes.labels.values() for label in labels})
    attributes = sorted({name for per_box in boxes.attributes.values() for names in per_box for name in names})
    examples = []
    for image_id, path in zip(train.column("image_id").to_pylist(), train.column("path").to_pylist(), strict=True):
        try:
            image = load_rgb(images_root / path)
        except BadImageError as error:  # the extraction pass reports every bad image (or records it)
            logger.warning("Training without %s", error)
            continue
        if image_id in boxes.boxes:
            examples.append((image, boxes.of(image_id), boxes.labels[image_id], boxes.attributes[image_id]))
    data = labelled_glimpses(examples, preset.encoder, objects=objects, attributes=attributes)
    logger.info("Training the compact encoder on %d boxes of %d train images", len(data.objects), train.num_rows)
    model = train_encoder(data, preset.encoder, preset.training, objects=objects, attributes=attributes, seed=seed)
    checkpoint.parent.mkdir(parents=True, exist_ok=True)
    save_encoder(model, checkpoint)
    return checkpoint
