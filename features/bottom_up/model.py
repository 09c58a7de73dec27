"""Bottom-up attention (Anderson et al. 2018): the Visual Genome Faster R-CNN ResNet-101 C4 region detector.

A plain-PyTorch port of the Caffe reference (peteanderson80/bottom-up-attention: ``test.prototxt``,
``lib/rpn/proposal_layer.py``, ``tools/generate_tsv.py``):

* Caffe/MSRA ResNet: stride in the 1x1 conv, BatchNorm + Scale folded into a frozen per-channel affine,
  ``pool1`` max 3x3 stride 2 without padding and with ceil rounding; backbone to res4 (stride 16).
* RPN: 3x3 conv to 512, 2-way softmax objectness for 12 anchors (24 channels, the 12 background logits first),
  48 box deltas; proposal layer: decode, clip, drop sides < 16 * scale, top 6000, NMS 0.7, top 300.
* RoIPool 14x14 at 1/16 on res4; res5 with stride 1 and dilation 2 (stays 14x14); mean over 14x14 ->
  ``pool5_flat`` (2048), the region feature.
* ``cls_score`` 1601 (background = 0), ``bbox_pred`` 6404; attribute head: embedding (1601 -> 256) of the
  argmax class (background included), concatenated after pool5, ``fc_attr`` 512 + ReLU, ``attr_score`` 401
  (0 = no attribute), softmax.
* Region selection as ``generate_tsv.py``: features of the RPN RoIs themselves (no box regression), per-class
  NMS 0.3 on the RoIs in original-image pixels, ``max_conf``, then threshold and min/max count.

The model holds no preprocessing and no device logic; :mod:`features.bottom_up.extractor` runs it on images.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pad_sequence

from features.bottom_up import ops
from features.regions import AdaptiveRegions, FixedRegions


@dataclass(frozen=True)
class BUTDConfig:
    """Architecture and test-time settings; defaults are the reference R101 model (test.prototxt, config.py)."""

    blocks: tuple[int, int, int, int] = (3, 4, 23, 3)  # bottleneck blocks in res2, res3, res4, res5 (R101)
    stem_channels: int = 64
    width: int = 64  # bottleneck width of res2; doubles per stage, block outputs are 4x the width
    rpn_channels: int = 512
    anchor_scales: tuple[int, ...] = (4, 8, 16, 32)  # x feat_stride: 64..512 px anchors
    anchor_ratios: tuple[float, ...] = (0.5, 1.0, 2.0)
    feat_stride: int = 16
    num_classes: int = 1600  # Visual Genome objects, plus background at index 0
    num_attributes: int = 400  # Visual Genome attributes, plus "no attribute" at index 0
    attributes: bool = True  # False for checkpoints without the attribute head
    attr_embed_dim: int = 256
    attr_hidden: int = 512
    pixel_mean_bgr: tuple[float, float, float] = (102.9801, 115.9465, 122.7717)
    test_scale: int = 600  # short side after resizing
    max_size: int = 1000  # cap on the long side
    rpn_pre_nms_top_n: int = 6000
    rpn_post_nms_top_n: int = 300
    rpn_nms_thresh: float = 0.7
    rpn_min_size: int = 16  # in pixels of the original image (multiplied by the scale)
    roi_pool_size: int = 14
    class_nms_thresh: float = 0.3

    @property
    def num_anchors(self) -> int:
        return len(self.anchor_scales) * len(self.anchor_ratios)

    @property
    def res4_channels(self) -> int:
        return self.width * 16

    @property
    def dim(self) -> int:
        """Region feature size (res5 output channels): 2048 for R101."""
        return self.width * 32


class FrozenBatchNorm(nn.Module):
    """Caffe BatchNorm (global stats) + Scale as y = x * scale + shift per channel.

    Checkpoint loaders fold mean, variance (with the checkpoint's eps), gamma and beta into these buffers.
    """

    scale: torch.Tensor
    shift: torch.Tensor

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.register_buffer("scale", torch.ones(channels))
        self.register_buffer("shift", torch.zeros(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Buffers follow x's dtype so a bfloat16 activation stays bfloat16 under autocast.
        return x * self.scale.to(x.dtype)[:, None, None] + self.shift.to(x.dtype)[:, None, None]


class ConvNorm(nn.Conv2d):
    """Bias-free convolution followed by its frozen batch norm (keys ``weight``, ``norm.scale``, ``norm.shift``)."""

    def __init__(
        self, in_channels: int, out_channels: int, kernel: int, stride: int = 1, padding: int = 0, dilation: int = 1
    ) -> None:
        super().__init__(in_channels, out_channels, kernel, stride, padding, dilation, bias=False)
        self.norm = FrozenBatchNorm(out_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(super().forward(x))


class Bottleneck(nn.Module):
    """MSRA bottleneck: the stride sits in the first 1x1 conv; the first block of a stage has a projection."""

    def __init__(
        self, in_channels: int, width: int, out_channels: int, *, stride: int, dilation: int, project: bool
    ) -> None:
        super().__init__()
        self.shortcut = ConvNorm(in_channels, out_channels, 1, stride=stride) if project else None
        self.conv1 = ConvNorm(in_channels, width, 1, stride=stride)
        self.conv2 = ConvNorm(width, width, 3, padding=dilation, dilation=dilation)
        self.conv3 = ConvNorm(width, out_channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.conv1(x))
        out = F.relu(self.conv2(out))
        out = self.conv3(out)
        shortcut = x if self.shortcut is None else self.shortcut(x)
        return F.relu(out + shortcut)


def _stage(in_channels: int, width: int, blocks: int, *, stride: int, dilation: int = 1) -> nn.Sequential:
    out_channels = width * 4
    layers = [
        Bottleneck(
            in_channels if i == 0 else out_channels,
            width,
            out_channels,
            stride=stride if i == 0 else 1,
            dilation=dilation,
            project=i == 0,
        )
        for i in range(blocks)
    ]
    return nn.Sequential(*layers)


class Stem(nn.Module):
    """conv1 7x7/2 + BN + ReLU, then Caffe's pool1: max 3x3/2, no padding, ceil rounding."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = ConvNorm(3, channels, 7, stride=2, padding=3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.max_pool2d(F.relu(self.conv1(x)), kernel_size=3, stride=2, padding=0, ceil_mode=True)


class RPNHead(nn.Module):
    """rpn_conv/3x3 + ReLU, rpn_cls_score (2A: A background then A foreground logits), rpn_bbox_pred (4A)."""

    def __init__(self, in_channels: int, channels: int, num_anchors: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, channels, 3, padding=1)
        self.cls_score = nn.Conv2d(channels, 2 * num_anchors, 1)
        self.bbox_pred = nn.Conv2d(channels, 4 * num_anchors, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = F.relu(self.conv(x))
        return self.cls_score(hidden), self.bbox_pred(hidden)


class AttributeHead(nn.Module):
    """Embedding of the argmax class, concatenated after pool5, fc_attr + ReLU, attr_score."""

    def __init__(self, dim: int, num_classes: int, num_attributes: int, embed_dim: int, hidden: int) -> None:
        super().__init__()
        self.cls_embedding = nn.Embedding(num_classes + 1, embed_dim)
        self.fc_attr = nn.Linear(dim + embed_dim, hidden)
        self.attr_score = nn.Linear(hidden, num_attributes + 1)

    def forward(self, pool5: torch.Tensor, cls_logits: torch.Tensor) -> torch.Tensor:
        embedded = self.cls_embedding(cls_logits.argmax(dim=1))  # (R, embed_dim)
        hidden = F.relu(self.fc_attr(torch.cat([pool5, embedded], dim=1)))  # (R, hidden)
        return self.attr_score(hidden)


class Detections(NamedTuple):
    """Per-RoI outputs for one image (before region selection)."""

    rois: torch.Tensor  # (R, 4) float32 boxes in pixels of the resized image
    features: torch.Tensor  # (R, D) pool5_flat
    cls_prob: torch.Tensor  # (R, num_classes + 1) float32, background at 0
    attr_prob: torch.Tensor | None  # (R, num_attributes + 1) float32, "no attribute" at 0


class BottomUpAttention(nn.Module):
    """The reference detector, split into the stages the extractor (and the benchmark) call one by one."""

    anchors: torch.Tensor

    def __init__(self, config: BUTDConfig) -> None:
        super().__init__()
        self.config = config
        c = config
        self.stem = Stem(c.stem_channels)
        self.res2 = _stage(c.stem_channels, c.width, c.blocks[0], stride=1)
        self.res3 = _stage(c.width * 4, c.width * 2, c.blocks[1], stride=2)
        self.res4 = _stage(c.width * 8, c.width * 4, c.blocks[2], stride=2)
        self.rpn = RPNHead(c.res4_channels, c.rpn_channels, c.num_anchors)
        # In the reference, res5 keeps the 14x14 RoI grid: stride 1 and dilated 3x3 convs.
        self.res5 = _stage(c.res4_channels, c.width * 8, c.blocks[3], stride=1, dilation=2)
        self.cls_score = nn.Linear(c.dim, c.num_classes + 1)
        self.bbox_pred = nn.Linear(c.dim, 4 * (c.num_classes + 1))  # kept for checkpoints; regression is unused
        self.attr = (
            AttributeHead(c.dim, c.num_classes, c.num_attributes, c.attr_embed_dim, c.attr_hidden)
            if c.attributes
            else None
        )
        anchors = ops.generate_anchors(c.feat_stride, c.anchor_ratios, c.anchor_scales)
        self.register_buffer("anchors", anchors, persistent=False)

    def backbone(self, images: torch.Tensor) -> torch.Tensor:
        """(N, 3, H, W) mean-subtracted BGR -> res4 (N, 16 * width, ~H/16, ~W/16)."""
        return self.res4(self.res3(self.res2(self.stem(images))))

    def propose(self, feature: torch.Tensor, image_size: tuple[int, int], scale: float) -> torch.Tensor:
        """RPN + Caffe proposal layer for one image: (1, C, h, w) res4 -> (R, 4) RoIs. See :meth:`propose_batch`."""
        rois, _ = self.propose_batch(feature, image_size, scale)
        return rois

    def propose_batch(
        self, feature: torch.Tensor, image_size: tuple[int, int], scale: float, *, convs_per_image: bool = False
    ) -> tuple[torch.Tensor, list[int]]:
        """RPN + Caffe proposal layer for images of one size, all at once.

        Args:
            feature: (B, C, h, w) res4 maps of images resized to the same size.
            image_size: (height, width) of the resized images.
            scale: resize factor from the original images (min size is ``rpn_min_size * scale``).
            convs_per_image: run the RPN's convolutions on one map at a time (see
                :class:`~features.bottom_up.extractor.BUTDExtractor`); the proposal layer runs on all at once.

        Returns:
            (sum R_i, 4) float32 RoIs in resized-image pixels, image after image, each image's by decreasing
            objectness, R_i <= rpn_post_nms_top_n; and the R_i (read from the device once per call).
        """
        c = self.config
        if convs_per_image:
            outputs = [self.rpn(feature[i : i + 1]) for i in range(feature.shape[0])]
            logits, deltas = torch.cat([o[0] for o in outputs]), torch.cat([o[1] for o in outputs])
        else:
            logits, deltas = self.rpn(feature)
        images, _, h, w = logits.shape
        # Caffe reshapes to (1, 2, A*h, w) and takes a softmax over the bg/fg pair of each anchor.
        fg = logits.float().view(images, 2, c.num_anchors, h, w).softmax(dim=1)[:, 1]  # (B, A, h, w)
        scores = fg.permute(0, 2, 3, 1).reshape(images, -1)  # (B, h*w*A), rows ordered (y, x, a)
        deltas = deltas.float().view(images, c.num_anchors, 4, h, w).permute(0, 3, 4, 1, 2).reshape(-1, 4)
        anchors = ops.shifted_anchors(self.anchors, h, w, c.feat_stride).repeat(images, 1)  # (B*h*w*A, 4)
        boxes = ops.clip_boxes(ops.decode_boxes(anchors, deltas), image_size[0], image_size[1])
        boxes = boxes.view(images, -1, 4)  # (B, h*w*A, 4)
        min_size = c.rpn_min_size * scale
        large = ((boxes[..., 2] - boxes[..., 0] + 1) >= min_size) & ((boxes[..., 3] - boxes[..., 1] + 1) >= min_size)
        # Small boxes sort last (scores are >= 0); a stable sort keeps the large ones in the order filtering gives.
        order = torch.argsort(torch.where(large, scores, -1.0), dim=1, descending=True, stable=True)
        order = order[:, : c.rpn_pre_nms_top_n]  # (B, P)
        top_boxes = boxes.gather(1, order[:, :, None].expand(-1, -1, 4))
        keep, counts = ops.batched_greedy_nms(
            top_boxes, scores.gather(1, order), large.gather(1, order), c.rpn_nms_thresh, c.rpn_post_nms_top_n
        )
        kept_boxes = top_boxes.gather(1, keep[:, :, None].expand(-1, -1, 4))  # (B, post, 4)
        real = torch.arange(keep.shape[1], device=keep.device)[None] < counts[:, None]
        return kept_boxes[real], counts.tolist()

    def pool(self, feature: torch.Tensor, rois: torch.Tensor) -> torch.Tensor:
        """RoIPool (1, C, h, w) with (R, 4) resized-image boxes -> (R, C, 14, 14)."""
        return self.pool_batch(feature, rois, [rois.shape[0]])

    def pool_batch(self, feature: torch.Tensor, rois: torch.Tensor, counts: Sequence[int]) -> torch.Tensor:
        """RoIPool of a batch's RoIs in one call: (B, C, h, w) maps, (sum R_i, 4) boxes image after image, with
        ``counts`` R_i -> (sum R_i, C, 14, 14)."""
        owner = torch.repeat_interleave(
            torch.arange(len(counts), device=rois.device), torch.tensor(counts, device=rois.device)
        )
        rois_with_batch = torch.cat([owner[:, None].to(rois.dtype), rois], dim=1)  # (R, 5)
        return ops.roi_pool(feature, rois_with_batch, self.config.roi_pool_size, 1 / self.config.feat_stride)

    def head(self, pooled: torch.Tensor) -> torch.Tensor:
        """res5 on pooled RoIs (R, C, 14, 14) -> pool5_flat (R, D): the region features."""
        return self.res5(pooled).mean(dim=(2, 3))

    def predict(self, pool5: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Class and attribute probabilities (float32) from pool5 (R, D).

        Runs in float32 even under autocast: the heads are cheap and their scores drive region selection.
        """
        with torch.autocast(pool5.device.type, enabled=False):
            x = pool5.float()
            cls_logits = self.cls_score(x)  # (R, num_classes + 1)
            attr_prob = None if self.attr is None else self.attr(x, cls_logits).softmax(dim=1)
            return cls_logits.softmax(dim=1), attr_prob

    def forward(self, image: torch.Tensor, scale: float, rois: torch.Tensor | None = None) -> Detections:
        """One image end to end: (1, 3, H, W) preprocessed blob -> per-RoI outputs.

        Args:
            image: (1, 3, H, W) resized, mean-subtracted BGR.
            scale: the resize factor used to make ``image``.
            rois: (k, 4) boxes in resized-image pixels to use instead of the RPN proposals.
        """
        feature = self.backbone(image)
        if rois is None:
            rois = self.propose(feature, (image.shape[2], image.shape[3]), scale)
        pool5 = self.head(self.pool(feature, rois))
        cls_prob, attr_prob = self.predict(pool5)
        return Detections(rois, pool5, cls_prob, attr_prob)


def select_regions(max_conf: torch.Tensor, selection: FixedRegions | AdaptiveRegions) -> torch.Tensor:
    """generate_tsv.py's choice of RoIs from their ``max_conf`` (R,) -> indices (k,) int64.

    Those with ``max_conf >= conf_thresh`` in RoI order; if fewer than the minimum, the top minimum by
    ``max_conf``; if more than the maximum, the top maximum. Fixed counts are min = max = count. Ties in
    ``max_conf`` go to the lower index (numpy's quicksort in the reference leaves them unspecified).
    """
    keep, counts = select_regions_batch(max_conf[None], torch.tensor([max_conf.shape[0]]), selection)
    return keep[0, : int(counts[0])]


def select_regions_batch(
    max_conf: torch.Tensor, counts: torch.Tensor, selection: FixedRegions | AdaptiveRegions
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`select_regions` of every image of a batch at once, with masks and one sort instead of a loop.

    Args:
        max_conf: (B, R) ``max_conf`` of each image's RoIs, padded past ``counts``.
        counts: (B,) real RoIs per image.

    Returns:
        (B, k_max) int64 indices into each image's RoIs, the first k_i of row i chosen (in
        :func:`select_regions`' order, filler after them), and (B,) k_i.
    """
    if isinstance(selection, FixedRegions):
        low = high = selection.count
    else:
        low, high = selection.min_count, selection.max_count
    count = max_conf.shape[1]
    counts = counts.to(max_conf.device)
    real = torch.arange(count, device=max_conf.device)[None] < counts[:, None]  # (B, R)
    above = (max_conf.double() >= selection.conf_thresh) & real
    above_count = above.sum(dim=1)
    # Those above the threshold in RoI order: False sorts after True, and a stable sort keeps RoI order.
    in_order = torch.argsort((~above).to(torch.uint8), dim=1, stable=True)
    ranked = torch.argsort(torch.where(real, max_conf, -1.0), dim=1, descending=True, stable=True)  # max_conf >= 0
    within = (above_count >= low) & (above_count <= high)
    chosen = torch.where(within[:, None], in_order, ranked)[:, : min(high, count)]
    kept = torch.where(within, above_count, torch.where(above_count < low, low, high).clamp(max=counts))
    return chosen, kept


def select_proposals(
    boxes: torch.Tensor,
    cls_probs: torch.Tensor,
    counts: Sequence[int],
    selection: FixedRegions | AdaptiveRegions,
    config: BUTDConfig,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The kept RoIs of a batch of images: per-class NMS, ``max_conf`` and :func:`select_regions_batch`.

    Args:
        boxes: (sum R_i, 4) RoIs in original-image pixels (the reference's ``cls_boxes``), image after image.
        cls_probs: (sum R_i, num_classes + 1) class probabilities.
        counts: R_i per image.

    Returns:
        (B, k_max) int64 indices into the flat RoIs (filler past each image's k_i) and (B,) k_i. The class NMS of
        all images runs in one lock-step pass.
    """
    device = cls_probs.device
    count_tensor = torch.tensor(list(counts), device=device)
    padded_boxes = pad_sequence(list(boxes.split(list(counts))), batch_first=True)  # (B, max R_i, 4)
    padded_scores = pad_sequence(list(cls_probs[:, 1:].split(list(counts))), batch_first=True)  # (B, max R_i, K)
    max_conf = ops.class_nms_max_conf(padded_boxes, padded_scores, config.class_nms_thresh, count_tensor)
    keep, kept = select_regions_batch(max_conf, count_tensor, selection)
    starts = torch.cumsum(count_tensor, dim=0) - count_tensor  # each image's first row in the flat RoIs
    return (keep + starts[:, None]).clamp(max=max(boxes.shape[0] - 1, 0)), kept
