"""The two public checkpoint layouts, written from a tiny model and loaded back; the restricted unpickler."""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from common.files import file_sha256
from features.bottom_up.extractor import BUTDExtractor
from features.bottom_up.model import BottomUpAttention, BUTDConfig
from features.bottom_up.weights import (
    CheckpointError,
    config_from_checkpoint,
    convert_checkpoint,
    detect_layout,
    load_checkpoint,
    load_detector,
    load_vocabulary,
    read_checkpoint,
)
from features.regions import FixedRegions
from tests.unit.features.bottom_up.helpers import TINY, images, resnet_c4_shapes, tiny_model

EPS = 1e-5
A, SCALES, RATIOS = TINY.num_anchors, len(TINY.anchor_scales), len(TINY.anchor_ratios)
D2_ANCHOR = [s * RATIOS + r for r in range(RATIOS) for s in range(SCALES)]  # ours r*S+s is detectron2's s*R+r
OURS_OF_D2 = np.argsort(D2_ANCHOR)  # detectron2 channel j holds our anchor OURS_OF_D2[j]
BOX_WEIGHTS = np.tile(np.array([10.0, 10.0, 5.0, 5.0], dtype=np.float32), TINY.num_classes)
ATTR_NAMES = {"cls_embedding": "cls_embed", "fc_attr": "attr_linear1", "attr_score": "attr_linear2"}


def source_name(key: str, milvlg: bool) -> str:
    """Our parameter name -> the public checkpoints' (written out independently of features.bottom_up.weights)."""
    head, _, rest = key.partition(".")
    if head in ("stem", "res2", "res3", "res4"):
        return "backbone." + key
    if head == "res5":
        return "roi_heads." + key
    if head == "rpn":
        layer, _, name = rest.partition(".")
        renamed = {"conv": "conv", "cls_score": "objectness_logits", "bbox_pred": "anchor_deltas"}[layer]
        return f"proposal_generator.rpn_head.{renamed}.{name}"
    if head == "attr":
        layer, _, name = rest.partition(".")
        return f"roi_heads.box_predictor.{ATTR_NAMES[layer] if milvlg else layer}.{name}"
    return "roi_heads.box_predictor." + key


def exact_sigmoid_model(seed: int = 0, config: BUTDConfig = TINY) -> BottomUpAttention:
    """A tiny model that detectron2's layout can hold exactly: zero background RPN logits and box deltas."""
    model = tiny_model(seed, config)
    rpn_bias, box_bias = model.rpn.cls_score.bias, model.bbox_pred.bias
    assert rpn_bias is not None and box_bias is not None
    with torch.no_grad():
        model.rpn.cls_score.weight[:A] = 0.0
        rpn_bias[:A] = 0.0
        model.bbox_pred.weight[:4] = 0.0
        box_bias[:4] = 0.0
    return model


def detectron2_arrays(model: BottomUpAttention, stats: bool = True) -> dict[str, np.ndarray]:
    """The airsplay layout: background last, sigmoid RPN in size-major anchor order, 1600 x 4 deltas."""
    out: dict[str, np.ndarray] = {}
    for key, tensor in model.state_dict().items():
        value = tensor.numpy().copy()
        name = source_name(key, milvlg=False)
        if key.endswith("norm.scale"):
            out[name[: -len("scale")] + "weight"] = value
            if stats:  # what detectron2's FrozenBatchNorm2d saves for an identity normalisation
                out[name[: -len("scale")] + "running_mean"] = np.zeros_like(value)
                out[name[: -len("scale")] + "running_var"] = np.ones_like(value) - EPS
        elif key.endswith("norm.shift"):
            out[name[: -len("shift")] + "bias"] = value
        elif key.startswith("rpn.cls_score"):
            out[name] = value[A:][OURS_OF_D2]
        elif key.startswith("rpn.bbox_pred"):
            out[name] = value.reshape(A, 4, *value.shape[1:])[OURS_OF_D2].reshape(value.shape)
        elif key.startswith("bbox_pred"):
            out[name] = value[4:] * BOX_WEIGHTS.reshape(-1, *([1] * (value.ndim - 1)))
        elif key.startswith(("cls_score", "attr.cls_embedding", "attr.attr_score")):
            out[name] = np.concatenate([value[1:], value[:1]])
        else:
            out[name] = value
    return out


