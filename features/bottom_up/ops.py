"""Box operations of the Caffe bottom-up-attention detector in plain PyTorch.

Conventions follow py-faster-rcnn as used by the reference (peteanderson80/bottom-up-attention:
``lib/fast_rcnn/bbox_transform.py``, ``lib/rpn/generate_anchors.py``, ``lib/nms/cpu_nms.pyx``, Caffe's
``ROIPoolingLayer``), not detectron2:

* "+1" boxes: x1..x2 are inclusive pixel indices, so a box is ``x2 - x1 + 1`` pixels wide.
* NMS suppresses a lower-scored box when its IoU with a kept box is **>=** the threshold. That is
  ``cpu_nms.pyx``, which the reference runs (its ResNet config sets ``USE_GPU_NMS: False``); MILVLG's
  ``nms_cpu.cpp`` does the same. ``py_cpu_nms.py`` and torchvision keep a box at IoU == threshold; the rules
  differ only on exact ties.
* Box arithmetic is float32 in the reference's operation order, so keep sets match it exactly.

When torchvision's compiled ops import, :func:`nms` and :func:`roi_pool` run on them (a module-level
choice, :data:`USE_TORCHVISION`); :func:`greedy_nms` and :func:`roi_pool_torch` are the pure-PyTorch versions
used otherwise, with the same results (tests compare both against loop implementations and torchvision).
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch


def _import_torchvision_ops() -> Any:
    try:
        return importlib.import_module("torchvision.ops")
    except (ImportError, RuntimeError, OSError):  # a CPU torch with a CUDA torchvision raises RuntimeError
        return None


_tv_ops: Any = _import_torchvision_ops()

USE_TORCHVISION: bool = _tv_ops is not None


def box_areas(boxes: torch.Tensor) -> torch.Tensor:
    """(N, 4) x1, y1, x2, y2 -> (N,) areas in the "+1" convention."""
    return (boxes[:, 2] - boxes[:, 0] + 1) * (boxes[:, 3] - boxes[:, 1] + 1)


def pairwise_iou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """IoU of every box of ``a`` (..., N, 4) with every box of ``b`` (..., M, 4) -> (..., N, M), as cpu_nms.pyx."""
    xx1 = torch.maximum(a[..., :, None, 0], b[..., None, :, 0])
    yy1 = torch.maximum(a[..., :, None, 1], b[..., None, :, 1])
    xx2 = torch.minimum(a[..., :, None, 2], b[..., None, :, 2])
    yy2 = torch.minimum(a[..., :, None, 3], b[..., None, :, 3])
    inter = (xx2 - xx1 + 1).clamp(min=0) * (yy2 - yy1 + 1).clamp(min=0)
    area_a = (a[..., 2] - a[..., 0] + 1) * (a[..., 3] - a[..., 1] + 1)
    area_b = (b[..., 2] - b[..., 0] + 1) * (b[..., 3] - b[..., 1] + 1)
    return inter / (area_a[..., :, None] + area_b[..., None, :] - inter)


def decode_boxes(boxes: torch.Tensor, deltas: torch.Tensor) -> torch.Tensor:
    """Apply (dx, dy, dw, dh) deltas (N, 4) to boxes (N, 4), as py-faster-rcnn's ``bbox_transform_inv``.

    No clamp on dw/dh (the reference has none); the centre is ``x1 + 0.5 * w`` with the "+1" width.
    """
    widths = boxes[:, 2] - boxes[:, 0] + 1.0
    heights = boxes[:, 3] - boxes[:, 1] + 1.0
    ctr_x = boxes[:, 0] + 0.5 * widths
    ctr_y = boxes[:, 1] + 0.5 * heights
    pred_ctr_x = deltas[:, 0] * widths + ctr_x
    pred_ctr_y = deltas[:, 1] * heights + ctr_y
    pred_w = torch.exp(deltas[:, 2]) * widths
    pred_h = torch.exp(deltas[:, 3]) * heights
    half_w, half_h = 0.5 * pred_w, 0.5 * pred_h
    return torch.stack([pred_ctr_x - half_w, pred_ctr_y - half_h, pred_ctr_x + half_w, pred_ctr_y + half_h], dim=1)


def clip_boxes(boxes: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Clip (N, 4) boxes to pixel indices [0, width - 1] x [0, height - 1]."""
    x = boxes[:, 0::2].clamp(min=0, max=width - 1)
    y = boxes[:, 1::2].clamp(min=0, max=height - 1)
    return torch.stack([x[:, 0], y[:, 0], x[:, 1], y[:, 1]], dim=1)


