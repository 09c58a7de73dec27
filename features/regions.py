"""What every region extractor returns per image, and how regions are chosen.

Extractors (the bottom-up-attention R101-C4 detector, the compact built-in preset) share this contract so
the sharded extraction, the FeatureStore and the importers never depend on a particular network.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from common.checks import check_fraction, check_range


@dataclass(frozen=True)
class FixedRegions:
    """Exactly ``count`` regions per image (the 36-box features of the papers)."""

    count: int = 36
    conf_thresh: float = 0.2  # regions above it are preferred; the top ``count`` by confidence are kept anyway
    mode: Literal["fixed"] = "fixed"


@dataclass(frozen=True)
class AdaptiveRegions:
    """Between ``min_count`` and ``max_count`` regions: those with confidence >= ``conf_thresh`` (10..100)."""

    min_count: int = 10
    max_count: int = 100
    conf_thresh: float = 0.2
    mode: Literal["adaptive"] = "adaptive"


@dataclass(frozen=True)
class GivenRegions:
    """Features for boxes supplied per image (no proposals, no selection); at most ``max_count`` per image."""

    max_count: int = 36
    mode: Literal["given"] = "given"


RegionSelection = FixedRegions | AdaptiveRegions | GivenRegions


def max_regions(selection: RegionSelection) -> int:
    """K of the FeatureStore: the most regions one image can get under ``selection``."""
    if isinstance(selection, FixedRegions):
        return selection.count
    return selection.max_count


@dataclass(frozen=True)
class RegionConfig:
    """How regions are chosen (the `features.regions` section of params.yaml); see :meth:`selection`.

    Attributes:
        mode: fixed (``count`` per image), adaptive (``min_count``..``max_count`` above ``conf_thresh``) or
            given (features of supplied boxes, at most ``max_count`` per image).
        count: fixed: regions per image (36 in the papers).
        min_count: adaptive: at least this many.
        max_count: adaptive: at most this many (100 in the reference); given: K of the store.
        conf_thresh: fixed/adaptive: the detection confidence a region should reach.
    """

    mode: Literal["fixed", "adaptive", "given"] = "fixed"
    count: int = 36
    min_count: int = 10
    max_count: int = 100
    conf_thresh: float = 0.2

    def __post_init__(self) -> None:
        check_range("count", self.count, 1, 1000)
        check_range("min_count", self.min_count, 1, 1000)
        check_range("max_count", self.max_count, self.min_count if self.mode == "adaptive" else 1, 1000)
        check_fraction("conf_thresh", self.conf_thresh)

    def selection(self) -> RegionSelection:
        if self.mode == "fixed":
            return FixedRegions(count=self.count, conf_thresh=self.conf_thresh)
        if self.mode == "adaptive":
            return AdaptiveRegions(self.min_count, self.max_count, self.conf_thresh)
        return GivenRegions(max_count=self.max_count)

    def imported_count(self) -> int:
        """K of an imported store: imported features come without given boxes, so `given` counts as `fixed`."""
        return self.count if self.mode == "given" else max_regions(self.selection())


@dataclass(frozen=True)
class ImageRegions:
    """The regions of one image.

    Attributes:
        features: (k, D) float32 region features.
        boxes: (k, 4) float32 boxes x1, y1, x2, y2 in pixels of the original image.
        object_ids: (k,) int64 predicted object class (0-based into the object vocabulary), or None.
        object_conf: (k,) float32 confidence of that class, or None.
        attr_ids: (k,) int64 most likely attribute (0-based), or None.
        attr_conf: (k,) float32 its confidence, or None.
    """

    features: np.ndarray
    boxes: np.ndarray
    object_ids: np.ndarray | None = None
    object_conf: np.ndarray | None = None
    attr_ids: np.ndarray | None = None
    attr_conf: np.ndarray | None = None

    def __post_init__(self) -> None:
        count = self.features.shape[0]
        if self.features.ndim != 2 or self.boxes.shape != (count, 4):
            raise ValueError(f"regions: features {self.features.shape} and boxes {self.boxes.shape} disagree")
