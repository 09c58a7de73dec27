"""The bottom-up-attention detector on a tiny random-weight configuration."""

from __future__ import annotations

import contextlib
import dataclasses

import numpy as np
import pytest
import torch

from features.bottom_up.extractor import BUTDExtractor, caffe_scale, preprocess_image
from features.bottom_up.model import BottomUpAttention, select_proposals, select_regions
from features.regions import AdaptiveRegions, FixedRegions, GivenRegions, RegionSelection
from tests.unit.features.bottom_up.helpers import TINY, images, tiny_model

CPU = torch.device("cpu")


def extractor(selection: RegionSelection, model: BottomUpAttention | None = None) -> BUTDExtractor:
    return BUTDExtractor(model or tiny_model(), selection, CPU)


def cv2_linear_resize(image: np.ndarray, out_h: int, out_w: int, scale: float) -> np.ndarray:
    """cv2.resize(fx=fy=scale, INTER_LINEAR) on float data: source = (x + 0.5) / scale - 0.5, edges clamped."""

    def taps(out_size: int, in_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        src = (np.arange(out_size) + 0.5) / scale - 0.5
        low = np.floor(src).astype(int)
        frac = src - low
        frac[low < 0], low[low < 0] = 0.0, 0
        frac[low >= in_size - 1], low[low >= in_size - 1] = 0.0, in_size - 1
        return low, np.minimum(low + 1, in_size - 1), frac

    y0, y1, fy = taps(out_h, image.shape[0])
    x0, x1, fx = taps(out_w, image.shape[1])
    rows = image[y0] * (1 - fy)[:, None, None] + image[y1] * fy[:, None, None]
    return rows[:, x0] * (1 - fx)[None, :, None] + rows[:, x1] * fx[None, :, None]


def test_caffe_scale_rule() -> None:
    assert caffe_scale(480, 640) == 1.25  # 600 x 800
    assert caffe_scale(375, 500) == 1.6
    assert caffe_scale(300, 500) == 2.0  # long side exactly 1000 is allowed
    assert caffe_scale(300, 501) == 1000 / 501  # round(2 * 501) > 1000
    assert caffe_scale(100, 1000) == 1.0


def test_preprocess_is_bgr_minus_the_mean() -> None:
    image = images(1)[0]
    blob, scale = preprocess_image(image, TINY, CPU)  # short side 96 already: no resize
    expected = image[:, :, ::-1].astype(np.float32) - np.array(TINY.pixel_mean_bgr, dtype=np.float32)
    assert scale == 1.0
    np.testing.assert_array_equal(blob[0].permute(1, 2, 0).numpy(), expected)


def test_resize_follows_cv2_rather_than_size_ratios() -> None:
    image = images(1, size=(37, 53))[0]
    config = dataclasses.replace(TINY, test_scale=50, max_size=100)
    blob, scale = preprocess_image(image, config, CPU)
    assert blob.shape == (1, 3, 50, 72)  # round(53 * 50 / 37) = round(71.6)
    bgr = image[:, :, ::-1].astype(np.float64) - np.array(config.pixel_mean_bgr)
    expected = cv2_linear_resize(bgr, 50, 72, scale)
    np.testing.assert_allclose(blob[0].permute(1, 2, 0).numpy(), expected, atol=2e-3)


def test_pool1_rounds_up_and_the_backbone_has_stride_16() -> None:
    model = tiny_model()
    with torch.inference_mode():
        # 100 -> conv1 50 -> pool1 25 (24 with floor rounding) -> res3 13 -> res4 7
        assert model.backbone(torch.zeros(1, 3, 100, 100)).shape == (1, TINY.res4_channels, 7, 7)
        assert model.backbone(torch.zeros(1, 3, 600, 800)).shape[-2:] == (38, 50)


def test_res5_keeps_the_14x14_roi_grid() -> None:
    model = tiny_model()
    with torch.inference_mode():
        out = model.res5(torch.zeros(3, TINY.res4_channels, 14, 14))
    assert out.shape == (3, TINY.dim, 14, 14)


def test_rpn_scores_are_the_second_half_of_the_channels_in_ratio_major_anchor_order() -> None:
    model = tiny_model()
    with torch.no_grad():
        for layer in (model.rpn.cls_score, model.rpn.bbox_pred):
            assert layer.bias is not None
            layer.weight.zero_()
            layer.bias.zero_()
        assert model.rpn.cls_score.bias is not None
        model.rpn.cls_score.bias[TINY.num_anchors + 1] = 10.0  # foreground of anchor 1: ratio 0.5, scale 8
    blob, scale = preprocess_image(images(1)[0], TINY, CPU)
    with torch.inference_mode():
        rois = model.propose(model.backbone(blob), (96, 128), scale)
    # anchor [-84, -40, 99, 55] at the first cell (equal scores keep the first), decoded with zero deltas as
    # bbox_transform_inv does (x2 + 1: "+1" width, no -1 back), then clipped
    assert rois[0].tolist() == [0.0, 0.0, 100.0, 56.0]


def test_fixed_regions_are_the_selected_rpn_rois_and_their_pool5() -> None:
    model = tiny_model()
    image = images(1, seed=3)[0]
    (regions,) = extractor(FixedRegions(count=7), model).extract([image])
    blob, scale = preprocess_image(image, TINY, CPU)
    with torch.inference_mode():
        detections = model(blob, scale)
    boxes = detections.rois / scale
    chosen, kept = select_proposals(boxes, detections.cls_prob, [len(boxes)], FixedRegions(count=7), TINY)
    keep = chosen[0, : int(kept[0])]
    assert regions.features.shape == (7, TINY.dim) and regions.features.dtype == np.float32
    np.testing.assert_array_equal(regions.boxes, boxes[keep].numpy())  # RoIs, not regressed boxes
    np.testing.assert_allclose(regions.features, detections.features[keep].numpy(), rtol=1e-5, atol=1e-6)
    probs = detections.cls_prob[keep, 1:]
    np.testing.assert_array_equal(regions.object_ids, probs.argmax(dim=1).numpy())
    np.testing.assert_array_equal(regions.object_conf, probs.max(dim=1).values.numpy())
    assert regions.attr_ids is not None and regions.attr_conf is not None
    assert regions.attr_ids.max() < TINY.num_attributes and (regions.attr_conf > 0).all()


@pytest.mark.parametrize("size", [(96, 128), (70, 150), (128, 90)])
def test_boxes_stay_inside_the_original_image(size: tuple[int, int]) -> None:
    (regions,) = extractor(FixedRegions(count=10)).extract(images(1, seed=1, size=size))
    height, width = size
    x1, y1, x2, y2 = regions.boxes.T
    assert (x1 >= 0).all() and (y1 >= 0).all() and (x2 <= width).all() and (y2 <= height).all()
    assert (x2 >= x1).all() and (y2 >= y1).all()


@pytest.mark.parametrize(("thresh", "expected"), [(0.0, 8), (1.1, 3), (0.12, None)])
def test_adaptive_regions_stay_between_min_and_max(thresh: float, expected: int | None) -> None:
    selection = AdaptiveRegions(min_count=3, max_count=8, conf_thresh=thresh)
    for regions in extractor(selection).extract(images(3, seed=2)):
        count = regions.features.shape[0]
        assert 3 <= count <= 8
        assert expected is None or count == expected


def test_given_boxes_come_back_unchanged_with_their_features() -> None:
    model = tiny_model()
    image = images(1, size=(80, 120))[0]
    given = np.array([[0.5, 1.25, 60.0, 70.5], [10, 10, 119, 79], [30.2, 5.7, 31.0, 6.1]], dtype=np.float32)
    (regions,) = extractor(GivenRegions(max_count=5), model).extract([image], [given])
    np.testing.assert_array_equal(regions.boxes, given)
    blob, scale = preprocess_image(image, TINY, CPU)
    with torch.inference_mode():
        detections = model(blob, scale, rois=torch.from_numpy(given * np.float32(scale)))
    np.testing.assert_allclose(regions.features, detections.features.numpy(), rtol=1e-5, atol=1e-6)
    assert regions.object_ids is not None and regions.object_ids.shape == (3,)


def test_a_batch_gives_the_features_of_one_image_at_a_time() -> None:
    ex = extractor(FixedRegions(count=6))
    batch = images(1, seed=5) + images(1, seed=6, size=(80, 120)) + images(1, seed=7, size=(128, 90))
    together = ex.extract(batch)
    for image, joint in zip(batch, together, strict=True):
        (alone,) = ex.extract([image])
        np.testing.assert_array_equal(joint.boxes, alone.boxes)
        np.testing.assert_array_equal(joint.object_ids, alone.object_ids)
        np.testing.assert_allclose(joint.features, alone.features, rtol=1e-5, atol=1e-6)


def test_extraction_is_deterministic() -> None:
    batch = images(2, seed=8)
    first = extractor(FixedRegions(count=5)).extract(batch)
    second = extractor(FixedRegions(count=5)).extract(batch)
    for a, b in zip(first, second, strict=True):
        np.testing.assert_array_equal(a.features, b.features)
        np.testing.assert_array_equal(a.boxes, b.boxes)


def test_a_model_without_attribute_head_gives_no_attributes() -> None:
    model = tiny_model(config=dataclasses.replace(TINY, attributes=False))
    (regions,) = extractor(FixedRegions(count=4), model).extract(images(1))
    assert regions.attr_ids is None and regions.attr_conf is None and regions.object_ids is not None


def test_attribute_head_embeds_the_argmax_class_background_included() -> None:
    model = tiny_model()
    pool5 = torch.randn(5, TINY.dim)
    with torch.no_grad():
        model.cls_score.bias[0] = 100.0  # background wins everywhere
        cls_prob, attr_prob = model.predict(pool5)
        embedded = model.attr.cls_embedding.weight[0].expand(5, -1)  # type: ignore[union-attr]
        hidden = torch.relu(model.attr.fc_attr(torch.cat([pool5, embedded], dim=1)))  # type: ignore[union-attr]
        expected = model.attr.attr_score(hidden).softmax(dim=1)  # type: ignore[union-attr]
    assert (cls_prob.argmax(dim=1) == 0).all()
    assert attr_prob is not None
    torch.testing.assert_close(attr_prob, expected)


def test_select_regions_follows_generate_tsv() -> None:
    conf = torch.tensor([0.5, 0.1, 0.9, 0.3, 0.05, 0.3])
    # between min and max: the RoIs over the threshold, in RoI order
    assert select_regions(conf, AdaptiveRegions(min_count=2, max_count=4, conf_thresh=0.2)).tolist() == [0, 2, 3, 5]
    # too few: top min by confidence (ties to the lower index); too many: top max
    assert select_regions(conf, AdaptiveRegions(min_count=3, max_count=4, conf_thresh=0.6)).tolist() == [2, 0, 3]
    assert select_regions(conf, AdaptiveRegions(min_count=1, max_count=2, conf_thresh=0.0)).tolist() == [2, 0]
    assert select_regions(conf, FixedRegions(count=2, conf_thresh=0.2)).tolist() == [2, 0]
    assert select_regions(torch.tensor([0.2, 0.1], dtype=torch.float32), FixedRegions(1)).tolist() == [0]


def test_extract_rejects_bad_inputs() -> None:
    image = images(1)[0]
    with pytest.raises(ValueError, match="image 0"):
        extractor(FixedRegions()).extract([image.astype(np.float32)])
    with pytest.raises(ValueError, match="given_boxes passed"):
        extractor(FixedRegions()).extract([image], [np.zeros((1, 4), np.float32)])
    with pytest.raises(ValueError, match="GivenRegions needs given_boxes"):
        extractor(GivenRegions()).extract([image])
    with pytest.raises(ValueError, match=r"given_boxes\[0\]"):
        extractor(GivenRegions(max_count=2)).extract([image], [np.zeros((3, 4), np.float32)])


def test_extractor_describes_its_output() -> None:
    ex = extractor(AdaptiveRegions(min_count=10, max_count=100))
    assert (ex.name, ex.dim, ex.max_regions) == ("butd-r101", TINY.dim, 100)
    assert ex.extract([]) == []


@pytest.mark.gpu
@pytest.mark.parametrize("precision", [None, torch.bfloat16])
def test_cuda_gives_the_cpu_regions(precision: torch.dtype | None) -> None:
    batch = images(3, seed=12)
    expected = extractor(FixedRegions(count=6)).extract(batch)
    cuda = torch.device("cuda")
    autocast = contextlib.nullcontext if precision is None else lambda: torch.autocast("cuda", dtype=precision)
    # cuDNN convolutions run in TF32 by default on Ampere and later (torch.backends.cudnn.allow_tf32), which moves
    # boxes by about 0.1 px on an H200; the float32 comparison checks the kernels with true float32 arithmetic
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=precision is not None):
        got = BUTDExtractor(tiny_model(), FixedRegions(count=6), cuda, autocast).extract(batch)
    for g, e in zip(got, expected, strict=True):
        assert g.features.shape == e.features.shape and np.isfinite(g.features).all()
        if precision is None:  # bfloat16 may pick other regions; float32 must agree to rounding
            np.testing.assert_allclose(g.boxes, e.boxes, atol=0.01)
            np.testing.assert_allclose(g.features, e.features, rtol=1e-3, atol=1e-4)
