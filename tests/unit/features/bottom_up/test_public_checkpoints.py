"""The public checkpoints as their releases' code describes them, against the conversion (features.bottom_up.weights).

The files themselves are served from hosts this test cannot reach, so every fact is taken from the code that wrote
or reads them, at these commits (each table entry names its file):

* the Caffe reference both files were converted from: peteanderson80/bottom-up-attention @ 514e561;
* ``faster_rcnn_from_caffe_attr.pkl``: airsplay/py-bottom-up-attention @ 85ec9b7 (a detectron2 fork);
* ``bua-caffe-frcn-r101_with_attributes.pth`` (caffe mode): MILVLG/bottom-up-attention.pytorch @ 4dbce86, on its
  detectron2 submodule facebookresearch/detectron2 @ be792b9.

From the tables a checkpoint is written in each layout (exact key names, random values, a tiny backbone but the real
class and attribute counts); the conversion must map every key, move rows and anchors as the release orders them,
and refuse a missing or mis-shaped key with a one-line error naming the key and the shapes.
"""

from __future__ import annotations

import math
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from features.bottom_up import ops
from features.bottom_up.model import BottomUpAttention, BUTDConfig
from features.bottom_up.weights import (
    ATTRIBUTE_VOCAB_SIZE,
    DETECTRON2_BOX_WEIGHTS,
    OBJECT_VOCAB_SIZE,
    CheckpointError,
    Layout,
    config_from_checkpoint,
    convert_checkpoint,
    detect_layout,
    load_detector,
    read_checkpoint,
)
from tests.unit.features.bottom_up.helpers import resnet_c4_shapes

# --- the Caffe reference: peteanderson80/bottom-up-attention @ 514e561 ---------------------------------------------
CAFFE: dict[str, Any] = {
    "pixel_mean_bgr": (102.9801, 115.9465, 122.7717),  # lib/fast_rcnn/config.py: __C.PIXEL_MEANS
    "test_scale": 600,  # lib/fast_rcnn/config.py: __C.TEST.SCALES = (600,)
    "max_size": 1000,  # lib/fast_rcnn/config.py: __C.TEST.MAX_SIZE
    "class_nms_thresh": 0.3,  # lib/fast_rcnn/config.py: __C.TEST.NMS
    # models/vg/ResNet-101/faster_rcnn_end2end_final/test.prototxt, the proposal layer's param_str
    "feat_stride": 16,
    "anchor_scales": (4, 8, 16, 32),
    "anchor_ratios": (0.5, 1.0, 2.0),  # lib/rpn/generate_anchors.py: generate_anchors(ratios=[0.5, 1, 2])
    "rpn_channels": 512,  # test.prototxt: rpn_conv/3x3 num_output
    "rpn_cls_score": 24,  # test.prototxt: "2(bg/fg) * 12(anchors)", reshaped (0, 2, -1, 0): 12 background first
    "rpn_bbox_pred": 48,  # test.prototxt: "4 * 12(anchors)"
    "cls_score": 1601,  # test.prototxt: cls_score num_output (background = 0: generate_tsv.py reads scores[:, 1:])
    "bbox_pred": 6404,  # test.prototxt: bbox_pred num_output, 4 per class, background included
    "cls_embedding": (1601, 256),  # test.prototxt: cls_embedding input_dim, num_output
    "fc_attr": 512,  # test.prototxt: fc_attr num_output; its input concat_pool5 = [pool5_flat, cls_embedding_flat]
    "attr_score": 401,  # test.prototxt: attr_score num_output ("no attribute" = 0)
}
# lib/rpn/generate_anchors.py: np.vstack([_scale_enum(ratio_anchors[i, :], scales) for i in ...]): for each ratio,
# every scale. tools/generate_tsv.py: MIN_BOXES = 10, MAX_BOXES = 100, conf_thresh=0.2.
CAFFE_ANCHOR_ORDER = "ratio-major"

