"""Saving and loading :class:`~mmt.model.RegionalMMT` checkpoints (``pretrain``, ``finetune`` in a system folder).

A checkpoint is two files (:mod:`common.checkpoints`): ``<name>.safetensors``, the weights, and ``<name>.json``,
``{"config": asdict(MMTConfig), "shape": asdict(MMTShape), "extra": ...}`` with the weights file's sha256.
Functions take the checkpoint's stem path (``<folder>/finetune``) or one of its file names; a ``<name>.pt`` of
the earlier format (one ``torch.save`` dict that also holds the ``state_dict``) is still read, with
``torch.load(weights_only=True)``, so loading a file from elsewhere never runs pickled code.
"""

from __future__ import annotations

import os
from dataclasses import asdict, fields
from typing import Any

import torch

from common.checkpoints import CheckpointFiles, update_fields, write_checkpoint
from common.checkpoints import read_checkpoint as read_checkpoint_files
from common.errors import InputError
from common.weights import check_fits
from mmt.model import MMTConfig, MMTShape, RegionalMMT

PathLike = str | os.PathLike[str]
# The checkpoints of a system folder, by stem: text-only pre-training and fine-tuning (the system's weights).
PRETRAIN, FINETUNE = "pretrain", "finetune"
# Fine-tuning starts the visual part afresh: text-only pre-training never reads the region projection, nor the
# region context's attention and combination (MMTConfig.region_context), nor the word grounding's (word_grounding).
VISUAL_PREFIXES = ("region_proj.", "region_att.", "region_combine.", "region_ground.", "region_ground_out.")
# Fields a pre-trained model must share with the model it goes into (dropout, region_dim, max_len may differ).
MUST_MATCH = ("src_vocab", "tgt_vocab", "emb_dim", "hidden", "layers", "pad_id", "unk_id", "bos_id", "eos_id")
_PARTS = ("config", "shape", "state_dict", "extra")
KIND = "MMT checkpoint"


def save_mmt(
    path: PathLike,
    model: RegionalMMT,
    *,
    extra: dict[str, Any],
    state_dict: dict[str, torch.Tensor] | None = None,
) -> None:
    """Write the weights (``model``'s, or ``state_dict`` for that model), the config and ``extra`` (JSON values:
    numbers, strings, lists, dicts) atomically, as ``<stem>.safetensors`` and ``<stem>.json``; the same weights and
    ``extra`` give the same bytes."""
    weights = model.state_dict() if state_dict is None else state_dict
    write_checkpoint(
        path, weights, {"config": asdict(model.config), "shape": asdict(model.shape), "extra": dict(extra)}
    )


def read_checkpoint(path: PathLike, *, device: torch.device) -> dict[str, Any]:
    """The checkpoint dict (config, shape, extra and the ``state_dict`` of tensors on ``device``).

    Raises:
        InputError: a missing file, or one that is not an MMT checkpoint (names the file and what is wrong).
    """
    return _read(path, device=device)[0]


def _read(path: PathLike, *, device: torch.device) -> tuple[dict[str, Any], CheckpointFiles]:
    checkpoint, files = read_checkpoint_files(path, device=device, kind=KIND)
    expected = _PARTS if files.legacy else tuple(part for part in _PARTS if part != "state_dict")
    if not set(_PARTS) <= checkpoint.keys():
        raise InputError(
            f"{files.fields}: not an MMT checkpoint of this version (expected the keys {', '.join(expected)})"
        )
    return checkpoint, files


def checkpoint_config(path: PathLike, checkpoint: dict[str, Any]) -> tuple[MMTConfig, MMTShape]:
    """The :class:`MMTConfig` and :class:`MMTShape` stored in ``checkpoint``; bad fields name the file."""
    parts = []
    for kind, key in ((MMTConfig, "config"), (MMTShape, "shape")):
        if not isinstance(checkpoint[key], dict):
            raise InputError(f"{path}: {key} is a {type(checkpoint[key]).__name__}, not an object of fields")
        stored = dict(checkpoint[key])
        unknown = sorted(set(stored) - {field.name for field in fields(kind)})
        if unknown:
            raise InputError(f"{path}: {key} fields {unknown} are unknown to {kind.__name__}")
        try:
            parts.append(kind(**stored))
        except (TypeError, ValueError) as error:
            raise InputError(f"{path}: invalid MMT {key} ({error})") from error
    config, shape = parts
    assert isinstance(config, MMTConfig) and isinstance(shape, MMTShape)
    return config, shape


def load_mmt(path: PathLike, *, device: torch.device) -> tuple[RegionalMMT, dict[str, Any]]:
    """Rebuild the saved model on ``device`` in eval mode; returns it with the checkpoint's ``extra``.

    Raises:
        InputError: the weights hold a parameter the config's model lacks, lack one it has, or one of another shape
            (the first few of each named).
    """
    checkpoint, files = _read(path, device=device)
    model = RegionalMMT(*checkpoint_config(files.fields, checkpoint))
    # a config that disagrees with the weights (edited, or copied from another run) would otherwise end in
    # load_state_dict's size-mismatch traceback
    check_fits(files.weights, checkpoint["state_dict"], model.state_dict(), f"the model {files.fields.name} describes")
    model.load_state_dict(checkpoint["state_dict"])
    return model.to(device).eval(), checkpoint["extra"]


