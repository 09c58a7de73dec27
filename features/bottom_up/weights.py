"""Loading the public bottom-up-attention checkpoints into :class:`features.bottom_up.model.BottomUpAttention`.

Two layouts are read and mapped onto our module names (``stem``, ``res2``..``res5``, ``rpn``, ``cls_score``,
``bbox_pred``, ``attr``) and Caffe conventions (background class 0, "no attribute" 0, softmax RPN with the
12 background logits first, anchors in py-faster-rcnn's ratio-major order):

``detectron2`` -- the airsplay/py-bottom-up-attention port (``faster_rcnn_from_caffe_attr.pkl``, and
``faster_rcnn_from_caffe.pkl`` without the attribute head): a pickle of ``{"model": {name: ndarray},
"__author__": ...}``, read with ``encoding="latin1"`` through a restricted unpickler.
``milvlg`` -- MILVLG/bottom-up-attention.pytorch caffe mode (``bua-caffe-frcn-r101-k36.pth``): a torch state
dict, bare or under ``"model"``, read with ``torch.load(weights_only=True)``.

Both name the backbone ``backbone.stem.conv1`` and ``backbone.res{2,3,4}.{i}.{shortcut,conv1,conv2,conv3}``
(detectron2 ``Conv2d`` with ``.norm``), the head ``roi_heads.res5.{i}...`` and
``roi_heads.box_predictor.{cls_score,bbox_pred}``, the RPN ``proposal_generator.rpn_head.{conv,
objectness_logits,anchor_deltas}``. The layout is told apart by the RPN: objectness has as many channels as
anchors (sigmoid, detectron2) or twice as many (softmax, MILVLG).

The files could not be downloaded to check them; these are the assumptions, from the two repositories'
model code and configs:

* detectron2 layout:
  - background is the **last** of the 1601 classes; ``cls_score`` rows and ``cls_embedding`` rows (indexed by
    the argmax class) move row 1600 to row 0. ``bbox_pred`` has 1600 x 4 rows without background; zero rows
    are inserted for it, and its deltas are divided by detectron2's default ROI box weights (10, 10, 5, 5),
    which the converted model must have folded in to reproduce Caffe's boxes. ``bbox_pred`` is unused by
    feature extraction, so neither assumption changes features, boxes or labels.
  - ``attr_score`` (401) has "no attribute" **last** (the transformers LXMERT port of this model drops
    ``[..., :-1]``); it moves to row 0. ``fc_attr`` takes [pool5, class embedding] in that order.
  - objectness is one sigmoid logit per anchor: it becomes the foreground logit with a zero background
    logit, exactly the same probability under our 2-way softmax (softmax([0, z])[1] = sigmoid(z)).
  - anchors are in detectron2's size-major order (``generate_cell_anchors``: for size, for ratio); the RPN
    rows are permuted to Caffe's ratio-major order. If the file holds
    ``proposal_generator.anchor_generator.cell_anchors.0``, the order is read from those anchors instead.
  - ``.norm`` holds ``weight``, ``bias`` and optionally ``running_mean``/``running_var`` (detectron2's
    ``FrozenBatchNorm2d`` loads missing ones as 0 and 1); folded with eps 1e-5, detectron2's default.
* MILVLG layout: Caffe order throughout (1601 classes with background first, ``bbox_pred`` 6404, 24 softmax
  RPN channels with background first, as ``rpn_outputs.py`` views them as (2, A)), anchors in Caffe order
  (the weights are copied from the caffemodel); attribute layers ``cls_embed``, ``attr_linear1``,
  ``attr_linear2``; norms are full ``BatchNorm2d`` (``weight``, ``bias``, ``running_mean``,
  ``running_var``, optional ``num_batches_tracked``), folded with eps 1e-5 (``nn.BatchNorm2d``'s default,
  which MILVLG's R101 config uses; its R152 uses 2e-5: pass ``bn_eps``).
* ``num_batches_tracked``, ``pixel_mean``/``pixel_std`` (checked against the config) and cell anchors are
  accepted and not loaded; any other extra key is an error.
"""

from __future__ import annotations

import codecs
import collections
import importlib
import pickle
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any, Literal

import numpy as np
import torch

from common.errors import InputError
from common.weights import error_reason, pickle_refusal, refused_global
from features.bottom_up import ops
from features.bottom_up.model import BottomUpAttention, BUTDConfig

