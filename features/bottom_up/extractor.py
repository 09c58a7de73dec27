"""Region features from images with the bottom-up-attention detector (:mod:`features.bottom_up.model`).

Preprocessing follows the reference's ``_get_image_blob``: RGB -> BGR float32, subtract the BGR pixel mean,
resize so the short side is 600 unless the long side would then exceed 1000 (round(scale * long) > 1000), in
which case the long side becomes 1000. The resize reproduces ``cv2.resize(fx=scale, fy=scale,
INTER_LINEAR)``: output size ``round(side * scale)`` and source coordinates ``(x + 0.5) / scale - 0.5``.
``F.interpolate(size=...)`` would map with ``in / out`` instead, which shifts samples by up to ~0.2 px at
the far edge when ``side * scale`` is not an integer, so the same ATen kernel is called with the explicit
scale.

Batches: every image runs the backbone and RPN alone (padding to a common size would change the features
near the borders, see airsplay/py-bottom-up-attention#3), then the RoIs of all images of the batch go
through res5 (about 90 % of the compute) in one call.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

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
    height, width = image.shape[:2]
    scale = caffe_scale(height, width, config.test_scale, config.max_size)
    size = [round(height * scale), round(width * scale)]  # cv2's cvRound of side * fx
    rgb = torch.from_numpy(np.ascontiguousarray(image)).to(device)
    mean = torch.tensor(config.pixel_mean_bgr, dtype=torch.float32, device=device)
    bgr = rgb.flip(-1).float() - mean  # (H, W, 3)
    blob = bgr.permute(2, 0, 1)[None].contiguous()  # (1, 3, H, W)
    resized = torch.ops.aten.upsample_bilinear2d(blob, size, False, scale, scale)
    return resized, scale


class BUTDExtractor:
    """36 x 2048 (or adaptive, or given-box) region features per image, as ``generate_tsv.py`` writes them.

    Args:
        model: the detector (moved to ``device`` and put in eval mode): the project's own, or the same network
            assembled from detectron2 modules (extractor butd-detectron2).
        selection: how regions are chosen (:mod:`features.regions`).
        device: where to run.
        autocast: returns the precision context for the convolutions (``contextlib.nullcontext`` = fp32).
        name: extractor name recorded with the features.
    """

    def __init__(
        self,
        model: BottomUpAttention | Detectron2BottomUp,
        selection: RegionSelection,
        device: torch.device,
        autocast: AutocastFactory = contextlib.nullcontext,
        name: str = "butd-r101",
    ) -> None:
        self.model = model.to(device).eval()
        self.selection = selection
        self.device = device
        self.autocast = autocast
        self.name = name

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
        with torch.inference_mode():
            rois, scales, pooled = [], [], []
            for image, boxes in zip(images, boxes_per_image, strict=True):
                image_rois, scale, image_pooled = self._pool_regions(image, boxes)
                rois.append(image_rois)
                scales.append(scale)
                pooled.append(image_pooled)
            with self.autocast():
                pool5 = self.model.head(torch.cat(pooled))  # (sum R, D), one res5 call for the batch
            cls_prob, attr_prob = self.model.predict(pool5)
            counts = [len(r) for r in rois]
            cls_probs = list(cls_prob.split(counts))
            selected = self._select(rois, scales, cls_probs, boxes_per_image)
            attr_probs = [None] * len(counts) if attr_prob is None else list(attr_prob.split(counts))
            return [
                self._regions(features, probs, attrs, keep, boxes)
                for features, probs, attrs, (keep, boxes) in zip(
                    pool5.split(counts), cls_probs, attr_probs, selected, strict=True
                )
            ]

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

    def _pool_regions(self, image: np.ndarray, boxes: np.ndarray | None) -> tuple[torch.Tensor, float, torch.Tensor]:
        """Backbone, proposals (or the given boxes) and RoIPool of one image -> (rois, scale, pooled)."""
        blob, scale = preprocess_image(image, self.model.config, self.device)
        with self.autocast():
            feature = self.model.backbone(blob)
            if boxes is None:
                rois = self.model.propose(feature, (blob.shape[2], blob.shape[3]), scale)
            else:  # the reference scales given RoIs in float64 before casting (_project_im_rois)
                rois = torch.from_numpy((boxes.astype(np.float64) * scale).astype(np.float32)).to(self.device)
            return rois, scale, self.model.pool(feature, rois)

    def _select(
        self,
        rois: list[torch.Tensor],
        scales: list[float],
        cls_probs: list[torch.Tensor],
        given: list[np.ndarray | None],
    ) -> list[tuple[torch.Tensor, np.ndarray]]:
        """Per image: (indices of the kept RoIs, their (k, 4) float32 boxes in original-image pixels)."""
        if isinstance(self.selection, GivenRegions):
            everything = [torch.arange(len(r), device=r.device) for r in rois]
            return [(keep, np.array(b, np.float32)) for keep, b in zip(everything, given, strict=True)]
        boxes = [r / s for r, s in zip(rois, scales, strict=True)]  # original pixels, as generate_tsv.py's cls_boxes
        keeps = select_proposals(boxes, cls_probs, self.selection, self.model.config)
        return [(keep, b[keep].cpu().numpy()) for keep, b in zip(keeps, boxes, strict=True)]

    @staticmethod
    def _regions(
        pool5: torch.Tensor,
        cls_prob: torch.Tensor,
        attr_prob: torch.Tensor | None,
        keep: torch.Tensor,
        boxes: np.ndarray,
    ) -> ImageRegions:
        """The kept regions of one image, as numpy arrays."""
        object_conf, object_ids = cls_prob[keep, 1:].max(dim=1)
        attr_conf, attr_ids = (None, None) if attr_prob is None else attr_prob[keep, 1:].max(dim=1)
        return ImageRegions(
            features=pool5[keep].float().cpu().numpy(),
            boxes=boxes.astype(np.float32),
            object_ids=object_ids.cpu().numpy().astype(np.int64),
            object_conf=object_conf.cpu().numpy().astype(np.float32),
            attr_ids=None if attr_ids is None else attr_ids.cpu().numpy().astype(np.int64),
            attr_conf=None if attr_conf is None else attr_conf.cpu().numpy().astype(np.float32),
        )