def milvlg_tensors(model: BottomUpAttention, seed: int = 0) -> dict[str, torch.Tensor]:
    """The MILVLG caffe-mode layout: Caffe order, full BatchNorm statistics with random mean and variance."""
    rng = np.random.default_rng(seed)
    state = model.state_dict()
    out: dict[str, torch.Tensor] = {}
    for key, tensor in state.items():
        name = source_name(key, milvlg=True)
        if key.endswith("norm.shift"):
            continue
        if key.endswith("norm.scale"):
            scale, shift = tensor.double().numpy(), state[key[: -len("scale")] + "shift"].double().numpy()
            mean, var = rng.normal(0, 1, scale.shape), rng.uniform(0.5, 2.0, scale.shape)
            prefix = name[: -len("scale")]
            out[prefix + "weight"] = torch.from_numpy(scale * np.sqrt(var + EPS)).float()
            out[prefix + "bias"] = torch.from_numpy(shift + mean * scale).float()
            out[prefix + "running_mean"] = torch.from_numpy(mean).float()
            out[prefix + "running_var"] = torch.from_numpy(var).float()
            out[prefix + "num_batches_tracked"] = torch.tensor(0)
        else:
            out[name] = tensor.clone()
    return out


def write_pickle(path: Path, arrays: dict[str, np.ndarray], protocol: int = 2) -> Path:
    with open(path, "wb") as handle:
        pickle.dump({"model": arrays, "__author__": "test"}, handle, protocol=protocol)
    return path


def assert_same_state(loaded: BottomUpAttention, original: BottomUpAttention) -> None:
    original_state = original.state_dict()
    for key, value in loaded.state_dict().items():
        torch.testing.assert_close(value, original_state[key], rtol=1e-6, atol=1e-7, msg=key)


def assert_same_regions(loaded: BottomUpAttention, original: BottomUpAttention) -> None:
    """Same regions, labels and features; norm folding rounds differently, which exp() in box decoding magnifies."""
    batch = images(2, seed=11)
    selection = FixedRegions(count=6)
    cpu = torch.device("cpu")
    expected = BUTDExtractor(original, selection, cpu).extract(batch)
    for got, want in zip(BUTDExtractor(loaded, selection, cpu).extract(batch), expected, strict=True):
        np.testing.assert_allclose(got.boxes, want.boxes, rtol=0, atol=0.01)
        np.testing.assert_array_equal(got.object_ids, want.object_ids)
        np.testing.assert_allclose(got.features, want.features, rtol=1e-4, atol=1e-5)
        if want.attr_ids is not None:
            np.testing.assert_array_equal(got.attr_ids, want.attr_ids)


def test_detectron2_pickle_loads_back_to_the_same_model(tmp_path: Path) -> None:
    original = exact_sigmoid_model()
    path = write_pickle(tmp_path / "faster_rcnn_from_caffe_attr.pkl", detectron2_arrays(original))
    loaded = tiny_model(seed=1)
    assert load_checkpoint(loaded, path) == "detectron2"
    assert_same_state(loaded, original)
    assert_same_regions(loaded, original)


def test_detectron2_pickle_without_attributes_or_norm_statistics(tmp_path: Path) -> None:
    config = dataclasses.replace(TINY, attributes=False)
    original = exact_sigmoid_model(config=config)
    path = write_pickle(tmp_path / "faster_rcnn_from_caffe.pkl", detectron2_arrays(original, stats=False), 4)
    loaded = tiny_model(seed=1, config=config)
    load_checkpoint(loaded, path)
    # without statistics detectron2 normalises with variance 1: scale = gamma / sqrt(1 + eps)
    scale = loaded.state_dict()["res3.1.conv2.norm.scale"]
    torch.testing.assert_close(scale, original.state_dict()["res3.1.conv2.norm.scale"] / np.sqrt(1 + EPS))
    assert_same_regions(loaded, original)


def test_detectron2_cell_anchors_decide_the_rpn_order(tmp_path: Path) -> None:
    original = exact_sigmoid_model()
    arrays = detectron2_arrays(original)
    order = [5, 0, 7, 3, 11, 1, 9, 2, 10, 4, 8, 6]  # checkpoint channel i holds our anchor order[i]
    sizes = [(64 * 2**s, ratio) for ratio in TINY.anchor_ratios for s in range(SCALES)]  # our anchors
    cells = []
    for ours in order:  # detectron2's generate_cell_anchors: area size^2, h = ratio * w, centred on 0
        w = (sizes[ours][0] ** 2 / sizes[ours][1]) ** 0.5
        cells.append([-w / 2, -sizes[ours][1] * w / 2, w / 2, sizes[ours][1] * w / 2])
    state = original.state_dict()
    for key in ("weight", "bias"):
        fg = state[f"rpn.cls_score.{key}"].numpy()[A:]
        arrays[f"proposal_generator.rpn_head.objectness_logits.{key}"] = fg[order]
        deltas = state[f"rpn.bbox_pred.{key}"].numpy()
        arrays[f"proposal_generator.rpn_head.anchor_deltas.{key}"] = deltas.reshape(A, 4, *deltas.shape[1:])[
            order
        ].reshape(deltas.shape)
    arrays["proposal_generator.anchor_generator.cell_anchors.0"] = np.array(cells, dtype=np.float32)
    loaded = tiny_model(seed=1)
    load_checkpoint(loaded, write_pickle(tmp_path / "d2.pkl", arrays))
    assert_same_state(loaded, original)


