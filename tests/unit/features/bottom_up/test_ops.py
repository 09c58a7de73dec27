"""Box ops against straightforward loop implementations (always) and torchvision (when it imports)."""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np
import pytest
import torch

from features.bottom_up import ops

tv_ops: Any
try:
    tv_ops = importlib.import_module("torchvision.ops")
except (ImportError, RuntimeError, OSError):
    tv_ops = None
needs_torchvision = pytest.mark.skipif(tv_ops is None, reason="torchvision's compiled ops do not import here")

# py-faster-rcnn generate_anchors() output for base 16, ratios (0.5, 1, 2), scales (8, 16, 32) (its docstring
# lists the same boxes shifted by +1, from an older 1-based base anchor).
KNOWN_ANCHORS_9 = [
    [-84, -40, 99, 55],
    [-176, -88, 191, 103],
    [-360, -184, 375, 199],
    [-56, -56, 71, 71],
    [-120, -120, 135, 135],
    [-248, -248, 263, 263],
    [-36, -80, 51, 95],
    [-80, -168, 95, 183],
    [-168, -344, 183, 359],
]
# The 12 anchors of the bottom-up-attention proposal layer (scales 4, 8, 16, 32), from numpy_anchors below.
KNOWN_ANCHORS_12 = [
    [-38, -16, 53, 31],
    [-84, -40, 99, 55],
    [-176, -88, 191, 103],
    [-360, -184, 375, 199],
    [-24, -24, 39, 39],
    [-56, -56, 71, 71],
    [-120, -120, 135, 135],
    [-248, -248, 263, 263],
    [-14, -36, 29, 51],
    [-36, -80, 51, 95],
    [-80, -168, 95, 183],
    [-168, -344, 183, 359],
]


def numpy_anchors(scales: tuple[int, ...]) -> np.ndarray:
    """An independent transcription of py-faster-rcnn's _ratio_enum / _scale_enum."""

    def whctrs(a: np.ndarray) -> tuple[float, float, float, float]:
        w, h = a[2] - a[0] + 1, a[3] - a[1] + 1
        return w, h, a[0] + 0.5 * (w - 1), a[1] + 0.5 * (h - 1)

    def mkanchors(ws: np.ndarray, hs: np.ndarray, x: float, y: float) -> np.ndarray:
        ws, hs = ws[:, None], hs[:, None]
        return np.hstack([x - 0.5 * (ws - 1), y - 0.5 * (hs - 1), x + 0.5 * (ws - 1), y + 0.5 * (hs - 1)])

    w, h, x, y = whctrs(np.array([0, 0, 15, 15], dtype=np.float64))
    ws = np.round(np.sqrt(w * h / np.array([0.5, 1, 2])))
    ratio_anchors = mkanchors(ws, np.round(ws * np.array([0.5, 1, 2])), x, y)
    out = []
    for anchor in ratio_anchors:
        w, h, x, y = whctrs(anchor)
        out.append(mkanchors(w * np.array(scales), h * np.array(scales), x, y))
    return np.vstack(out)


def loop_nms(boxes: np.ndarray, scores: np.ndarray, thresh: float) -> list[int]:
    """cpu_nms.pyx, scalar by scalar in float32."""
    boxes = boxes.astype(np.float32)
    areas = (boxes[:, 2] - boxes[:, 0] + np.float32(1)) * (boxes[:, 3] - boxes[:, 1] + np.float32(1))
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    suppressed, keep = [False] * len(scores), []
    for pos, i in enumerate(order):
        if suppressed[i]:
            continue
        keep.append(i)
        for j in order[pos + 1 :]:
            if suppressed[j]:
                continue
            w = max(np.float32(0), min(boxes[i, 2], boxes[j, 2]) - max(boxes[i, 0], boxes[j, 0]) + np.float32(1))
            h = max(np.float32(0), min(boxes[i, 3], boxes[j, 3]) - max(boxes[i, 1], boxes[j, 1]) + np.float32(1))
            inter = np.float32(w * h)
            if inter / (areas[i] + areas[j] - inter) >= thresh:
                suppressed[j] = True
    return keep


