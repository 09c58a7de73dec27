"""Region features from images with the bottom-up-attention detector (:mod:`features.bottom_up.model`).

Preprocessing follows the reference's ``_get_image_blob``: RGB -> BGR float32, subtract the BGR pixel mean,
resize so the short side is 600 unless the long side would then exceed 1000 (round(scale * long) > 1000), in
which case the long side becomes 1000. The resize reproduces ``cv2.resize(fx=scale, fy=scale,
INTER_LINEAR)``: output size ``round(side * scale)`` and source coordinates ``(x + 0.5) / scale - 0.5``.
``F.interpolate(size=...)`` would map with ``in / out`` instead, which shifts samples by up to ~0.2 px at
the far edge when ``side * scale`` is not an integer, so the same ATen kernel is called with the explicit
scale.

Batches: images of the same size run the preprocessing, backbone, RPN and RoIPool together, one call each (on the
CPU the convolutions run image by image, see :class:`BUTDExtractor`; images of different sizes are never padded to
a common size, which would change the features near the borders, see airsplay/py-bottom-up-attention#3); then the
RoIs of all images of the batch go through res5 (about 90 % of the compute) in one call, and region selection runs
on the whole batch. Only the decoding happens on the host: the uint8 pixels go to the device, where they are
converted, mean-subtracted and resized, a quarter of the bytes of float32 pixels.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch

from common.checks import check_range
from features.bottom_up.detectron2_model import Detectron2BottomUp
from features.bottom_up.model import BottomUpAttention, BUTDConfig, select_proposals
from features.regions import GivenRegions, ImageRegions, RegionSelection, max_regions

AutocastFactory = Callable[[], contextlib.AbstractContextManager[Any]]


@dataclass(frozen=True)
class BUTDSettings:
    """Which detector checkpoint to run and at what image scale (the `features.bottom_up.model` section of params.yaml).

    Attributes:
        checkpoint: File in the feature inputs folder: ``*.pkl`` (py-bottom-up-attention) or ``*.pth``
            (bottom-up-attention.pytorch); needed when the extractor is butd or butd-detectron2 (``.pkl`` only).
        test_scale: Shorter image side after resizing (600 in the reference).
        max_size: Cap of the longer side (1000).
    """

    checkpoint: str | None = None
    test_scale: int = 600
    max_size: int = 1000

    def __post_init__(self) -> None:
        check_range("test_scale", self.test_scale, 32, 10_000)
        check_range("max_size", self.max_size, self.test_scale, 20_000)


def caffe_scale(height: int, width: int, test_scale: int = 600, max_size: int = 1000) -> float:
    """The reference's image scale: short side to ``test_scale`` unless the long side passes ``max_size``."""
    short, long = min(height, width), max(height, width)
    scale = test_scale / short
    if round(scale * long) > max_size:  # np.round and round() both round half to even
        scale = max_size / long
    return scale


def preprocess_image(image: np.ndarray, config: BUTDConfig, device: torch.device) -> tuple[torch.Tensor, float]:
    """(H, W, 3) uint8 RGB -> ((1, 3, h, w) float32 mean-subtracted BGR blob on ``device``, scale)."""
    return preprocess_batch([image], config, device)


def preprocess_batch(
    images: Sequence[np.ndarray], config: BUTDConfig, device: torch.device
) -> tuple[torch.Tensor, float]:
    """Images of one size, (H, W, 3) uint8 RGB each -> ((B, 3, h, w) float32 mean-subtracted BGR blob on
    ``device``, scale): one copy of the uint8 pixels to the device, the rest there."""
    height, width = images[0].shape[:2]
    scale = caffe_scale(height, width, config.test_scale, config.max_size)
    size = [round(height * scale), round(width * scale)]  # cv2's cvRound of side * fx
    rgb = torch.from_numpy(np.stack(images)).to(device)  # (B, H, W, 3) uint8
    mean = torch.tensor(config.pixel_mean_bgr, dtype=torch.float32, device=device)
    bgr = rgb.flip(-1).float() - mean  # (B, H, W, 3)
    blob = bgr.permute(0, 3, 1, 2).contiguous()  # (B, 3, H, W)
    resized = torch.ops.aten.upsample_bilinear2d(blob, size, False, scale, scale)
    return resized, scale


def size_groups(images: Sequence[np.ndarray]) -> list[list[int]]:
    """Indices of the images of each (H, W), sizes in order of first appearance."""
    groups: dict[tuple[int, int], list[int]] = {}
    for index, image in enumerate(images):
        groups.setdefault((image.shape[0], image.shape[1]), []).append(index)
    return list(groups.values())


