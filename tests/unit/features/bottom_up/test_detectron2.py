"""The detectron2 extractor (butd-detectron2): a clear error without detectron2; with it, parity with the project's
own detector on the same tiny weights written in the detectron2 checkpoint layout."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from common.runtime import Runtime
from features.bottom_up.detectron2_model import (
    Detectron2Missing,
    detectron2_available,
    load_detectron2_detector,
    require_detectron2,
)
from features.bottom_up.extractor import BUTDExtractor, BUTDSettings
from features.bottom_up.weights import CheckpointError, load_detector
from features.config import FeaturesConfig
from features.extractors import EXTRACTORS, ExtractionInputs, ExtractorSpec, NetworkExtractor, build_extractor
from features.regions import AdaptiveRegions, GivenRegions
from tests.unit.features.bottom_up.helpers import TINY, images
from tests.unit.features.bottom_up.test_weights import (
    detectron2_arrays,
    exact_sigmoid_model,
    milvlg_tensors,
    write_pickle,
)

CPU = torch.device("cpu")
NEEDS_DETECTRON2 = pytest.mark.skipif(
    not detectron2_available(),
    reason="detectron2 is not installed: pip install --no-build-isolation 'mmtr[detectron2]' (with torchvision)",
)
# Both paths compute the same float32 convolutions through different kernels (detectron2's Conv2d wrapper and
# torchvision's RoIPool against the project's): equal up to summation order.
FEATURE_RTOL, FEATURE_ATOL = 1e-4, 1e-5


def tiny_pickle(tmp_path: Path) -> Path:
    return write_pickle(tmp_path / "tiny-attr.pkl", detectron2_arrays(exact_sigmoid_model(3)))


@pytest.mark.skipif(detectron2_available(), reason="checks the error raised when detectron2 is absent")
def test_without_detectron2_the_error_names_the_extra_and_the_command(tmp_path: Path) -> None:
    expected = (
        r"^extractor butd-detectron2 needs detectron2 \(the detectron2 extra\): "
        r"pip install --no-build-isolation 'mmtr\[detectron2\]'"
    )
    with pytest.raises(Detectron2Missing, match=expected):
        require_detectron2()
    with pytest.raises(Detectron2Missing, match=expected):
        load_detectron2_detector(tiny_pickle(tmp_path))
    entry = EXTRACTORS["butd-detectron2"]
    assert isinstance(entry, NetworkExtractor)
    config = FeaturesConfig(extractor="butd-detectron2", butd=BUTDSettings(checkpoint="tiny-attr.pkl"))
    inputs = ExtractionInputs(
        images=None,  # type: ignore[arg-type]  # not read before the detectron2 check
        images_root=tmp_path,
        boxes=tmp_path / "boxes.parquet",
        inputs=tmp_path,
        work=tmp_path,
        seed=0,
    )
    with pytest.raises(Detectron2Missing, match=expected):
        entry.weights(config, inputs)


def test_the_project_imports_and_registers_the_extractor_without_detectron2() -> None:
    """The registry row exists whatever is installed; detectron2 is imported only when a model is built."""
    import sys

    assert "butd-detectron2" in EXTRACTORS
    if not detectron2_available():
        assert "detectron2" not in sys.modules


@NEEDS_DETECTRON2
def test_the_detectron2_model_loads_the_public_layout_and_refuses_milvlg(tmp_path: Path) -> None:
    model = load_detectron2_detector(tiny_pickle(tmp_path), test_scale=TINY.test_scale, max_size=TINY.max_size)
    assert model.config.dim == TINY.dim
    milvlg = tmp_path / "tiny.pth"
    torch.save(milvlg_tensors(exact_sigmoid_model(3)), milvlg)
    with pytest.raises(CheckpointError, match=r"a milvlg checkpoint; extractor butd-detectron2 reads the detectron2"):
        load_detectron2_detector(milvlg)


@NEEDS_DETECTRON2
def test_given_boxes_give_the_same_features_labels_and_attributes_on_both_paths(tmp_path: Path) -> None:
    path = tiny_pickle(tmp_path)
    ours = load_detector(path, test_scale=TINY.test_scale, max_size=TINY.max_size)
    theirs = load_detectron2_detector(path, test_scale=TINY.test_scale, max_size=TINY.max_size)
    batch = images(2, seed=5)
    rng = np.random.default_rng(5)
    corners = rng.uniform(0, 60, size=(2, 6, 2))
    boxes = [np.concatenate([c, c + rng.uniform(8, 40, size=(6, 2))], axis=1).astype(np.float32) for c in corners]
    selection = GivenRegions(max_count=6)
    expected = BUTDExtractor(ours, selection, CPU).extract(batch, boxes)
    got = BUTDExtractor(theirs, selection, CPU).extract(batch, boxes)
    for mine, reference in zip(got, expected, strict=True):
        np.testing.assert_array_equal(mine.boxes, reference.boxes)
        np.testing.assert_allclose(mine.features, reference.features, rtol=FEATURE_RTOL, atol=FEATURE_ATOL)
        np.testing.assert_array_equal(mine.object_ids, reference.object_ids)
        assert mine.object_conf is not None and reference.object_conf is not None
        np.testing.assert_allclose(mine.object_conf, reference.object_conf, rtol=1e-4, atol=1e-6)
        assert mine.attr_ids is not None and reference.attr_ids is not None
        np.testing.assert_array_equal(mine.attr_ids, reference.attr_ids)


@NEEDS_DETECTRON2
def test_predicted_regions_match_the_project_detector_on_the_same_boxes(tmp_path: Path) -> None:
    """detectron2's RPN has its own conventions (exact anchors, no "+1", sigmoid objectness; airsplay's port keeps
    them), so its proposals are its own; the regions it selects from them (per-class NMS 0.3, max_conf, 10..100)
    carry the features and labels the project's detector gives those boxes."""
    path = tiny_pickle(tmp_path)
    ours = load_detector(path, test_scale=TINY.test_scale, max_size=TINY.max_size)
    theirs = load_detectron2_detector(path, test_scale=TINY.test_scale, max_size=TINY.max_size)
    batch = images(2, seed=7)
    adaptive = AdaptiveRegions(min_count=2, max_count=8, conf_thresh=0.2)
    got = BUTDExtractor(theirs, adaptive, CPU).extract(batch)
    assert all(2 <= len(regions.boxes) <= 8 for regions in got)
    given = GivenRegions(max_count=8)
    expected = BUTDExtractor(ours, given, CPU).extract(batch, [regions.boxes for regions in got])
    for mine, reference in zip(got, expected, strict=True):
        np.testing.assert_allclose(mine.features, reference.features, rtol=FEATURE_RTOL, atol=FEATURE_ATOL)
        np.testing.assert_array_equal(mine.object_ids, reference.object_ids)


@NEEDS_DETECTRON2
def test_the_registry_builds_the_detectron2_extractor(tmp_path: Path) -> None:
    path = tiny_pickle(tmp_path)
    spec = ExtractorSpec(
        "butd-detectron2",
        str(path),
        AdaptiveRegions(min_count=2, max_count=4, conf_thresh=0.2),
        Runtime(),
        (("max_size", TINY.max_size), ("test_scale", TINY.test_scale)),
    )
    extractor = build_extractor(spec)
    assert (extractor.name, extractor.dim, extractor.max_regions) == ("butd-r101-detectron2", TINY.dim, 4)
    assert len(extractor.extract(images(1))[0].boxes) >= 2