# --- faster_rcnn_from_caffe_attr.pkl: airsplay/py-bottom-up-attention @ 85ec9b7 ------------------------------------
AIRSPLAY: dict[str, Any] = {
    # configs/VG-Detection/faster_rcnn_R_101_C4_attr_caffemaxpool.yaml
    "pixel_mean_bgr": (102.9801, 115.9465, 122.7717),  # MODEL.PIXEL_MEAN
    "anchor_sizes": (64, 128, 256, 512),  # MODEL.ANCHOR_GENERATOR.SIZES
    "rpn_channels": 512,  # MODEL.PROPOSAL_GENERATOR.HID_CHANNELS
    "num_classes": 1600,  # MODEL.ROI_HEADS.NUM_CLASSES
    "num_attributes": 400,  # MODEL.ROI_BOX_HEAD.NUM_ATTRS
    # detectron2/config/defaults.py
    "anchor_ratios": (0.5, 1.0, 2.0),  # MODEL.ANCHOR_GENERATOR.ASPECT_RATIOS
    "pixel_std": (1.0, 1.0, 1.0),  # MODEL.PIXEL_STD
    "input_format": "BGR",  # INPUT.FORMAT
    "box_reg_weights": (10.0, 10.0, 5.0, 5.0),  # MODEL.ROI_BOX_HEAD.BBOX_REG_WEIGHTS
    "class_agnostic_boxes": False,  # MODEL.ROI_BOX_HEAD.CLS_AGNOSTIC_BBOX_REG
    "norm_eps": 1e-5,  # detectron2/layers/batch_norm.py: FrozenBatchNorm2d(eps=1e-5)
}
# detectron2/modeling/anchor_generator.py, generate_cell_anchors: "for size in sizes: ... for aspect_ratio in ...".
AIRSPLAY_ANCHOR_ORDER = "size-major"
# demo/demo_feature_extraction_attr.ipynb: softmax(pred_class_logits, -1)[:, :-1] and pred_attr_logits[..., :-1]:
# background and "no attribute" are the last rows.
AIRSPLAY_BACKGROUND_ROW = -1
AIRSPLAY_NO_ATTRIBUTE_ROW = -1
# detectron2/layers/batch_norm.py: FrozenBatchNorm2d registers these buffers (no num_batches_tracked).
AIRSPLAY_NORM_KEYS = ("weight", "bias", "running_mean", "running_var")