def generate_anchors(
    base_size: int = 16, ratios: Sequence[float] = (0.5, 1.0, 2.0), scales: Sequence[float] = (4, 8, 16, 32)
) -> torch.Tensor:
    """py-faster-rcnn ``generate_anchors``: (len(ratios) * len(scales), 4) float32, ratio-major.

    Widths and heights are rounded half-to-even like ``np.round``; for base 16 and scales (4, 8, 16, 32)
    these are the 12 anchors of the bottom-up-attention proposal layer.
    """
    anchors = []
    size = float(base_size * base_size)
    centre = 0.5 * (base_size - 1)  # the base anchor is [0, 0, base - 1, base - 1]
    for ratio in ratios:
        ratio_w = float(round(math.sqrt(size / ratio)))
        ratio_h = float(round(ratio_w * ratio))
        for scale in scales:
            half_w, half_h = 0.5 * (ratio_w * scale - 1), 0.5 * (ratio_h * scale - 1)
            anchors.append([centre - half_w, centre - half_h, centre + half_w, centre + half_h])
    return torch.tensor(anchors, dtype=torch.float32)


def shifted_anchors(anchors: torch.Tensor, height: int, width: int, stride: int) -> torch.Tensor:
    """Anchors (A, 4) at every cell of a (height, width) map -> (height * width * A, 4), rows ordered (y, x, a)."""
    device = anchors.device
    shift_x = torch.arange(width, device=device, dtype=torch.float32) * stride
    shift_y = torch.arange(height, device=device, dtype=torch.float32) * stride
    grid_y, grid_x = torch.meshgrid(shift_y, shift_x, indexing="ij")
    shifts = torch.stack([grid_x, grid_y, grid_x, grid_y], dim=-1).reshape(-1, 1, 4)  # (h*w, 1, 4)
    return (shifts + anchors[None]).reshape(-1, 4)


def _strictly_below_float32(threshold: float) -> float:
    """The largest float32 below the smallest float32 >= ``threshold``.

    torchvision suppresses at IoU > t; for float32 IoUs, ``iou > this`` is exactly ``iou >= threshold``.
    """
    up = np.float32(threshold)
    if float(up) < threshold:
        up = np.nextafter(up, np.float32(np.inf))
    return float(np.nextafter(up, np.float32(-np.inf)))