def loop_roi_pool(features: np.ndarray, rois: np.ndarray, size: int, scale: float) -> np.ndarray:
    """Caffe ROIPoolingLayer::Forward_cpu, bin by bin."""
    _, channels, height, width = features.shape
    out = np.zeros((len(rois), channels, size, size), dtype=features.dtype)
    f32 = np.float32
    for r, (batch, x1, y1, x2, y2) in enumerate(rois):
        scaled = (f32(v) * f32(scale) for v in (x1, y1, x2, y2))
        start_w, start_h, end_w, end_h = (int(np.copysign(np.floor(abs(x) + 0.5), x)) for x in scaled)  # C round()
        bin_h = f32(max(end_h - start_h + 1, 1)) / f32(size)
        bin_w = f32(max(end_w - start_w + 1, 1)) / f32(size)
        for ph in range(size):
            h0 = min(max(int(np.floor(f32(ph) * bin_h)) + start_h, 0), height)
            h1 = min(max(int(np.ceil(f32(ph + 1) * bin_h)) + start_h, 0), height)
            for pw in range(size):
                w0 = min(max(int(np.floor(f32(pw) * bin_w)) + start_w, 0), width)
                w1 = min(max(int(np.ceil(f32(pw + 1) * bin_w)) + start_w, 0), width)
                if h1 > h0 and w1 > w0:
                    out[r, :, ph, pw] = features[int(batch), :, h0:h1, w0:w1].max(axis=(1, 2))
    return out


def random_boxes(rng: np.random.Generator, count: int, extent: float = 200.0) -> np.ndarray:
    xy = rng.uniform(0, extent, size=(count, 2))
    wh = rng.uniform(1, extent / 2, size=(count, 2))
    return np.hstack([xy, xy + wh]).astype(np.float32)


def test_anchors_equal_py_faster_rcnn_values() -> None:
    anchors = ops.generate_anchors(16, (0.5, 1, 2), (8, 16, 32))
    assert anchors.tolist() == KNOWN_ANCHORS_9


def test_bottom_up_attention_anchors_equal_an_independent_implementation() -> None:
    anchors = ops.generate_anchors()
    assert anchors.tolist() == KNOWN_ANCHORS_12
    np.testing.assert_array_equal(anchors.numpy(), numpy_anchors((4, 8, 16, 32)))


def test_shifted_anchors_are_ordered_by_row_column_anchor() -> None:
    base = ops.generate_anchors()
    shifted = ops.shifted_anchors(base, height=2, width=3, stride=16).view(2, 3, 12, 4)
    assert torch.equal(shifted[1, 2], base + torch.tensor([32.0, 16.0, 32.0, 16.0]))


def test_areas_and_iou_use_the_plus_one_convention() -> None:
    boxes = torch.tensor([[0.0, 0.0, 9.0, 9.0], [5.0, 0.0, 14.0, 9.0]])
    assert ops.box_areas(boxes).tolist() == [100.0, 100.0]
    iou = ops.pairwise_iou(boxes, boxes)
    assert iou[0, 1].item() == pytest.approx(50 / 150)  # 1/3 with "+1", 36/126 = 0.29 without
    assert iou[0, 0].item() == 1.0