@pytest.mark.parametrize("wrapped", [True, False])
def test_milvlg_state_dict_loads_back_to_the_same_model(tmp_path: Path, wrapped: bool) -> None:
    original = tiny_model()
    state = milvlg_tensors(original)
    path = tmp_path / "bua-caffe-frcn-r101-k36.pth"
    torch.save({"model": state, "iteration": 1} if wrapped else state, path)
    loaded = tiny_model(seed=1)
    assert load_checkpoint(loaded, path) == "milvlg"
    for key, value in loaded.state_dict().items():
        torch.testing.assert_close(value, original.state_dict()[key], rtol=1e-5, atol=1e-6, msg=key)
    assert_same_regions(loaded, original)


def test_a_wrong_checkpoint_lists_missing_unexpected_and_misshaped_keys() -> None:
    state = milvlg_tensors(tiny_model())
    del state["roi_heads.res5.0.conv1.weight"]
    state["roi_heads.res6.0.conv1.weight"] = torch.zeros(2, 3)
    state["roi_heads.box_predictor.cls_score.bias"] = torch.zeros(5)
    del state["backbone.res2.0.conv2.norm.running_var"]
    with pytest.raises(CheckpointError) as raised:
        convert_checkpoint(state, tiny_model(), "milvlg", source="bua.pth")
    message = str(raised.value)
    assert message.startswith("bua.pth: does not fit the model (milvlg layout)")
    assert (
        "missing (2): backbone.res2.0.conv2.norm.running_var (8,), roi_heads.res5.0.conv1.weight (64, 128, 1, 1)"
        in message
    )
    assert "unexpected (1): roi_heads.res6.0.conv1.weight (2, 3)" in message
    assert "mis-shaped (1): roi_heads.box_predictor.cls_score.bias: (5,) in the checkpoint, expected (11,)" in message


def test_an_attribute_mismatch_says_how_to_fix_it(tmp_path: Path) -> None:
    path = write_pickle(tmp_path / "d2.pkl", detectron2_arrays(exact_sigmoid_model()))
    plain = tiny_model(config=dataclasses.replace(TINY, attributes=False))
    with pytest.raises(CheckpointError, match=r"unexpected \(5\): roi_heads.box_predictor.cls_embedding"):
        load_checkpoint(plain, path)
    with pytest.raises(CheckpointError, match=r"BUTDConfig\(attributes=\.\.\.\)"):
        load_checkpoint(plain, path)


class RunsACommand:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return os.system, (f"touch {self.marker}",)


def test_the_restricted_unpickler_refuses_code_and_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    path = tmp_path / "evil.pkl"
    path.write_bytes(pickle.dumps({"model": {"w": np.zeros(2), "x": RunsACommand(marker)}}, protocol=2))
    with pytest.raises(CheckpointError, match=r"evil.pkl: refusing to unpickle posix\.system"):
        read_checkpoint(path)
    assert not marker.exists()
    path.write_bytes(pickle.dumps({"model": {"w": torch.zeros(2)}}))
    with pytest.raises(CheckpointError, match=r"refusing to unpickle torch\."):
        read_checkpoint(path)


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_the_restricted_unpickler_reads_containers_and_arrays(tmp_path: Path, protocol: int) -> None:
    weights = np.arange(12, dtype=np.float32).reshape(3, 4)
    content = collections.OrderedDict(w=weights, b=np.array([1, 2], dtype=np.int64), s=np.float32(2.5))
    path = tmp_path / "ok.pkl"
    path.write_bytes(pickle.dumps({"model": {"w": weights, "b": content["b"]}, "__author__": ["x", 1]}, protocol))
    tensors = read_checkpoint(path)
    np.testing.assert_array_equal(tensors["w"].numpy(), weights)
    assert tensors["b"].dtype == torch.int64
    path.write_bytes(pickle.dumps({"model": content}, protocol))
    with pytest.raises(CheckpointError, match=r"not arrays: s \(float32\)"):
        read_checkpoint(path)
    path.write_bytes(pickle.dumps({"model": {"names": np.array(["a", None], dtype=object)}}, protocol))
    with pytest.raises(CheckpointError, match=r"not arrays: names \(object\)"):
        read_checkpoint(path)