Layout = Literal["detectron2", "milvlg"]
OBJECT_VOCAB_SIZE = 1600
ATTRIBUTE_VOCAB_SIZE = 400
DETECTRON2_BOX_WEIGHTS = (10.0, 10.0, 5.0, 5.0)
_BN_EPS = 1e-5
_RPN = "proposal_generator.rpn_head."
_CELL_ANCHORS = "proposal_generator.anchor_generator.cell_anchors.0"
_LISTED = 30  # keys shown per kind of problem


class CheckpointError(InputError):
    """A checkpoint that cannot be read or does not fit the model; the message names the file and the keys."""


_MULTIARRAY = importlib.import_module("numpy._core.multiarray")
_NUMERIC = importlib.import_module("numpy._core.numeric")
_ALLOWED_GLOBALS: dict[tuple[str, str], Any] = {
    ("numpy.core.multiarray", "_reconstruct"): _MULTIARRAY._reconstruct,
    ("numpy._core.multiarray", "_reconstruct"): _MULTIARRAY._reconstruct,
    ("numpy.core.multiarray", "scalar"): _MULTIARRAY.scalar,
    ("numpy.core.numeric", "_frombuffer"): _NUMERIC._frombuffer,  # protocol 5 arrays
    ("numpy._core.numeric", "_frombuffer"): _NUMERIC._frombuffer,
    ("numpy._core.multiarray", "scalar"): _MULTIARRAY.scalar,
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("_codecs", "encode"): codecs.encode,  # how protocol-2 pickles written by Python 3 store bytes
}


class _ArraysOnlyUnpickler(pickle.Unpickler):
    """Resolves only numpy-array reconstruction and plain containers; refuses every other global."""

    def __init__(self, file: IO[bytes], source: str) -> None:
        super().__init__(file, encoding="latin1")  # Python 2 pickles hold array bytes as str
        self.source = source

    def find_class(self, module: str, name: str) -> Any:
        allowed = _ALLOWED_GLOBALS.get((module, name))
        if allowed is None:
            raise CheckpointError(
                f"{self.source}: refusing to unpickle {module}.{name}: only plain containers and numpy arrays "
                "are allowed in a checkpoint pickle"
            )
        return allowed


def restricted_pickle_load(file: IO[bytes], source: str = "pickle") -> Any:
    """``pickle.load`` that builds only containers, numbers, strings and numpy arrays (nothing is executed)."""
    try:
        return _ArraysOnlyUnpickler(file, source).load()
    except CheckpointError:
        raise
    except Exception as error:  # a corrupt pickle can fail in many ways
        raise CheckpointError(f"{source}: not a readable pickle ({type(error).__name__}: {error})") from error


def read_checkpoint(path: str | Path) -> dict[str, torch.Tensor]:
    """Parameter name -> tensor from a ``.pkl`` (restricted unpickler) or a torch file (weights only)."""
    source = Path(path)
    if not source.is_file():
        raise CheckpointError(f"{source}: no such checkpoint file")
    if source.suffix == ".pkl":
        with open(source, "rb") as handle:
            loaded = restricted_pickle_load(handle, str(source))
    else:
        try:
            loaded = torch.load(source, map_location="cpu", weights_only=True)
        except Exception as error:  # weights_only's refusal of a global, or a corrupt file
            if refused_global(error) is not None:
                raise CheckpointError(str(pickle_refusal(source, error, "detector checkpoint"))) from error
            raise CheckpointError(f"{source}: not a loadable torch checkpoint ({error_reason(error)})") from error
    state = loaded.get("model", loaded) if isinstance(loaded, dict) else loaded
    if not isinstance(state, Mapping):
        raise CheckpointError(f"{source}: expected a dict of parameters, got {type(state).__name__}")
    tensors, bad = {}, []
    for key, value in state.items():
        if isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
            tensors[str(key)] = torch.from_numpy(np.array(value))  # a copy: pickled arrays may be read-only
        elif isinstance(value, torch.Tensor):
            tensors[str(key)] = value
        else:
            bad.append(f"{key} ({getattr(value, 'dtype', type(value).__name__)})")
    if bad:
        raise CheckpointError(f"{source}: entries that are not arrays: {', '.join(bad[:_LISTED])}")
    return tensors


def detect_layout(tensors: Mapping[str, torch.Tensor], source: str = "checkpoint") -> Layout:
    """Tell the layouts apart by the RPN: A objectness channels (detectron2, sigmoid) or 2A (MILVLG, softmax)."""
    objectness, deltas = tensors.get(_RPN + "objectness_logits.weight"), tensors.get(_RPN + "anchor_deltas.weight")
    if objectness is None or deltas is None:
        raise CheckpointError(f"{source}: no {_RPN}objectness_logits / anchor_deltas: not a bottom-up-attention model")
    if 4 * objectness.shape[0] == deltas.shape[0]:
        return "detectron2"
    if 2 * objectness.shape[0] == deltas.shape[0]:
        return "milvlg"
    raise CheckpointError(
        f"{source}: RPN objectness {tuple(objectness.shape)} fits neither layout with deltas {tuple(deltas.shape)}"
    )