def test_nms_hand_cases() -> None:
    boxes = torch.tensor([[0.0, 0, 9, 9], [5, 0, 14, 9], [0, 0, 9, 4], [50, 50, 60, 60]])
    scores = torch.tensor([0.9, 0.8, 0.7, 0.6])
    # IoU(0, 1) = 1/3: suppressed at 0.3 only because of "+1"; IoU(0, 2) = 0.5 exactly: suppressed at 0.5.
    for nms in (ops.greedy_nms, ops.nms):
        assert nms(boxes, scores, 0.3).tolist() == [0, 3]
        assert nms(boxes, scores, 0.5).tolist() == [0, 1, 3]
        assert nms(boxes, scores, 0.51).tolist() == [0, 1, 2, 3]
        assert nms(boxes, torch.tensor([0.1, 0.8, 0.7, 0.6]), 0.3).tolist() == [1, 2, 3]  # IoU(1, 2) = 0.2
        assert nms(boxes, scores, 0.3, max_keep=1).tolist() == [0]
        assert nms(boxes[:0], scores[:0], 0.3).tolist() == []


@pytest.mark.parametrize("seed", range(4))
def test_greedy_nms_matches_the_loop_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    boxes, scores = random_boxes(rng, 300), rng.random(300).astype(np.float32)
    for thresh in (0.3, 0.7):
        expected = loop_nms(boxes, scores, thresh)
        kept = ops.greedy_nms(torch.from_numpy(boxes), torch.from_numpy(scores), thresh).tolist()
        assert kept == expected
        limited = ops.greedy_nms(torch.from_numpy(boxes), torch.from_numpy(scores), thresh, max_keep=20)
        assert limited.tolist() == expected[:20]


@needs_torchvision
@pytest.mark.parametrize("seed", range(4))
def test_greedy_nms_matches_torchvision(seed: int) -> None:
    rng = np.random.default_rng(seed)
    boxes, scores = torch.from_numpy(random_boxes(rng, 2000)), torch.from_numpy(rng.random(2000).astype(np.float32))
    shifted = torch.cat([boxes[:, :2], boxes[:, 2:] + 1], dim=1)
    expected = tv_ops.nms(shifted, scores, 0.7)
    assert torch.equal(ops.greedy_nms(boxes, scores, 0.7), expected)
    assert torch.equal(ops.nms(boxes, scores, 0.7, max_keep=300), expected[:300])


def test_decode_and_clip_follow_bbox_transform_inv() -> None:
    rng = np.random.default_rng(0)
    boxes, deltas = random_boxes(rng, 50), rng.normal(0, 0.5, size=(50, 4)).astype(np.float32)
    w, h = boxes[:, 2] - boxes[:, 0] + 1, boxes[:, 3] - boxes[:, 1] + 1
    cx, cy = boxes[:, 0] + 0.5 * w + deltas[:, 0] * w, boxes[:, 1] + 0.5 * h + deltas[:, 1] * h
    pw, ph = np.exp(deltas[:, 2]) * w, np.exp(deltas[:, 3]) * h
    expected = np.stack([cx - 0.5 * pw, cy - 0.5 * ph, cx + 0.5 * pw, cy + 0.5 * ph], axis=1)
    decoded = ops.decode_boxes(torch.from_numpy(boxes), torch.from_numpy(deltas))
    np.testing.assert_allclose(decoded.numpy(), expected, rtol=1e-6, atol=1e-4)
    clipped = ops.clip_boxes(decoded, height=120, width=150).numpy()
    np.testing.assert_array_equal(clipped[:, 0::2], np.clip(decoded.numpy()[:, 0::2], 0, 149))
    np.testing.assert_array_equal(clipped[:, 1::2], np.clip(decoded.numpy()[:, 1::2], 0, 119))


def roi_case(seed: int, count: int = 40) -> tuple[torch.Tensor, torch.Tensor]:
    """Two maps, RoIs of every size: tiny, larger than the map, partly outside, on .5 rounding boundaries."""
    rng = np.random.default_rng(seed)
    features = torch.from_numpy(rng.normal(size=(2, 5, 9, 13)).astype(np.float32))
    boxes = random_boxes(rng, count, extent=260.0) - 30.0
    boxes[:4] = [[0, 0, 0, 0], [8, 8, 8, 8], [0, 0, 207, 143], [-40, -40, 300, 300]]
    boxes[4] = [24, 40, 56, 88]  # x * 1/16 = 1.5, 2.5, 3.5, 5.5: round half up, not half to even
    batch = rng.integers(0, 2, size=(count, 1)).astype(np.float32)
    return features, torch.from_numpy(np.hstack([batch, boxes]))


