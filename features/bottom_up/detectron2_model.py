"""The bottom-up-attention detector assembled from detectron2's own modules, as airsplay/py-bottom-up-attention runs it.

The modules and their settings follow that repository's
``configs/VG-Detection/faster_rcnn_R_101_C4_attr_caffemaxpool.yaml`` on ``configs/Base-RCNN-C4.yaml``:

* backbone: detectron2 ``ResNet`` (``BottleneckBlock``, stride in the 1x1 conv, ``FrozenBatchNorm2d``) to res4, with
  the stem of ``MODEL.CAFFE_MAXPOOL: True`` (max pool 3x3/2, pad 0, ceil mode; ``modeling/backbone/resnet.py``);
* RPN: ``StandardRPNHead`` (3x3 conv to ``HID_CHANNELS: 512``, one sigmoid logit per anchor), ``DefaultAnchorGenerator``
  with sizes 64..512 (``ANCHOR_GENERATOR.SIZES``) and ratios 0.5, 1, 2, ``Box2BoxTransform`` weights (1, 1, 1, 1),
  NMS 0.7, pre-NMS top 6000, post-NMS top ``rpn_post_nms_top_n`` (300, as in the repository's demo notebooks);
* ``Res5ROIHeads`` box pooling: ``ROIPooler`` ``ROIPool`` 14x14 at 1/16, then res5 with ``RES5HALVE: False``
  (first block stride 1, every conv2 dilation 2; ``modeling/roi_heads/roi_heads.py``), mean over 14x14;
* box predictor with the attribute head of ``modeling/roi_heads/fast_rcnn.py``: ``cls_score`` (1601, background
  last), ``bbox_pred`` (1600 x 4), ``cls_embedding`` of the argmax class, ``fc_attr`` + ReLU, ``attr_score`` (401).

Its parameter names are those of ``faster_rcnn_from_caffe_attr.pkl``, so that file loads as it is. The wrapper
exposes the stages :class:`features.bottom_up.extractor.BUTDExtractor` calls (``backbone``, ``propose``, ``pool``,
``head``, ``predict``), with class and attribute probabilities turned to the project's order (background and "no
attribute" first), so preprocessing and region selection are the project's Caffe ones (``generate_tsv.py``).

detectron2 is imported only when a model is built: everything else runs without it.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from common.errors import InputError
from features.bottom_up.model import BUTDConfig
from features.bottom_up.weights import CheckpointError, config_from_checkpoint, detect_layout, read_checkpoint

INSTALL_HINT = (
    "pip install --no-build-isolation 'mmtr[detectron2]' "
    "(detectron2 is built from its git source against the installed torch and torchvision)"
)
_ACCEPTED_EXTRAS = ("pixel_mean", "pixel_std")  # GeneralizedRCNN buffers, not parameters of these modules
_CELL_ANCHORS = "proposal_generator.anchor_generator.cell_anchors.0"


class Detectron2Missing(InputError):
    """The detectron2 extractor was chosen but detectron2 is not installed: a user error (one line at the command
    line, never retried as a transient failure)."""


def detectron2_available() -> bool:
    return importlib.util.find_spec("detectron2") is not None


def require_detectron2(extractor: str = "butd-detectron2") -> None:
    """Raise a one-line error naming the extra and the install command when detectron2 is absent."""
    if not detectron2_available():
        raise Detectron2Missing(f"extractor {extractor} needs detectron2 (the detectron2 extra): {INSTALL_HINT}")


class AttributePredictor(nn.Module):
    """airsplay's ``FastRCNNOutputLayers`` with ``use_attr``: classes with background last, attributes of the argmax."""

    def __init__(self, dim: int, num_classes: int, num_attributes: int | None, embed_dim: int, hidden: int) -> None:
        super().__init__()
        self.cls_score = nn.Linear(dim, num_classes + 1)
        self.bbox_pred = nn.Linear(dim, num_classes * 4)  # class-specific, no background row; unused by features
        self.attributes = num_attributes is not None
        if num_attributes is not None:
            self.cls_embedding = nn.Embedding(num_classes + 1, embed_dim)
            self.fc_attr = nn.Linear(dim + embed_dim, hidden)
            self.attr_score = nn.Linear(hidden, num_attributes + 1)

    def forward(self, pool5: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """pool5 (R, D) -> (class logits (R, K + 1), attribute logits (R, A + 1) or None), detectron2 order."""
        scores = self.cls_score(pool5)
        if not self.attributes:
            return scores, None
        embedded = self.cls_embedding(scores.argmax(dim=1))
        return scores, self.attr_score(F.relu(self.fc_attr(torch.cat([pool5, embedded], dim=1))))


def _last_to_first(probabilities: torch.Tensor) -> torch.Tensor:
    """detectron2's background (or "no attribute") column, last, moved to the front as the project keeps it."""
    return torch.cat([probabilities[:, -1:], probabilities[:, :-1]], dim=1)


class Detectron2BottomUp(nn.Module):
    """detectron2's backbone, RPN and Res5ROIHeads behind the stage methods of :class:`BottomUpAttention`."""

    def __init__(self, config: BUTDConfig, backbone: nn.Module, proposal_generator: Any, roi_heads: Any) -> None:
        super().__init__()
        self.config = config
        self.backbone = backbone  # called with the blob, returns {"res4": (1, C, h, w)}
        self.proposal_generator: Any = proposal_generator  # detectron2's RPN
        self.roi_heads: Any = roi_heads  # detectron2's Res5ROIHeads

    def propose(self, feature: Any, image_size: tuple[int, int], scale: float) -> torch.Tensor:
        """detectron2's RPN on one image -> (R, 4) proposals in resized-image pixels, by decreasing objectness.

        ``feature`` is the backbone's output, ``{"res4": (1, C, h, w)}``.
        """
        from detectron2.structures import ImageList

        # The RPN reads only the image sizes of the ImageList; the feature map stands in for the padded batch.
        images = ImageList(feature["res4"], [image_size])
        proposals, _ = self.proposal_generator(images, feature)
        return proposals[0].proposal_boxes.tensor.float()

    def pool(self, feature: Any, rois: torch.Tensor) -> torch.Tensor:
        """The first half of ``Res5ROIHeads._shared_roi_transform``: ROIPool (R, 4) boxes -> (R, C, 14, 14)."""
        from detectron2.structures import Boxes

        return self.roi_heads.pooler([feature["res4"]], [Boxes(rois)])

    def propose_batch(
        self, feature: Any, image_size: tuple[int, int], scale: float, *, convs_per_image: bool = False
    ) -> tuple[torch.Tensor, list[int]]:
        """detectron2's RPN on images of one size -> ((sum R_i, 4) proposals image after image, R_i per image).

        detectron2's RPN runs on the whole batch whatever ``convs_per_image`` says: its proposals are its own anyway.
        """
        from detectron2.structures import ImageList

        maps = feature["res4"]
        proposals, _ = self.proposal_generator(ImageList(maps, [image_size] * maps.shape[0]), feature)
        boxes = [p.proposal_boxes.tensor.float() for p in proposals]
        return torch.cat(boxes), [len(b) for b in boxes]

    def pool_batch(self, feature: Any, rois: torch.Tensor, counts: Sequence[int]) -> torch.Tensor:
        """ROIPool of a batch's (sum R_i, 4) boxes, image after image -> (sum R_i, C, 14, 14)."""
        from detectron2.structures import Boxes

        return self.roi_heads.pooler([feature["res4"]], [Boxes(b) for b in rois.split(list(counts))])

    def head(self, pooled: torch.Tensor) -> torch.Tensor:
        """Its second half, res5, then the mean over 14x14 -> pool5 (R, D)."""
        return self.roi_heads.res5(pooled).mean(dim=(2, 3))

    def predict(self, pool5: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Class and attribute probabilities in float32, background and "no attribute" first."""
        with torch.autocast(pool5.device.type, enabled=False):
            scores, attributes = self.roi_heads.box_predictor(pool5.float())
            attr_prob = None if attributes is None else _last_to_first(attributes.softmax(dim=1))
            return _last_to_first(scores.softmax(dim=1)), attr_prob


class _CaffeMaxPoolStem(nn.Module):
    """``BasicStem`` with ``CAFFE_MAXPOOL``: conv1 7x7/2 + FrozenBN + ReLU, max pool 3x3/2 without padding, ceil."""

    def __init__(self, conv1: nn.Module, channels: int) -> None:
        super().__init__()
        self.conv1 = conv1
        self.out_channels = channels
        self.stride = 4

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.max_pool2d(F.relu(self.conv1(x)), kernel_size=3, stride=2, padding=0, ceil_mode=True)


def build_detectron2_model(config: BUTDConfig) -> Detectron2BottomUp:
    """The detector of ``config`` built from detectron2 modules (random weights)."""
    require_detectron2()
    from detectron2.layers import Conv2d, FrozenBatchNorm2d
    from detectron2.modeling.anchor_generator import DefaultAnchorGenerator
    from detectron2.modeling.backbone.resnet import BottleneckBlock, ResNet
    from detectron2.modeling.box_regression import Box2BoxTransform
    from detectron2.modeling.matcher import Matcher
    from detectron2.modeling.poolers import ROIPooler
    from detectron2.modeling.proposal_generator.rpn import RPN, StandardRPNHead
    from detectron2.modeling.roi_heads import Res5ROIHeads

    c = config

    def stage(in_channels: int, width: int, blocks: int, stride: int, dilation: int = 1) -> list[nn.Module]:
        return ResNet.make_stage(
            BottleneckBlock,
            blocks,
            stride_per_block=[stride] + [1] * (blocks - 1),
            in_channels=in_channels,
            bottleneck_channels=width,
            out_channels=width * 4,
            norm="FrozenBN",
            stride_in_1x1=True,  # MSRA/Caffe ResNet
            dilation=dilation,
        )

    conv1 = Conv2d(3, c.stem_channels, 7, stride=2, padding=3, bias=False, norm=FrozenBatchNorm2d(c.stem_channels))
    stages = [
        stage(c.stem_channels, c.width, c.blocks[0], 1),
        stage(c.width * 4, c.width * 2, c.blocks[1], 2),
        stage(c.width * 8, c.width * 4, c.blocks[2], 2),
    ]
    backbone = ResNet(_CaffeMaxPoolStem(conv1, c.stem_channels), stages, out_features=["res4"], freeze_at=0)
    rpn = RPN(
        in_features=["res4"],
        head=StandardRPNHead(in_channels=c.res4_channels, num_anchors=c.num_anchors, conv_dims=[c.rpn_channels]),
        anchor_generator=DefaultAnchorGenerator(
            sizes=[[scale * c.feat_stride for scale in c.anchor_scales]],
            aspect_ratios=[list(c.anchor_ratios)],
            strides=[c.feat_stride],
            offset=0.0,  # MODEL.ANCHOR_GENERATOR.OFFSET
        ),
        anchor_matcher=Matcher([0.3, 0.7], [0, -1, 1], allow_low_quality_matches=True),
        box2box_transform=Box2BoxTransform(weights=(1.0, 1.0, 1.0, 1.0)),
        batch_size_per_image=256,
        positive_fraction=0.5,
        pre_nms_topk=(c.rpn_pre_nms_top_n, c.rpn_pre_nms_top_n),
        post_nms_topk=(c.rpn_post_nms_top_n, c.rpn_post_nms_top_n),
        nms_thresh=c.rpn_nms_thresh,
    )
    res5 = nn.Sequential(*stage(c.res4_channels, c.width * 8, c.blocks[3], 1, dilation=2))  # RES5HALVE: False
    roi_heads = Res5ROIHeads(
        num_classes=c.num_classes,
        batch_size_per_image=512,
        positive_fraction=0.25,
        proposal_matcher=Matcher([0.5], [0, 1], allow_low_quality_matches=False),
        in_features=["res4"],
        pooler=ROIPooler(
            output_size=c.roi_pool_size, scales=(1 / c.feat_stride,), sampling_ratio=0, pooler_type="ROIPool"
        ),
        res5=res5,
        box_predictor=AttributePredictor(
            c.dim, c.num_classes, c.num_attributes if c.attributes else None, c.attr_embed_dim, c.attr_hidden
        ),
    )
    return Detectron2BottomUp(config, backbone, rpn, roi_heads).eval()


def detectron2_state(
    tensors: dict[str, torch.Tensor], model: Detectron2BottomUp, source: str = "checkpoint"
) -> dict[str, torch.Tensor]:
    """A detectron2-layout checkpoint's tensors, checked against ``model``'s keys and shapes.

    Norms without running statistics get detectron2's FrozenBatchNorm2d defaults (mean 0, variance 1).

    Raises:
        CheckpointError: the MILVLG layout, cell anchors other than the model's, or keys missing, unexpected or
            mis-shaped (each with both shapes).
    """
    layout = detect_layout(tensors, source)
    if layout != "detectron2":
        raise CheckpointError(
            f"{source}: a {layout} checkpoint; extractor butd-detectron2 reads the detectron2 layout of "
            "py-bottom-up-attention (faster_rcnn_from_caffe_attr.pkl); use extractor butd for this file"
        )
    expected = model.state_dict()
    state = {key: value for key, value in tensors.items() if key not in _ACCEPTED_EXTRAS and key != _CELL_ANCHORS}
    for key in expected:
        if key.endswith((".norm.running_mean", ".norm.running_var")) and key not in state:
            ones = key.endswith("running_var")
            state[key] = torch.ones_like(expected[key]) if ones else torch.zeros_like(expected[key])
    _check_cell_anchors(tensors, model, source)
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    misshaped = [
        f"{key}: {tuple(state[key].shape)} in the checkpoint, expected {tuple(expected[key].shape)}"
        for key in sorted(set(expected) & set(state))
        if state[key].shape != expected[key].shape
    ]
    problems = [
        f"{title} ({len(keys)}): {', '.join(keys[:30])}"
        for title, keys in (("missing", missing), ("unexpected", unexpected), ("mis-shaped", misshaped))
        if keys
    ]
    if problems:
        raise CheckpointError(f"{source}: does not fit the detectron2 model: " + "; ".join(problems))
    return {key: state[key].to(expected[key].dtype) for key in expected}


def _check_cell_anchors(tensors: dict[str, torch.Tensor], model: Detectron2BottomUp, source: str) -> None:
    """Cell anchors saved with the weights must be the generator's, in its order, or the RPN rows are misread."""
    saved = tensors.get(_CELL_ANCHORS)
    if saved is None:
        return
    ours = model.proposal_generator.anchor_generator.cell_anchors[0].cpu()
    if saved.shape != ours.shape or not torch.allclose(saved.double(), ours.double(), atol=1e-3):
        raise CheckpointError(f"{source}: {_CELL_ANCHORS} differ from detectron2's anchors for this config")


def load_detectron2_detector(path: str | Path, **overrides: Any) -> Detectron2BottomUp:
    """The detectron2 detector built to the architecture of ``path`` (detectron2 layout), its weights loaded."""
    require_detectron2()
    tensors = read_checkpoint(path)
    model = build_detectron2_model(config_from_checkpoint(tensors, **overrides))
    model.load_state_dict(detectron2_state(tensors, model, str(path)))
    return model