def load_checkpoint(model: BottomUpAttention, path: str | Path, *, bn_eps: float = _BN_EPS) -> Layout:
    """Read, convert and load a public checkpoint into ``model``; returns the layout found.

    Raises:
        CheckpointError: unreadable file, refused pickle content, or keys that are missing, unexpected or
            mis-shaped (all listed on one line, with both shapes where they differ).
    """
    tensors = read_checkpoint(path)
    layout = detect_layout(tensors, str(path))
    model.load_state_dict(convert_checkpoint(tensors, model, layout, bn_eps=bn_eps, source=str(path)))
    return layout


class _Reader:
    """Takes tensors out of a checkpoint by name and records what is missing, mis-shaped or left over."""

    def __init__(self, tensors: Mapping[str, torch.Tensor]) -> None:
        self.tensors = tensors
        self.used: set[str] = set()
        self.missing: list[str] = []
        self.misshaped: list[str] = []

    def take(self, key: str, shape: tuple[int, ...], required: bool = True) -> torch.Tensor | None:
        value = self.tensors.get(key)
        if value is None:
            if required:
                self.missing.append(f"{key} {shape}")
            return None
        self.used.add(key)
        if tuple(value.shape) != shape:
            self.misshaped.append(f"{key}: {tuple(value.shape)} in the checkpoint, expected {shape}")
            return None
        return value

    def error(self, source: str, layout: Layout) -> CheckpointError | None:
        unexpected = [f"{k} {tuple(v.shape)}" for k, v in self.tensors.items() if k not in self.used]
        if not (self.missing or unexpected or self.misshaped):
            return None
        parts = []
        for title, keys in (("missing", self.missing), ("unexpected", unexpected), ("mis-shaped", self.misshaped)):
            if keys:
                more = f" ... and {len(keys) - _LISTED} more" if len(keys) > _LISTED else ""
                parts.append(f"{title} ({len(keys)}): " + ", ".join(keys[:_LISTED]) + more)
        if any(marker in key for key in self.missing + unexpected for marker in _ATTR_MARKERS):
            parts.append("attribute head keys: build the model with BUTDConfig(attributes=...) to match")
        return CheckpointError(f"{source}: does not fit the model ({layout} layout): " + "; ".join(parts))


_RPN_NAMES = {"rpn.conv": "conv", "rpn.cls_score": "objectness_logits", "rpn.bbox_pred": "anchor_deltas"}
_ATTR_NAMES: dict[Layout, dict[str, str]] = {
    "detectron2": {"attr.cls_embedding": "cls_embedding", "attr.fc_attr": "fc_attr", "attr.attr_score": "attr_score"},
    "milvlg": {"attr.cls_embedding": "cls_embed", "attr.fc_attr": "attr_linear1", "attr.attr_score": "attr_linear2"},
}
_ATTR_MARKERS = ("cls_embed", "fc_attr", "attr_score", "attr_linear", "attr.")
_LAST_TO_FIRST = ("cls_score", "attr.cls_embedding", "attr.attr_score")  # detectron2 rows to move


def _source_module(module: str, layout: Layout) -> str:
    """Our module name (``res5.0.conv1.norm``) -> the checkpoint's (``roi_heads.res5.0.conv1.norm``)."""
    stage = module.split(".", 1)[0]
    if stage in ("stem", "res2", "res3", "res4"):
        return "backbone." + module
    if stage == "res5":
        return "roi_heads." + module
    if module in _RPN_NAMES:
        return _RPN + _RPN_NAMES[module]
    return "roi_heads.box_predictor." + _ATTR_NAMES[layout].get(module, module)