class _Pooled(NamedTuple):
    """RoIs of a group of same-size images, image after image."""

    rois: torch.Tensor  # (R, 4) in original-image pixels
    counts: list[int]  # RoIs per image
    pooled: torch.Tensor  # (R, C, 14, 14)


class BUTDExtractor:
    """36 x 2048 (or adaptive, or given-box) region features per image, as ``generate_tsv.py`` writes them.

    Args:
        model: the detector (moved to ``device`` and put in eval mode): the project's own, or the same network
            assembled from detectron2 modules (extractor butd-detectron2).
        selection: how regions are chosen (:mod:`features.regions`).
        device: where to run.
        autocast: returns the precision context for the convolutions (``contextlib.nullcontext`` = fp32).
        name: extractor name recorded with the features.
        batch_convolutions: run the backbone and the RPN's convolutions on all same-size images of a batch in one
            call; default: on any device but the CPU. On the CPU a convolution's result depends on the batch it
            runs in (oneDNN picks its blocking by shape) and batching gains nothing, so there they run image by
            image and the features and boxes stay those of one image at a time, bit for bit.
    """

    def __init__(
        self,
        model: BottomUpAttention | Detectron2BottomUp,
        selection: RegionSelection,
        device: torch.device,
        autocast: AutocastFactory = contextlib.nullcontext,
        name: str = "butd-r101",
        batch_convolutions: bool | None = None,
    ) -> None:
        self.model = model.to(device).eval()
        self.selection = selection
        self.device = device
        self.autocast = autocast
        self.name = name
        self.batch_convolutions = device.type != "cpu" if batch_convolutions is None else batch_convolutions

    @property
    def dim(self) -> int:
        return self.model.config.dim

    @property
    def max_regions(self) -> int:
        return max_regions(self.selection)

    def extract(
        self, images: Sequence[np.ndarray], given_boxes: Sequence[np.ndarray] | None = None
    ) -> list[ImageRegions]:
        """Regions of each image.

        Args:
            images: (H, W, 3) uint8 RGB arrays.
            given_boxes: with :class:`GivenRegions` only: per image, (k, 4) float32 x1, y1, x2, y2 boxes in
                original-image pixels (returned unchanged, with their features).

        Returns:
            One :class:`ImageRegions` per image, boxes in original-image pixels, object and attribute ids
            0-based into the vocabularies (background and "no attribute" left out). An image whose RPN
            yields fewer RoIs than the minimum count (a tiny image) gets all of them.
        """
        boxes_per_image = self._check_inputs(images, given_boxes)
        if not images:
            return []
        groups = size_groups(images)
        with torch.inference_mode():
            # one pass per distinct image size; the images of a dataset's batch mostly share one
            parts = [self._pool_regions([images[i] for i in g], [boxes_per_image[i] for i in g]) for g in groups]
            with self.autocast():
                pool5 = self.model.head(torch.cat([part.pooled for part in parts]))  # (sum R, D), one res5 call
            cls_prob, attr_prob = self.model.predict(pool5)
            boxes = torch.cat([part.rois for part in parts])  # (sum R, 4), images in group order
            counts = [count for part in parts for count in part.counts]
            keep, kept = self._select(boxes, counts, cls_prob)
            regions = self._regions(pool5, cls_prob, attr_prob, boxes, keep, kept)
        in_place = dict(zip([index for group in groups for index in group], regions, strict=True))
        if isinstance(self.selection, GivenRegions):  # the given boxes come back as they were given
            given = [b for b in boxes_per_image if b is not None]
            return [dataclasses.replace(in_place[i], boxes=np.array(b, np.float32)) for i, b in enumerate(given)]
        return [in_place[index] for index in range(len(images))]

    def _check_inputs(
        self, images: Sequence[np.ndarray], given_boxes: Sequence[np.ndarray] | None
    ) -> list[np.ndarray | None]:
        for index, image in enumerate(images):
            if not isinstance(image, np.ndarray) or image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
                described = getattr(image, "shape", type(image).__name__), getattr(image, "dtype", None)
                raise ValueError(f"image {index}: expected an (H, W, 3) uint8 RGB array, got {described}")
        if self.selection.mode != "given":
            if given_boxes is not None:
                raise ValueError(f"given_boxes passed, but the region selection is {self.selection.mode!r}")
            return [None] * len(images)
        if given_boxes is None or len(given_boxes) != len(images):
            raise ValueError("GivenRegions needs given_boxes: one (k, 4) array per image")
        checked: list[np.ndarray | None] = []
        for index, boxes in enumerate(given_boxes):
            array = np.asarray(boxes, dtype=np.float32)
            if array.ndim != 2 or array.shape[1] != 4 or len(array) > self.max_regions:
                expected = f"(k, 4) with k <= {self.max_regions}"
                raise ValueError(f"given_boxes[{index}]: expected {expected}, got {array.shape}")
            checked.append(array)
        return checked

    def _pool_regions(self, images: list[np.ndarray], given: list[np.ndarray | None]) -> _Pooled:
        """Preprocessing, backbone, proposals (or the given boxes) and RoIPool of images of one size."""
        blob, scale = preprocess_batch(images, self.model.config, self.device)
        with self.autocast():
            if self.batch_convolutions:
                feature = self.model.backbone(blob)
            else:
                feature = _cat_maps([self.model.backbone(blob[i : i + 1]) for i in range(len(images))])
            if isinstance(self.selection, GivenRegions):
                boxes = [b for b in given if b is not None]
                counts = [len(b) for b in boxes]
                # the reference scales given RoIs in float64 before casting (_project_im_rois)
                scaled = (np.concatenate(boxes).astype(np.float64) * scale).astype(np.float32).reshape(-1, 4)
                rois = torch.from_numpy(scaled).to(self.device)
            else:
                size = (blob.shape[2], blob.shape[3])
                one_by_one = not self.batch_convolutions
                rois, counts = self.model.propose_batch(feature, size, scale, convs_per_image=one_by_one)
            pooled = self.model.pool_batch(feature, rois, counts)
        return _Pooled(rois / scale, counts, pooled)  # original pixels, as generate_tsv.py's cls_boxes

    def _select(self, boxes: torch.Tensor, counts: list[int], cls_prob: torch.Tensor) -> tuple[torch.Tensor, list[int]]:
        """(B, k_max) indices of the kept RoIs into the flat RoIs (filler past each image's count), and the counts."""
        if isinstance(self.selection, GivenRegions):
            starts = np.cumsum([0, *counts[:-1]])
            width = max(counts)
            every = np.minimum(starts[:, None] + np.arange(width)[None], max(sum(counts) - 1, 0))
            return torch.from_numpy(every).to(self.device), counts
        keep, kept = select_proposals(boxes, cls_prob, counts, self.selection, self.model.config)
        return keep, kept.tolist()

    @staticmethod
    def _regions(
        pool5: torch.Tensor,
        cls_prob: torch.Tensor,
        attr_prob: torch.Tensor | None,
        boxes: torch.Tensor,
        keep: torch.Tensor,
        kept: list[int],
    ) -> list[ImageRegions]:
        """The kept regions of each image, as numpy arrays: gathered on the device, copied to the host once."""
        if keep.numel() == 0:  # no image has a region
            keep = keep.new_zeros((len(kept), 0))
            pool5, cls_prob, boxes = pool5[:0], cls_prob[:0], boxes[:0]
            attr_prob = None if attr_prob is None else attr_prob[:0]
        object_conf, object_ids = _gather(cls_prob, keep)[..., 1:].max(dim=-1)  # (B, k_max)
        attrs = None if attr_prob is None else _gather(attr_prob, keep)[..., 1:].max(dim=-1)
        features = _gather(pool5, keep).float().cpu().numpy()
        box_array = _gather(boxes, keep).cpu().numpy().astype(np.float32)
        ids, conf = object_ids.cpu().numpy().astype(np.int64), object_conf.cpu().numpy().astype(np.float32)
        attr_ids = None if attrs is None else attrs.indices.cpu().numpy().astype(np.int64)
        attr_conf = None if attrs is None else attrs.values.cpu().numpy().astype(np.float32)
        return [
            ImageRegions(
                features=features[i, :k],
                boxes=box_array[i, :k],
                object_ids=ids[i, :k],
                object_conf=conf[i, :k],
                attr_ids=None if attr_ids is None else attr_ids[i, :k],
                attr_conf=None if attr_conf is None else attr_conf[i, :k],
            )
            for i, k in enumerate(kept)
        ]


def _cat_maps(maps: list[Any]) -> Any:
    """One image's backbone outputs after another -> the batch's: tensors, or detectron2's dicts of them."""
    if isinstance(maps[0], dict):
        return {key: torch.cat([m[key] for m in maps]) for key in maps[0]}
    return torch.cat(maps)


def _gather(rows: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """rows (N, ...) at a (B, k) index -> (B, k, ...); an empty ``rows`` gives zeros."""
    if rows.shape[0] == 0:
        return rows.new_zeros((*index.shape, *rows.shape[1:]))
    return rows[index]