def greedy_nms(
    boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float, max_keep: int | None = None
) -> torch.Tensor:
    """Pure-PyTorch greedy NMS: kept indices (K,) int64 in decreasing score order.

    One IoU row per kept box; with ``max_keep`` it stops once that many are kept (the RPN keeps 300 of 6000),
    which gives the same boxes as slicing a full NMS. Equal scores are visited in index order.

    Args:
        boxes: (N, 4) float32 "+1" boxes.
        scores: (N,) scores.
        iou_threshold: a box whose IoU with a kept box is >= this is suppressed.
        max_keep: stop after this many kept boxes (None = all).
    """
    order = torch.argsort(scores, descending=True, stable=True)
    ordered = boxes[order]
    areas = box_areas(ordered)
    count = ordered.shape[0]
    limit = count if max_keep is None else min(max_keep, count)
    suppressed = torch.zeros(count, dtype=torch.bool, device=boxes.device)
    kept: list[int] = []
    current = 0
    while count > 0 and len(kept) < limit:
        kept.append(current)
        box, rest = ordered[current], ordered[current + 1 :]
        inter_w = (torch.minimum(box[2], rest[:, 2]) - torch.maximum(box[0], rest[:, 0]) + 1).clamp(min=0)
        inter_h = (torch.minimum(box[3], rest[:, 3]) - torch.maximum(box[1], rest[:, 1]) + 1).clamp(min=0)
        inter = inter_w * inter_h
        suppressed[current + 1 :] |= inter / (areas[current] + areas[current + 1 :] - inter) >= iou_threshold
        remaining = torch.nonzero(~suppressed[current + 1 :])
        if remaining.numel() == 0:
            break
        current += 1 + int(remaining[0, 0])
    return order[torch.tensor(kept, dtype=torch.long, device=boxes.device)]