def _fold_norm(
    reader: _Reader, prefix: str, channels: int, eps: float, stats_required: bool
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Batch norm (gamma, beta, mean, var) -> frozen (scale, shift), folded in float64."""
    shape = (channels,)
    weight, bias = reader.take(prefix + "weight", shape), reader.take(prefix + "bias", shape)
    mean = reader.take(prefix + "running_mean", shape, stats_required)
    var = reader.take(prefix + "running_var", shape, stats_required)
    reader.take(prefix + "num_batches_tracked", (), required=False)
    if weight is None or bias is None or (stats_required and (mean is None or var is None)):
        return None
    mean = torch.zeros_like(weight) if mean is None else mean
    var = torch.ones_like(weight) if var is None else var
    scale = weight.double() / torch.sqrt(var.double() + eps)
    return scale.float(), (bias.double() - mean.double() * scale).float()


def _anchor_order(reader: _Reader, config: BUTDConfig, layout: Layout, source: str) -> torch.Tensor:
    """For each of our anchors, the index of the same anchor among the checkpoint's RPN channels."""
    scales, ratios = len(config.anchor_scales), len(config.anchor_ratios)
    if layout == "milvlg":
        default = list(range(scales * ratios))
    else:  # ours is ratio-major (r * S + s), detectron2's size-major (s * R + r)
        default = [s * ratios + r for r in range(ratios) for s in range(scales)]
    cells = reader.take(_CELL_ANCHORS, (scales * ratios, 4), required=False)
    if cells is None or cells.is_meta:
        return torch.tensor(default)
    ours = ops.generate_anchors(config.feat_stride, config.anchor_ratios, config.anchor_scales).double()
    ours[:, 2:] += 1  # "+1" widths; detectron2 anchors have none, a few percent against a factor of 2 between sizes
    order = torch.cdist(_log_sizes(ours), _log_sizes(cells.double())).argmin(dim=1)
    if sorted(order.tolist()) != list(range(len(order))):
        raise CheckpointError(f"{source}: the anchors in {_CELL_ANCHORS} do not match the config's anchors")
    return order


def _log_sizes(boxes: torch.Tensor) -> torch.Tensor:
    """(A, 4) boxes -> (A, 2) log width, log height."""
    return torch.log(torch.stack([boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]], dim=1))