def record_text_pipeline(path: PathLike, identity: dict[str, str]) -> None:
    """Add the text pipeline a checkpoint was trained with (``TextPipeline.identity``) to its ``extra``, so that a
    loader can refuse a checkpoint copied beside another direction's or another corpus's vocabularies. Only the
    JSON is rewritten (a ``.pt`` checkpoint is written anew in the current format)."""
    checkpoint = read_checkpoint(path, device=torch.device("cpu"))
    del checkpoint["state_dict"]
    checkpoint["extra"] = {**checkpoint["extra"], "text_pipeline": dict(identity)}
    update_fields(path, checkpoint, kind=KIND)


def check_text_pipeline(
    path: PathLike,
    checkpoint_shape: MMTShape,
    extra: dict[str, Any],
    identity: dict[str, str],
    src_size: int,
    tgt_size: int,
    folder: PathLike,
) -> None:
    """Refuse a checkpoint that was not trained with the text pipeline of ``folder``.

    Raises:
        InputError: the vocabulary sizes differ from the checkpoint's, or the recorded pipeline (direction, the
            subword models' hashes) is another one; both sides are named.
    """
    if (checkpoint_shape.src_vocab, checkpoint_shape.tgt_vocab) != (src_size, tgt_size):
        raise InputError(
            f"{path}: vocabularies of {checkpoint_shape.src_vocab}/{checkpoint_shape.tgt_vocab} subwords, "
            f"but the text pipeline in {folder} has {src_size}/{tgt_size}: the checkpoint belongs to "
            f"another system folder"
        )
    recorded = extra.get("text_pipeline")
    if recorded is not None and recorded != identity:
        differ = sorted(key for key in identity if recorded.get(key) != identity[key])
        raise InputError(
            f"{path}: trained with another text pipeline ({recorded.get('src_lang')}->"
            f"{recorded.get('tgt_lang')}; differs in {', '.join(differ)}) than the one in {folder} "
            f"({identity['src_lang']}->{identity['tgt_lang']}): the checkpoint belongs to another "
            f"system folder"
        )


def load_pretrained_into(model: RegionalMMT, path: PathLike) -> list[str]:
    """Copy a (text-only) pre-trained checkpoint into ``model`` for fine-tuning with regions.

    Every weight is copied except the visual projection, which keeps ``model``'s fresh initialisation
    (its size may differ, and text-only training never updates it).

    Returns:
        The parameter names left as they were (the visual projection), sorted.

    Raises:
        InputError: the checkpoint is of another configuration: every differing config field of
            ``MUST_MATCH``, every key missing on either side and every shape that differs is listed.
    """
    device = next(model.parameters()).device
    checkpoint, files = _read(path, device=device)
    stored_config, stored_shape = checkpoint_config(files.fields, checkpoint)
    theirs = asdict(stored_config) | asdict(stored_shape)
    ours = asdict(model.config) | asdict(model.shape)
    stored, own = checkpoint["state_dict"], model.state_dict()
    skipped = sorted(name for name in own if name.startswith(VISUAL_PREFIXES))
    wanted = {name: tensor for name, tensor in own.items() if name not in skipped}
    given = {name: tensor for name, tensor in stored.items() if not name.startswith(VISUAL_PREFIXES)}
    problems = [
        f"config {name}: checkpoint {theirs[name]}, model {ours[name]}"
        for name in MUST_MATCH
        if theirs[name] != ours[name]
    ]
    problems += [f"missing in the checkpoint: {name}" for name in sorted(wanted.keys() - given.keys())]
    problems += [f"not in the model: {name}" for name in sorted(given.keys() - wanted.keys())]
    problems += [
        f"{name}: checkpoint {tuple(given[name].shape)}, model {tuple(tensor.shape)}"
        for name, tensor in sorted(wanted.items())
        if name in given and given[name].shape != tensor.shape
    ]
    if problems:
        raise InputError(f"{files.weights}: the checkpoint does not fit this model's config: " + "; ".join(problems))
    model.load_state_dict({**own, **given})
    match_visual_scale(model)
    return skipped


@torch.no_grad()
def match_visual_scale(model: RegionalMMT) -> float:
    """Scale the fresh visual projection so a projected region is as long as a pre-trained word embedding.

    Regions are L2-normalised, and PyTorch's default init maps a unit vector to a token of length ~0.5,
    while pre-trained source embeddings are ~20x longer: the visual token would start as a whisper the
    pre-trained encoder learnt to ignore, and a short fine-tuning never makes the threads differ. For a
    unit vector x with random direction E|Wx|^2 = |W|_F^2 / D, so W is scaled to make sqrt of that equal the
    mean embedding norm; the bias starts at 0.

    Returns:
        The scale applied to the weight.
    """
    weight, bias = model.region_proj.weight, model.region_proj.bias
    embedding_norm = model.src_embedding.weight.norm(dim=1).mean()
    projected_norm = weight.norm() / weight.size(1) ** 0.5
    scale = float(embedding_norm / projected_norm)
    weight.mul_(scale)
    bias.zero_()
    return scale