def airsplay_heads(dim: int, anchors: int) -> dict[str, tuple[int, ...]]:
    """Head shapes for pool5 width ``dim``.

    detectron2/modeling/proposal_generator/rpn.py (StandardRPNHead): conv, objectness_logits (one per anchor),
    anchor_deltas (4 per anchor); detectron2/modeling/roi_heads/fast_rcnn.py (FastRCNNOutputLayers, use_attr):
    cls_score K + 1, bbox_pred K * 4, cls_embedding (K + 1, dim // 8), fc_attr (dim // 4, dim + dim // 8),
    attr_score (NUM_ATTRS + 1, dim // 4).
    """
    k, attributes = AIRSPLAY["num_classes"], AIRSPLAY["num_attributes"]
    rpn, box = "proposal_generator.rpn_head.", "roi_heads.box_predictor."
    return {
        rpn + "conv.weight": (AIRSPLAY["rpn_channels"], dim // 2, 3, 3),
        rpn + "conv.bias": (AIRSPLAY["rpn_channels"],),
        rpn + "objectness_logits.weight": (anchors, AIRSPLAY["rpn_channels"], 1, 1),
        rpn + "objectness_logits.bias": (anchors,),
        rpn + "anchor_deltas.weight": (4 * anchors, AIRSPLAY["rpn_channels"], 1, 1),
        rpn + "anchor_deltas.bias": (4 * anchors,),
        box + "cls_score.weight": (k + 1, dim),
        box + "cls_score.bias": (k + 1,),
        box + "bbox_pred.weight": (4 * k, dim),
        box + "bbox_pred.bias": (4 * k,),
        box + "cls_embedding.weight": (k + 1, dim // 8),
        box + "fc_attr.weight": (dim // 4, dim + dim // 8),
        box + "fc_attr.bias": (dim // 4,),
        box + "attr_score.weight": (attributes + 1, dim // 4),
        box + "attr_score.bias": (attributes + 1,),
    }


# --- bua-caffe-frcn-r101_with_attributes.pth: MILVLG/bottom-up-attention.pytorch @ 4dbce86 ---------------------------
MILVLG: dict[str, Any] = {
    # configs/caffe/test-caffe-r101.yaml
    "pixel_mean_bgr": (102.9801, 115.9465, 122.7717),  # MODEL.PIXEL_MEAN
    "anchor_sizes": (4, 8, 16, 32),  # MODEL.ANCHOR_GENERATOR.SIZES: Caffe's scales, not pixels
    "num_classes": 1601,  # MODEL.ROI_HEADS.NUM_CLASSES: background included
    "num_attributes": 401,  # MODEL.BUA.ATTRIBUTE.NUM_CLASSES: "no attribute" included
    "rpn_channels": 512,  # MODEL.BUA.RPN.CONV_OUT_CHANNELS
    "test_scale": 600,  # INPUT.MIN_SIZE_TEST
    "max_size": 1000,  # INPUT.MAX_SIZE_TEST
    "class_nms_thresh": 0.3,  # MODEL.ROI_HEADS.NMS_THRESH_TEST
    "norm": "BN",  # MODEL.RESNETS.NORM: detectron2's BatchNorm2d, nn.BatchNorm2d's eps 1e-5
    "norm_eps": 1e-5,
    "norm_eps_r152": 2e-5,  # bua/caffe/modeling/backbone.py: BatchNorm2d(..., eps=2e-5) in the pre-activation R152
}
# utils/extract_utils.py: scores[keep_boxes][:, 1:] and attr_scores[keep_boxes][:, 1:]: background and "no
# attribute" are row 0, as in Caffe. bua/caffe/modeling/rpn_outputs.py: softmax over score.view(N, 2, A, H, W),
# foreground [:, 1:]: A background channels, then A foreground ones.
MILVLG_BACKGROUND_ROW = 0
MILVLG_NO_ATTRIBUTE_ROW = 0
# nn.BatchNorm2d's state (bua/caffe/modeling/backbone.py builds norms with get_norm("BN")).
MILVLG_NORM_KEYS = ("weight", "bias", "running_mean", "running_var", "num_batches_tracked")
# The RPN channels: the weights were copied from the caffemodel (README), which keeps Caffe's order. Note that the
# release's runtime builds its anchors with detectron2 be792b9's DefaultAnchorGenerator (size-major, sizes taken as
# pixels: 4..32); no released code states that the file's channels were reordered for it, so Caffe's order is kept.
MILVLG_ANCHOR_ORDER = "ratio-major"


def milvlg_heads(dim: int, anchors: int) -> dict[str, tuple[int, ...]]:
    """Head shapes for pool5 width ``dim``.

    bua/caffe/modeling/rpn.py (StandardBUARPNHead): objectness_logits 2 per anchor, anchor_deltas 4 per anchor;
    bua/caffe/modeling/fast_rcnn.py (BUACaffeFastRCNNOutputLayers): cls_score NUM_CLASSES, bbox_pred NUM_CLASSES * 4,
    cls_embed (NUM_CLASSES, 256), attr_linear1 (512, dim + 256), attr_linear2 (401, 512).
    """
    k, a, channels = MILVLG["num_classes"], MILVLG["num_attributes"], MILVLG["rpn_channels"]
    rpn, box = "proposal_generator.rpn_head.", "roi_heads.box_predictor."
    return {
        rpn + "conv.weight": (channels, dim // 2, 3, 3),
        rpn + "conv.bias": (channels,),
        rpn + "objectness_logits.weight": (2 * anchors, channels, 1, 1),
        rpn + "objectness_logits.bias": (2 * anchors,),
        rpn + "anchor_deltas.weight": (4 * anchors, channels, 1, 1),
        rpn + "anchor_deltas.bias": (4 * anchors,),
        box + "cls_score.weight": (k, dim),
        box + "cls_score.bias": (k,),
        box + "bbox_pred.weight": (4 * k, dim),
        box + "bbox_pred.bias": (4 * k,),
        box + "cls_embed.weight": (k, 256),
        box + "attr_linear1.weight": (512, dim + 256),
        box + "attr_linear1.bias": (512,),
        box + "attr_linear2.weight": (a, 512),
        box + "attr_linear2.bias": (a,),
    }


# Both name the backbone after detectron2's ResNet (detectron2/modeling/backbone/resnet.py; MILVLG's
# bua/caffe/modeling/backbone.py keeps the names): backbone.stem.conv1, backbone.res{2,3,4}.{i}.{shortcut (first
# block), conv1, conv2, conv3}, each a Conv2d without bias with a .norm; res5 sits in the ROI heads (Res5ROIHeads,
# roi_heads.res5.{i}...). Stride in the 1x1 conv (RESNETS.STRIDE_IN_1X1 True), so shapes do not depend on it.
TINY_BLOCKS, TINY_WIDTH, TINY_STEM = (1, 2, 1, 1), 8, 8  # R101 is (3, 4, 23, 3), 64, 64


def backbone_shapes(norm_keys: tuple[str, ...]) -> dict[str, tuple[int, ...]]:
    return resnet_c4_shapes(norm_keys, TINY_BLOCKS, TINY_WIDTH, TINY_STEM)


DIM = TINY_WIDTH * 32  # pool5 width: res5 output channels
ANCHORS = len(CAFFE["anchor_scales"]) * len(CAFFE["anchor_ratios"])


def layout_shapes(layout: Layout) -> dict[str, tuple[int, ...]]:
    if layout == "detectron2":
        return backbone_shapes(AIRSPLAY_NORM_KEYS) | airsplay_heads(DIM, ANCHORS)
    return backbone_shapes(MILVLG_NORM_KEYS) | milvlg_heads(DIM, ANCHORS)


def random_checkpoint(layout: Layout, seed: int = 0) -> dict[str, np.ndarray]:
    """Random float32 values of the layout's shapes; variances positive, the batch counter an integer."""
    rng = np.random.default_rng(seed)
    arrays: dict[str, np.ndarray] = {}
    for key, shape in layout_shapes(layout).items():
        if key.endswith("num_batches_tracked"):
            arrays[key] = np.array(0, dtype=np.int64)
        elif key.endswith("running_var"):
            arrays[key] = rng.uniform(0.5, 2.0, shape).astype(np.float32)
        else:
            arrays[key] = rng.normal(0.0, 0.1, shape).astype(np.float32)
    return arrays


def write_layout(layout: Layout, directory: Path, arrays: dict[str, np.ndarray]) -> Path:
    """The file each release distributes: a latin-1 pickle {"model", "__author__"} or a torch state dict."""
    if layout == "detectron2":  # read by airsplay's detectron2/checkpoint/detection_checkpoint.py
        path = directory / "faster_rcnn_from_caffe_attr.pkl"
        with open(path, "wb") as handle:
            pickle.dump({"model": arrays, "__author__": "test"}, handle, protocol=2)
        return path
    path = directory / "bua-caffe-frcn-r101_with_attributes.pth"
    torch.save({"model": {key: torch.from_numpy(value) for key, value in arrays.items()}}, path)
    return path


def release_anchor(layout: Layout, channel: int) -> tuple[float, float]:
    """(height / width, size relative to the smallest) of the anchor the release pairs with RPN channel ``channel``."""
    ratios = AIRSPLAY["anchor_ratios"] if layout == "detectron2" else CAFFE["anchor_ratios"]
    sizes = AIRSPLAY["anchor_sizes"] if layout == "detectron2" else CAFFE["anchor_scales"]
    order = AIRSPLAY_ANCHOR_ORDER if layout == "detectron2" else MILVLG_ANCHOR_ORDER
    if order == "size-major":
        size, ratio = divmod(channel, len(ratios))
    else:
        ratio, size = divmod(channel, len(sizes))
    return float(ratios[ratio]), float(sizes[size]) / float(sizes[0])


def our_anchor(index: int, config: BUTDConfig) -> tuple[float, float]:
    """The same two numbers for the model's anchor ``index``, measured on the boxes it generates."""
    anchors = ops.generate_anchors(config.feat_stride, config.anchor_ratios, config.anchor_scales).double()
    widths, heights = anchors[:, 2] - anchors[:, 0] + 1, anchors[:, 3] - anchors[:, 1] + 1
    ratios = (heights / widths).tolist()
    sizes = torch.sqrt(widths * heights).tolist()
    nearest = min(config.anchor_ratios, key=lambda r: abs(math.log(r / ratios[index])))
    smallest = config.feat_stride * config.anchor_scales[0]  # Caffe rounds sides: sizes are a few percent off
    return float(nearest), float(2 ** round(math.log2(sizes[index] / smallest)))


LAYOUTS: tuple[Layout, ...] = ("detectron2", "milvlg")


def test_the_model_defaults_are_the_reference_facts() -> None:
    config = BUTDConfig()
    assert config.pixel_mean_bgr == CAFFE["pixel_mean_bgr"] == AIRSPLAY["pixel_mean_bgr"] == MILVLG["pixel_mean_bgr"]
    assert (config.test_scale, config.max_size) == (CAFFE["test_scale"], CAFFE["max_size"])
    assert (MILVLG["test_scale"], MILVLG["max_size"], MILVLG["class_nms_thresh"]) == (600, 1000, 0.3)
    assert config.class_nms_thresh == CAFFE["class_nms_thresh"]
    assert (config.feat_stride, config.anchor_scales) == (CAFFE["feat_stride"], CAFFE["anchor_scales"])
    assert config.anchor_ratios == CAFFE["anchor_ratios"] == AIRSPLAY["anchor_ratios"]
    assert tuple(config.feat_stride * s for s in config.anchor_scales) == AIRSPLAY["anchor_sizes"]
    assert MILVLG["anchor_sizes"] == CAFFE["anchor_scales"]
    assert 2 * config.num_anchors == CAFFE["rpn_cls_score"] and 4 * config.num_anchors == CAFFE["rpn_bbox_pred"]
    assert config.rpn_channels == CAFFE["rpn_channels"] == AIRSPLAY["rpn_channels"] == MILVLG["rpn_channels"]
    assert config.num_classes == OBJECT_VOCAB_SIZE == AIRSPLAY["num_classes"] == CAFFE["cls_score"] - 1
    assert config.num_attributes == ATTRIBUTE_VOCAB_SIZE == AIRSPLAY["num_attributes"] == CAFFE["attr_score"] - 1
    assert MILVLG["num_classes"] == CAFFE["cls_score"] and MILVLG["num_attributes"] == CAFFE["attr_score"]
    assert (config.num_classes + 1, config.attr_embed_dim) == CAFFE["cls_embedding"]
    assert config.attr_hidden == CAFFE["fc_attr"] and 4 * (config.num_classes + 1) == CAFFE["bbox_pred"]
    assert AIRSPLAY["box_reg_weights"] == DETECTRON2_BOX_WEIGHTS and not AIRSPLAY["class_agnostic_boxes"]
    assert AIRSPLAY["pixel_std"] == (1.0, 1.0, 1.0) and AIRSPLAY["input_format"] == "BGR"


def test_the_r101_heads_of_the_tables_are_the_caffe_ones() -> None:
    """At pool5 width 2048 airsplay's dim // 8 and dim // 4 are MILVLG's 256 and 512, and Caffe's."""
    box = "roi_heads.box_predictor."
    airsplay, milvlg = airsplay_heads(2048, 12), milvlg_heads(2048, 12)
    assert airsplay[box + "cls_embedding.weight"] == milvlg[box + "cls_embed.weight"] == CAFFE["cls_embedding"]
    assert airsplay[box + "fc_attr.weight"] == milvlg[box + "attr_linear1.weight"] == (512, 2048 + 256)
    assert airsplay[box + "attr_score.weight"][0] == milvlg[box + "attr_linear2.weight"][0] == CAFFE["attr_score"]
    assert airsplay[box + "bbox_pred.weight"][0] == CAFFE["bbox_pred"] - 4  # no background row
    assert milvlg[box + "bbox_pred.weight"][0] == CAFFE["bbox_pred"]
    rpn = "proposal_generator.rpn_head."
    assert airsplay[rpn + "objectness_logits.weight"][0] * 2 == milvlg[rpn + "objectness_logits.weight"][0] == 24
    assert airsplay[rpn + "conv.weight"][1] == 1024  # res4 channels


def test_the_model_generates_anchors_in_caffe_order() -> None:
    """Our anchor i is Caffe's anchor i: ratio-major, every scale of a ratio in a row."""
    config = BUTDConfig()
    for index in range(config.num_anchors):
        ratio, scale = divmod(index, len(config.anchor_scales))
        expected = (config.anchor_ratios[ratio], config.anchor_scales[scale] / config.anchor_scales[0])
        assert our_anchor(index, config) == expected
    assert CAFFE_ANCHOR_ORDER == "ratio-major"


@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_key_of_each_public_layout_is_mapped(tmp_path: Path, layout: Layout) -> None:
    arrays = random_checkpoint(layout)
    path = write_layout(layout, tmp_path, arrays)
    tensors = read_checkpoint(path)
    assert set(tensors) == set(arrays) and detect_layout(tensors) == layout
    config = config_from_checkpoint(tensors)
    assert (config.blocks, config.width, config.stem_channels) == (TINY_BLOCKS, TINY_WIDTH, TINY_STEM)
    assert (config.num_classes, config.num_attributes) == (OBJECT_VOCAB_SIZE, ATTRIBUTE_VOCAB_SIZE)
    model = load_detector(path)  # raises on any missing, unexpected or mis-shaped key
    assert {key for key in model.state_dict()} == set(convert_checkpoint(tensors, model, layout))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_rows_and_anchors_move_as_each_release_orders_them(tmp_path: Path, layout: Layout) -> None:
    arrays = random_checkpoint(layout, seed=1)
    model = load_detector(write_layout(layout, tmp_path, arrays)).requires_grad_(False)
    box, rpn = "roi_heads.box_predictor.", "proposal_generator.rpn_head."
    background = AIRSPLAY_BACKGROUND_ROW if layout == "detectron2" else MILVLG_BACKGROUND_ROW
    no_attribute = AIRSPLAY_NO_ATTRIBUTE_ROW if layout == "detectron2" else MILVLG_NO_ATTRIBUTE_ROW
    embedding, attr_score = ("cls_embedding", "attr_score") if layout == "detectron2" else ("cls_embed", "attr_linear2")
    assert model.attr is not None
    np.testing.assert_array_equal(model.cls_score.weight[0].numpy(), arrays[box + "cls_score.weight"][background])
    np.testing.assert_array_equal(
        model.attr.cls_embedding.weight[0].numpy(), arrays[f"{box}{embedding}.weight"][background]
    )
    np.testing.assert_array_equal(
        model.attr.attr_score.weight[0].numpy(), arrays[f"{box}{attr_score}.weight"][no_attribute]
    )
    first_class = 0 if layout == "detectron2" else 1  # "tree" (objects_vocab.txt line 1)
    np.testing.assert_array_equal(model.cls_score.weight[1].numpy(), arrays[box + "cls_score.weight"][first_class])

    objectness, deltas = arrays[rpn + "objectness_logits.weight"], arrays[rpn + "anchor_deltas.weight"]
    ours_objectness, ours_deltas = (
        model.rpn.cls_score.weight.detach().numpy(),
        model.rpn.bbox_pred.weight.detach().numpy(),
    )
    for index in range(ANCHORS):
        channel = next(c for c in range(ANCHORS) if release_anchor(layout, c) == our_anchor(index, model.config))
        if layout == "detectron2":  # one sigmoid logit: foreground, with a zero background logit
            np.testing.assert_array_equal(ours_objectness[ANCHORS + index], objectness[channel])
            assert not ours_objectness[index].any()
        else:
            np.testing.assert_array_equal(ours_objectness[ANCHORS + index], objectness[ANCHORS + channel])
            np.testing.assert_array_equal(ours_objectness[index], objectness[channel])
        np.testing.assert_array_equal(ours_deltas[4 * index : 4 * index + 4], deltas[4 * channel : 4 * channel + 4])


@pytest.mark.parametrize("layout", LAYOUTS)
def test_norms_fold_with_the_release_eps(tmp_path: Path, layout: Layout) -> None:
    arrays = random_checkpoint(layout, seed=2)
    model = load_detector(write_layout(layout, tmp_path, arrays))
    eps = AIRSPLAY["norm_eps"] if layout == "detectron2" else MILVLG["norm_eps"]
    prefix = "backbone.res3.1.conv2.norm."
    weight, bias = arrays[prefix + "weight"].astype(np.float64), arrays[prefix + "bias"].astype(np.float64)
    mean, var = arrays[prefix + "running_mean"].astype(np.float64), arrays[prefix + "running_var"].astype(np.float64)
    scale = weight / np.sqrt(var + eps)
    state = model.state_dict()
    np.testing.assert_allclose(state["res3.1.conv2.norm.scale"].numpy(), scale, rtol=1e-6)
    np.testing.assert_allclose(state["res3.1.conv2.norm.shift"].numpy(), bias - mean * scale, rtol=1e-5, atol=1e-7)


MISSING = {
    "detectron2": (
        "backbone.stem.conv1.norm.weight",
        "backbone.res4.0.shortcut.weight",
        "proposal_generator.rpn_head.objectness_logits.bias",
        "roi_heads.res5.0.conv2.weight",
        "roi_heads.box_predictor.bbox_pred.weight",
        "roi_heads.box_predictor.fc_attr.bias",
    ),
    "milvlg": (
        "backbone.stem.conv1.norm.running_var",
        "backbone.res2.0.conv3.weight",
        "proposal_generator.rpn_head.anchor_deltas.weight",
        "roi_heads.res5.0.shortcut.norm.running_mean",
        "roi_heads.box_predictor.cls_embed.weight",
        "roi_heads.box_predictor.attr_linear2.bias",
    ),
}


def tiny_public_model(layout: Layout) -> BottomUpAttention:
    return BottomUpAttention(config_from_checkpoint(read_checkpoint_tensors(layout)))


def read_checkpoint_tensors(layout: Layout) -> dict[str, torch.Tensor]:
    return {key: torch.from_numpy(np.array(value)) for key, value in random_checkpoint(layout).items()}


@pytest.mark.parametrize(("layout", "key"), [(layout, key) for layout in LAYOUTS for key in MISSING[layout]])
def test_a_missing_key_is_refused_on_one_line_naming_it_and_its_shape(layout: Layout, key: str) -> None:
    tensors = read_checkpoint_tensors(layout)
    shape = tuple(tensors.pop(key).shape)
    with pytest.raises(CheckpointError) as raised:
        convert_checkpoint(tensors, tiny_public_model(layout), layout, source="public.ckpt")
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(f"public.ckpt: does not fit the model ({layout} layout): missing (1): {key} {shape}")


@pytest.mark.parametrize(
    ("layout", "key", "wrong"),
    [
        ("detectron2", "roi_heads.box_predictor.cls_score.weight", (1600, DIM)),  # background forgotten
        ("detectron2", "roi_heads.box_predictor.bbox_pred.weight", (4, DIM)),  # class-agnostic regression
        ("detectron2", "proposal_generator.rpn_head.anchor_deltas.weight", (60, 512, 1, 1)),  # 15 anchors
        ("milvlg", "roi_heads.box_predictor.bbox_pred.weight", (6400, DIM)),  # detectron2's count
        ("milvlg", "roi_heads.box_predictor.attr_linear2.weight", (400, 512)),  # "no attribute" forgotten
        ("milvlg", "backbone.res3.0.conv1.norm.running_mean", (TINY_WIDTH,)),
    ],
)
def test_a_misshaped_key_is_refused_naming_it_and_both_shapes(layout: Layout, key: str, wrong: tuple[int, ...]) -> None:
    tensors = read_checkpoint_tensors(layout)
    model = tiny_public_model(layout)
    expected = tuple(tensors[key].shape)
    tensors[key] = torch.zeros(wrong)
    with pytest.raises(CheckpointError) as raised:
        convert_checkpoint(tensors, model, layout, source="public.ckpt")
    message = str(raised.value)
    assert "\n" not in message
    assert f"{key}: {wrong} in the checkpoint, expected {expected}" in message