def _convert_param(
    reader: _Reader, key: str, shape: tuple[int, ...], layout: Layout, anchor_order: torch.Tensor
) -> torch.Tensor | None:
    """One of our parameters from the checkpoint, reordered to Caffe conventions where the layouts differ."""
    module, name = key.rsplit(".", 1)
    source_key = _source_module(module, layout) + "." + name
    rest, num_anchors = shape[1:], len(anchor_order)
    if module == "rpn.cls_score":
        if layout == "milvlg":
            logits = reader.take(source_key, shape)
        else:  # a sigmoid logit z is the softmax pair (0, z): background logits 0
            fg = reader.take(source_key, (num_anchors, *rest))
            logits = None if fg is None else torch.cat([torch.zeros_like(fg), fg])
        return None if logits is None else logits.view(2, num_anchors, *rest)[:, anchor_order].reshape(shape)
    if module == "rpn.bbox_pred":
        deltas = reader.take(source_key, shape)
        return None if deltas is None else deltas.view(num_anchors, 4, *rest)[anchor_order].reshape(shape)
    if layout == "milvlg" or module not in ("bbox_pred", *_LAST_TO_FIRST):
        return reader.take(source_key, shape)
    if module == "bbox_pred":  # 4K rows without background, scaled by detectron2's box weights
        deltas = reader.take(source_key, (shape[0] - 4, *rest))
        if deltas is None:
            return None
        weights = deltas.new_tensor(DETECTRON2_BOX_WEIGHTS).repeat(shape[0] // 4 - 1).view(-1, *([1] * len(rest)))
        return torch.cat([deltas.new_zeros((4, *rest)), deltas / weights])
    rows = reader.take(source_key, shape)  # background / "no attribute" last -> first
    return None if rows is None else torch.cat([rows[-1:], rows[:-1]])


def convert_checkpoint(
    tensors: Mapping[str, torch.Tensor],
    model: BottomUpAttention,
    layout: Layout,
    *,
    bn_eps: float = _BN_EPS,
    source: str = "checkpoint",
) -> dict[str, torch.Tensor]:
    """Checkpoint tensors -> ``model``'s state dict (works on meta tensors too).

    Raises:
        CheckpointError: listing every missing, unexpected and mis-shaped key with shapes.
    """
    reader = _Reader(tensors)
    _check_normalisation(reader, model.config, source)
    anchor_order = _anchor_order(reader, model.config, layout, source)
    converted: dict[str, torch.Tensor] = {}
    for key, target in model.state_dict().items():
        shape = tuple(target.shape)
        if key.endswith(".norm.shift"):
            continue  # produced together with .norm.scale
        if key.endswith(".norm.scale"):
            prefix = key[: -len("scale")]
            source_prefix = _source_module(prefix[:-1], layout) + "."
            folded = _fold_norm(reader, source_prefix, shape[0], bn_eps, layout == "milvlg")
            if folded is not None:
                converted[prefix + "scale"], converted[prefix + "shift"] = folded
            continue
        value = _convert_param(reader, key, shape, layout, anchor_order)
        if value is not None:
            converted[key] = value
    error = reader.error(source, layout)
    if error is not None:
        raise error
    return converted


def _check_normalisation(reader: _Reader, config: BUTDConfig, source: str) -> None:
    """detectron2 models may carry their pixel mean/std; they must be the config's (and std 1)."""
    mean, std = reader.take("pixel_mean", (3, 1, 1), False), reader.take("pixel_std", (3, 1, 1), False)
    expected_mean = torch.tensor(config.pixel_mean_bgr).double()
    if mean is not None and not mean.is_meta and not torch.allclose(mean.flatten().double(), expected_mean, atol=1e-3):
        raise CheckpointError(f"{source}: pixel_mean {mean.flatten().tolist()} is not {config.pixel_mean_bgr}")
    if std is not None and not std.is_meta and not torch.allclose(std.double(), torch.ones_like(std).double()):
        raise CheckpointError(f"{source}: pixel_std {std.flatten().tolist()} is not 1 (Caffe divides by nothing)")


def load_vocabulary(path: str | Path, expected: int | None = None) -> list[str]:
    """Names from a reference vocabulary file (one class per line, comma-separated synonyms, first is the name).

    Args:
        expected: required line count (1600 objects, 400 attributes), or None.

    Raises:
        ValueError: missing file, an empty line (named), or the wrong number of lines.
    """
    source = Path(path)
    if not source.is_file():
        raise ValueError(f"{source}: vocabulary file missing")
    lines = source.read_text(encoding="utf-8").splitlines()
    names = []
    for number, line in enumerate(lines, start=1):
        name = line.split(",")[0].strip()
        if not name:
            raise ValueError(f"{source}:{number}: empty vocabulary entry")
        names.append(name)
    if expected is not None and len(names) != expected:
        raise ValueError(f"{source}: {len(names)} entries, expected {expected}")
    return names


def config_from_checkpoint(tensors: Mapping[str, torch.Tensor], **overrides: Any) -> BUTDConfig:
    """The architecture a checkpoint holds (blocks per stage, widths, classes, attribute head), read from its
    keys and shapes, so R101 checkpoints and smaller ones (tests) load without a separate config file.

    ``overrides`` set the non-architectural fields (``test_scale``, ``max_size``, ...).
    """

    def count(stage: str) -> int:
        prefix = ("roi_heads." if stage == "res5" else "backbone.") + stage + "."
        indices = {int(name[len(prefix) :].split(".", 1)[0]) for name in tensors if name.startswith(prefix)}
        if not indices:
            raise CheckpointError(f"checkpoint: no {prefix}* keys: not a bottom-up-attention R-C4 model")
        return max(indices) + 1

    def rows(name: str) -> int:
        if name not in tensors:
            raise CheckpointError(f"checkpoint: missing key {name}: not a bottom-up-attention R-C4 model")
        return int(tensors[name].shape[0])

    blocks = (count("res2"), count("res3"), count("res4"), count("res5"))
    attributes = any(marker in name for name in tensors for marker in _ATTR_MARKERS)
    attr_rows = [
        tensor.shape[0]
        for name, tensor in tensors.items()
        if name.endswith(("attr_score.weight", "attr_linear2.weight"))
    ]
    fields: dict[str, Any] = {
        "blocks": blocks,
        "stem_channels": rows("backbone.stem.conv1.weight"),
        "width": rows("backbone.res2.0.conv1.weight"),
        "rpn_channels": rows("proposal_generator.rpn_head.conv.weight"),
        "num_classes": rows("roi_heads.box_predictor.cls_score.weight") - 1,
        "attributes": attributes,
    }
    if attr_rows:
        fields["num_attributes"] = int(attr_rows[0]) - 1
    for name, tensor in tensors.items():
        if name.endswith(("cls_embedding.weight", "cls_embed.weight")):
            fields["attr_embed_dim"] = int(tensor.shape[1])
        elif name.endswith(("fc_attr.weight", "attr_linear1.weight")):
            fields["attr_hidden"] = int(tensor.shape[0])
    return BUTDConfig(**{**fields, **overrides})


def load_detector(path: str | Path, **overrides: Any) -> BottomUpAttention:
    """A :class:`BottomUpAttention` built to the checkpoint's architecture, with its weights loaded."""
    model = BottomUpAttention(config_from_checkpoint(read_checkpoint(path), **overrides))
    load_checkpoint(model, path)
    return model