def batched_greedy_nms(
    boxes: torch.Tensor, scores: torch.Tensor, valid: torch.Tensor, iou_threshold: float, max_keep: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`greedy_nms` of every image of a batch at once: the same kept boxes, in the same order.

    The greedy passes run in lock-step: step t keeps each image's t-th box and suppresses by its IoU row, computed
    with :func:`greedy_nms`'s arithmetic, so the keep sets are equal bit for bit. Images never suppress one
    another's boxes (the offset trick of ``batched_nms`` would shift coordinates and change float32 IoUs). Whether
    any image still has a box is read every few steps only: each read waits for the device.

    Args:
        boxes: (B, N, 4) float32 "+1" boxes.
        scores: (B, N) scores.
        valid: (B, N) bool; invalid boxes are never kept and suppress nothing.
        iou_threshold: a box whose IoU with a kept box is >= this is suppressed.
        max_keep: the most boxes kept per image.

    Returns:
        (B, max_keep) int64 kept indices into N by decreasing score (filler past each image's count), (B,) counts.
    """
    images, count = scores.shape
    device = scores.device
    order = torch.argsort(torch.where(valid, scores, -math.inf), dim=1, descending=True, stable=True)  # (B, N)
    ordered = boxes.gather(1, order[:, :, None].expand(-1, -1, 4))  # (B, N, 4)
    areas = (ordered[..., 2] - ordered[..., 0] + 1) * (ordered[..., 3] - ordered[..., 1] + 1)  # as box_areas
    suppressed = ~valid.gather(1, order)
    image = torch.arange(images, device=device)
    kept = torch.zeros((images, max_keep), dtype=torch.long, device=device)
    kept_count = torch.zeros(images, dtype=torch.long, device=device)
    current = (~suppressed).int().argmax(dim=1)  # (B,) the first live box (argmax takes the first maximum)
    active = (~suppressed).any(dim=1)
    for step in range(min(max_keep, count)):
        if step % 16 == 15 and not bool(active.any()):
            break
        kept[:, step] = torch.where(active, current, 0)
        kept_count += active
        box, area = ordered[image, current], areas[image, current]  # (B, 4), (B,)
        inter_w = torch.minimum(box[:, None, 2], ordered[..., 2]) - torch.maximum(box[:, None, 0], ordered[..., 0]) + 1
        inter_h = torch.minimum(box[:, None, 3], ordered[..., 3]) - torch.maximum(box[:, None, 1], ordered[..., 1]) + 1
        inter = inter_w.clamp(min=0) * inter_h.clamp(min=0)
        suppressed |= (inter / (area[:, None] + areas - inter) >= iou_threshold) & active[:, None]
        suppressed[image, current] = True
        active = active & (~suppressed).any(dim=1)
        current = (~suppressed).int().argmax(dim=1)
    return order.gather(1, kept), kept_count


def nms(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float, max_keep: int | None = None) -> torch.Tensor:
    """Greedy "+1" NMS (suppress at IoU >= threshold); torchvision's kernel when available. See :func:`greedy_nms`."""
    if _tv_ops is None:
        return greedy_nms(boxes, scores, iou_threshold, max_keep)
    # (x2 + 1, y2 + 1) turns torchvision's areas and intersections into the "+1" ones.
    shifted = torch.cat([boxes[:, :2], boxes[:, 2:] + 1], dim=1)
    keep = _tv_ops.nms(shifted, scores, _strictly_below_float32(iou_threshold))
    return keep if max_keep is None else keep[:max_keep]


def _round_half_away(x: torch.Tensor) -> torch.Tensor:
    """C ``round`` (half away from zero), exact: float64 holds every float32 plus 0.5 without rounding."""
    x64 = x.double()
    return (torch.sign(x64) * torch.floor(x64.abs() + 0.5)).long()


def roi_pool_bins(
    rois: torch.Tensor, height: int, width: int, output_size: int, spatial_scale: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Caffe ROIPooling bin bounds: (hstart, hend, wstart, wend), each (R, output_size) int64, clamped to the map.

    Args:
        rois: (R, 4) float32 boxes in input-image pixels.
    """
    corners = _round_half_away(rois.float() * spatial_scale)  # (R, 4) roi_start_w, start_h, end_w, end_h
    positions = torch.arange(output_size + 1, device=rois.device, dtype=torch.float32)

    def bounds(start: torch.Tensor, end: torch.Tensor, limit: int) -> tuple[torch.Tensor, torch.Tensor]:
        size = (end - start + 1).clamp(min=1).float()
        bin_size = size / float(output_size)  # float32, as Caffe's Dtype arithmetic
        low = torch.floor(positions[None, :-1] * bin_size[:, None]).long() + start[:, None]
        high = torch.ceil(positions[None, 1:] * bin_size[:, None]).long() + start[:, None]
        return low.clamp(0, limit), high.clamp(0, limit)

    hstart, hend = bounds(corners[:, 1], corners[:, 3], height)
    wstart, wend = bounds(corners[:, 0], corners[:, 2], width)
    return hstart, hend, wstart, wend


def roi_pool_torch(
    features: torch.Tensor, rois: torch.Tensor, output_size: int = 14, spatial_scale: float = 1 / 16
) -> torch.Tensor:
    """Pure-PyTorch Caffe RoI max pooling; empty bins give 0.

    The max of an h x w bin is read at its corner from the map of all h x w window maxima. Those maps grow one
    row or column at a time (``max(previous[:-1], map[k:])``), so each bin size in use costs one element-wise
    maximum over the map plus one gather, with no loop over RoIs or bins.

    Args:
        features: (N, C, H, W) feature maps.
        rois: (R, 5) batch index, x1, y1, x2, y2 in input-image pixels.

    Returns:
        (R, C, output_size, output_size) pooled features.
    """
    _, channels, height, width = features.shape
    out = features.new_zeros((rois.shape[0], channels, output_size, output_size))
    if rois.shape[0] == 0:
        return out
    batch = rois[:, 0].long()
    hstart, hend, wstart, wend = roi_pool_bins(rois[:, 1:], height, width, output_size, spatial_scale)
    bin_h = (hend - hstart)[:, :, None].expand(-1, -1, output_size)  # (R, P, P) rows of each bin
    bin_w = (wend - wstart)[:, None, :].expand(-1, output_size, -1)  # (R, P, P) columns of each bin
    nonempty = (bin_h > 0) & (bin_w > 0)
    sizes = torch.unique(bin_h[nonempty] * (width + 1) + bin_w[nonempty]).tolist()
    widest: dict[int, int] = {}  # rows -> the most columns needed with that many rows
    for size in sizes:
        rows, cols = divmod(int(size), width + 1)
        widest[rows] = max(widest.get(rows, 0), cols)
    row_max = features  # (N, C, H - rows + 1, W): max over `rows` consecutive rows
    for rows in range(1, max(widest) + 1):
        if rows > 1:
            row_max = torch.maximum(row_max[:, :, :-1], features[:, :, rows - 1 :])
        window_max = row_max  # (N, C, H - rows + 1, W - cols + 1): max over rows x cols windows
        for cols in range(1, widest.get(rows, 0) + 1):
            if cols > 1:
                window_max = torch.maximum(window_max[..., :-1], row_max[..., cols - 1 :])
            r, ph, pw = torch.nonzero(nonempty & (bin_h == rows) & (bin_w == cols), as_tuple=True)
            if r.numel():
                out[r, :, ph, pw] = window_max[batch[r], :, hstart[r, ph], wstart[r, pw]]
    return out


def roi_pool(
    features: torch.Tensor, rois: torch.Tensor, output_size: int = 14, spatial_scale: float = 1 / 16
) -> torch.Tensor:
    """Caffe RoI max pooling (torchvision's kernel when available). See :func:`roi_pool_torch`."""
    if _tv_ops is None:
        return roi_pool_torch(features, rois, output_size, spatial_scale)
    # torchvision may lack a bfloat16 kernel; max pooling is exact in float32 and back.
    pooled = _tv_ops.roi_pool(features.float(), rois.float(), output_size, spatial_scale)
    return pooled.to(features.dtype)


def class_nms_max_conf(
    boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float, counts: torch.Tensor | None = None
) -> torch.Tensor:
    """The reference's per-class NMS + ``max_conf`` (generate_tsv.py), all classes (and images) at once.

    For every class, greedy NMS over all boxes by that class's score; ``max_conf[i]`` is the highest score of
    box i among the classes where it survives (0 if none). The classes share one IoU matrix, and the greedy
    passes run in lock-step: step t visits each class's t-th best box. Images padded to a common R run in the
    same steps, which matters on a GPU, where the steps cost kernel launches rather than arithmetic.

    Args:
        boxes: (R, 4) or (B, R, 4) float32 "+1" boxes (the reference uses original-image pixels).
        scores: (R, K) or (B, R, K) class probabilities (>= 0) without the background column.
        iou_threshold: suppression at IoU >= this (0.3 in the reference).
        counts: (B,) real boxes per image; rows past them are padding and get max_conf 0.

    Returns:
        (R,) or (B, R) max_conf.
    """
    if boxes.dim() == 2:
        return class_nms_max_conf(boxes[None], scores[None], iou_threshold)[0]
    images, count, classes = scores.shape
    if counts is None:
        counts = torch.full((images,), count, device=scores.device)
    real = torch.arange(count, device=scores.device)[None] < counts.to(scores.device)[:, None]  # (B, R)
    over = (pairwise_iou(boxes, boxes) >= iou_threshold) & real[:, :, None] & real[:, None, :]  # (B, R, R)
    ranked = torch.where(real[:, :, None], scores, -1.0)  # padding ranks last in every class
    order = torch.argsort(ranked, dim=1, descending=True, stable=True)  # (B, R, K) box at rank t of class k
    suppressed = torch.zeros((images, classes, count), dtype=torch.bool, device=scores.device)
    kept = torch.zeros_like(suppressed)
    image = torch.arange(images, device=scores.device)[:, None]
    every_class = torch.arange(classes, device=scores.device)[None, :]
    for rank in range(count):
        box = order[:, rank]  # (B, K)
        alive = ~suppressed[image, every_class, box]
        kept[image, every_class, box] = alive
        suppressed |= alive[:, :, None] & over[image, box]  # (B, K, R)
    survivors = torch.where(kept.transpose(1, 2) & real[:, :, None], scores, 0.0)  # (B, R, K)
    return survivors.amax(dim=2).clamp(min=0) if classes > 0 else scores.new_zeros((images, count))