@pytest.mark.parametrize(("seed", "size"), [(0, 14), (1, 7), (2, 3)])
def test_roi_pool_matches_the_loop_reference_exactly(seed: int, size: int) -> None:
    features, rois = roi_case(seed)
    expected = loop_roi_pool(features.numpy(), rois.numpy(), size, 1 / 16)
    pooled = ops.roi_pool_torch(features, rois, size, 1 / 16)
    assert (pooled.numpy() == expected).all()
    assert (expected == 0).any()  # some bins are empty


@needs_torchvision
@pytest.mark.parametrize("seed", range(3))
def test_roi_pool_matches_torchvision_exactly(seed: int) -> None:
    features, rois = roi_case(seed, count=100)
    expected = tv_ops.roi_pool(features, rois, 14, 1 / 16)
    assert torch.equal(ops.roi_pool_torch(features, rois, 14, 1 / 16), expected)


def test_roi_pool_keeps_the_dtype_and_handles_no_rois() -> None:
    features, rois = roi_case(0)
    assert ops.roi_pool(features.bfloat16(), rois, 14, 1 / 16).dtype == torch.bfloat16
    assert ops.roi_pool(features, rois[:0], 14, 1 / 16).shape == (0, 5, 14, 14)


def loop_max_conf(boxes: np.ndarray, scores: np.ndarray, thresh: float) -> np.ndarray:
    """generate_tsv.py: one NMS per class, max_conf over the classes where a box survives."""
    max_conf = np.zeros(len(boxes))
    for cls in range(scores.shape[1]):
        keep = np.array(loop_nms(boxes, scores[:, cls], thresh))
        max_conf[keep] = np.where(scores[keep, cls] > max_conf[keep], scores[keep, cls], max_conf[keep])
    return max_conf


@pytest.mark.parametrize("seed", range(3))
def test_class_nms_max_conf_matches_a_loop_over_classes(seed: int) -> None:
    rng = np.random.default_rng(seed)
    boxes = random_boxes(rng, 60, extent=100.0)
    logits = rng.normal(0, 2, size=(60, 12))
    scores = (np.exp(logits) / np.exp(logits).sum(1, keepdims=True)).astype(np.float32)
    max_conf = ops.class_nms_max_conf(torch.from_numpy(boxes), torch.from_numpy(scores), 0.3)
    expected = loop_max_conf(boxes, scores, 0.3)
    np.testing.assert_array_equal(max_conf.numpy(), expected.astype(np.float32))
    assert (expected < scores.max(axis=1)).any()  # suppression mattered for some boxes


def test_class_nms_max_conf_of_padded_images_equals_one_image_at_a_time() -> None:
    rng = np.random.default_rng(5)
    sizes, padded = (40, 25), 40
    boxes = torch.zeros(2, padded, 4)
    scores = torch.full((2, padded, 6), 0.9)  # padding must neither rank nor suppress
    alone = []
    for i, count in enumerate(sizes):
        image_boxes = torch.from_numpy(random_boxes(rng, count, extent=80.0))
        image_scores = torch.from_numpy(rng.dirichlet(np.ones(6), size=count).astype(np.float32))
        boxes[i, :count], scores[i, :count] = image_boxes, image_scores
        alone.append(ops.class_nms_max_conf(image_boxes, image_scores, 0.3))
    together = ops.class_nms_max_conf(boxes, scores, 0.3, counts=torch.tensor(sizes))
    assert torch.equal(together[0], alone[0])
    assert torch.equal(together[1, :25], alone[1]) and (together[1, 25:] == 0).all()