def r101_source_shapes(milvlg: bool) -> dict[str, tuple[int, ...]]:
    """Every tensor of the real R101 checkpoints, listed from the architecture (3, 4, 23, 3 blocks)."""
    norm = ("weight", "bias", "running_mean", "running_var") + (("num_batches_tracked",) if milvlg else ())
    shapes = resnet_c4_shapes(norm, (3, 4, 23, 3), 64, 64)
    rpn, box = "proposal_generator.rpn_head.", "roi_heads.box_predictor."
    shapes |= {rpn + "conv.weight": (512, 1024, 3, 3), rpn + "conv.bias": (512,)}
    shapes |= {rpn + "objectness_logits.weight": (24 if milvlg else 12, 512, 1, 1)}
    shapes |= {rpn + "objectness_logits.bias": (24 if milvlg else 12,)}
    shapes |= {rpn + "anchor_deltas.weight": (48, 512, 1, 1), rpn + "anchor_deltas.bias": (48,)}
    shapes |= {box + "cls_score.weight": (1601, 2048), box + "cls_score.bias": (1601,)}
    shapes |= {box + "bbox_pred.weight": (6404 if milvlg else 6400, 2048)}
    shapes |= {box + "bbox_pred.bias": (6404 if milvlg else 6400,)}
    embed, fc, score = ("cls_embed", "attr_linear1", "attr_linear2") if milvlg else ATTR_NAMES
    shapes |= {f"{box}{embed}.weight": (1601, 256), f"{box}{fc}.weight": (512, 2304), f"{box}{fc}.bias": (512,)}
    shapes |= {f"{box}{score}.weight": (401, 512), f"{box}{score}.bias": (401,)}
    return shapes


@pytest.mark.parametrize("milvlg", [False, True])
def test_the_mapping_covers_every_parameter_of_the_real_r101(milvlg: bool) -> None:
    with torch.device("meta"):
        model = BottomUpAttention(BUTDConfig())
        source = {key: torch.empty(shape) for key, shape in r101_source_shapes(milvlg).items()}
    layout = detect_layout(source)
    assert layout == ("milvlg" if milvlg else "detectron2")
    converted = convert_checkpoint(source, model, layout)
    expected = {key: tuple(value.shape) for key, value in model.state_dict().items()}
    assert {key: tuple(value.shape) for key, value in converted.items()} == expected
    assert sum(value.numel() for value in model.parameters()) > 60_000_000


def test_unreadable_or_foreign_checkpoints_are_named(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="no such checkpoint file"):
        read_checkpoint(tmp_path / "missing.pth")
    (tmp_path / "junk.pth").write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match=r"junk\.pth: not a loadable torch checkpoint"):
        read_checkpoint(tmp_path / "junk.pth")
    with pytest.raises(CheckpointError, match="not a bottom-up-attention model"):
        detect_layout({"fc.weight": torch.zeros(2, 2)}, "resnet.pth")
    arrays = detectron2_arrays(exact_sigmoid_model())
    arrays["pixel_mean"] = np.array([103.53, 116.28, 123.675], dtype=np.float32).reshape(3, 1, 1)
    with pytest.raises(CheckpointError, match="pixel_mean"):
        load_checkpoint(tiny_model(), write_pickle(tmp_path / "d2.pkl", arrays))


def test_file_sha256(tmp_path: Path) -> None:
    path = tmp_path / "weights.pth"
    path.write_bytes(b"x" * 3_000_000)
    assert file_sha256(path) == hashlib.sha256(b"x" * 3_000_000).hexdigest()


def test_load_vocabulary(tmp_path: Path) -> None:
    path = tmp_path / "objects_vocab.txt"
    path.write_text("yolk\nbeach,beaches\ntennis racket,tennis racquet\n", encoding="utf-8")
    assert load_vocabulary(path, expected=3) == ["yolk", "beach", "tennis racket"]
    with pytest.raises(ValueError, match="3 entries, expected 1600"):
        load_vocabulary(path, expected=1600)
    path.write_text("yolk\n\nbeach\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"objects_vocab\.txt:2: empty"):
        load_vocabulary(path)


@pytest.mark.parametrize("milvlg", [False, True])
def test_the_architecture_is_read_from_the_checkpoint(tmp_path: Path, milvlg: bool) -> None:
    original = exact_sigmoid_model()
    if milvlg:
        path = tmp_path / "model.pth"
        torch.save(milvlg_tensors(original), path)
    else:
        path = write_pickle(tmp_path / "model.pkl", detectron2_arrays(original))
    runtime = {
        name: getattr(TINY, name) for name in ("test_scale", "max_size", "rpn_pre_nms_top_n", "rpn_post_nms_top_n")
    }
    assert config_from_checkpoint(read_checkpoint(path), **runtime) == TINY  # blocks, widths, heads from the file
    loaded = load_detector(path, **runtime)
    assert_same_regions(loaded, original)


def test_a_checkpoint_of_something_else_is_named_as_such() -> None:
    with pytest.raises(CheckpointError, match=r"no backbone\.res2\.\* keys: not a bottom-up-attention R-C4 model"):
        config_from_checkpoint({"encoder.weight": torch.zeros(2, 2)})
