"""The checkpoint ``model`` of a trained retrieval model: weights, model name and config, vocabulary, language types.

Two files (:mod:`common.checkpoints`): ``model.safetensors``, the weights, and ``model.json``, everything else (model
name, config, vocabulary, language types and weights, region size, caption length, ``extra``) with the weights
file's sha256. Functions take the checkpoint's stem path (``<run>/model``) or one of its file names; a ``model.pt``
of the earlier format (one ``torch.save`` dict that also holds the ``state_dict``) is still read, with
``torch.load(weights_only=True)``, so loading a file from elsewhere never runs pickled code. Loading checks that
the checkpoint holds the model asked for and that the weights fit its config.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Any

import torch

from common.checkpoints import read_checkpoint, write_checkpoint
from common.errors import InputError
from retrieval.model import RetrievalModel
from retrieval.vocab import Vocabulary
from retrieval.zoo.registry import UnknownModelError, build_model, make_config

PathLike = str | os.PathLike[str]
KEYS = {"model", "config", "vocab", "type_names", "type_weights", "region_dim", "max_len", "state_dict", "extra"}
MODEL = "model"  # the checkpoint's stem in a run folder: model.safetensors + model.json
KIND = "retrieval checkpoint"


@dataclass
class LoadedModel:
    """Attributes:
    name: Registry name of the model.
    model: The model, in eval mode, on the requested device.
    vocab: Its vocabulary (and languages).
    type_names: Language types it was trained with.
    max_len: Longest caption in tokens.
    extra: What training stored beside the weights (history, feature store identity).
    """

    name: str
    model: RetrievalModel
    vocab: Vocabulary
    type_names: tuple[str, ...]
    max_len: int
    extra: dict[str, Any]


def save_retrieval(
    path: PathLike,
    model: RetrievalModel,
    *,
    config: Any,
    vocab: Vocabulary,
    type_names: tuple[str, ...],
    type_weights: list[float],
    region_dim: int,
    max_len: int,
    extra: dict[str, Any],
) -> None:
    """Write everything :func:`load_retrieval` needs, atomically, as ``<stem>.safetensors`` and ``<stem>.json``
    (``extra`` holds JSON values); the same model and fields give the same bytes."""
    fields = {
        "model": model.name,
        "config": asdict(config),
        "vocab": vocab.to_dict(),
        "type_names": list(type_names),
        "type_weights": list(type_weights),
        "region_dim": region_dim,
        "max_len": max_len,
        "extra": extra,
    }
    write_checkpoint(path, model.state_dict(), fields)


def load_retrieval(path: PathLike, *, device: torch.device, expect_model: str | None = None) -> LoadedModel:
    """The model stored in the checkpoint ``path`` names (its stem, or one of its files).

    Raises:
        InputError: a missing or unreadable file, one that is not a retrieval checkpoint, one holding another
            model than ``expect_model``, an unknown model name, or weights that do not fit the stored config
            (missing, unexpected and mis-shaped parameters listed); the message names the file.
    """
    checkpoint, files = read_checkpoint(path, device=device, kind=KIND)
    source = files.fields  # the fields' file: .json (.pt of the earlier format)
    if not checkpoint.keys() >= KEYS:
        expected = KEYS if files.legacy else KEYS - {"state_dict"}
        raise InputError(f"{source}: not a retrieval checkpoint (expected the keys {sorted(expected)})")
    name = checkpoint["model"]
    if expect_model is not None and name != expect_model:
        raise InputError(f"{source}: holds a {name!r} model, not {expect_model!r}")
    try:
        vocab = Vocabulary.from_dict(checkpoint["vocab"])
        config = make_config(name, checkpoint["config"])
        model = build_model(
            name,
            config,
            vocab_size=len(vocab),
            languages=len(vocab.languages),
            region_dim=int(checkpoint["region_dim"]),
        )
    except (UnknownModelError, ValueError, TypeError) as error:
        raise InputError(f"{source}: {error}") from error
    except KeyError as error:  # after UnknownModelError, a KeyError too
        raise InputError(f"{source}: the vocabulary lacks the key {error}") from error
    _load_weights(files.weights, model, checkpoint["state_dict"])
    model.to(device).eval()
    return LoadedModel(
        name, model, vocab, tuple(checkpoint["type_names"]), int(checkpoint["max_len"]), dict(checkpoint["extra"])
    )


def _load_weights(path: PathLike, model: RetrievalModel, state: dict[str, torch.Tensor]) -> None:
    own = model.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    shapes = [
        f"{key}: {tuple(state[key].shape)} vs {tuple(own[key].shape)}"
        for key in sorted(set(own) & set(state))
        if state[key].shape != own[key].shape
    ]
    if missing or unexpected or shapes:
        raise InputError(
            f"{path}: weights do not fit a {model.name!r} model of the stored config; "
            f"missing {missing[:10]}, unexpected {unexpected[:10]}, mis-shaped {shapes[:10]}"
        )
    model.load_state_dict(state)
