"""Model checkpoints as two files: ``<name>.safetensors`` (the tensors) and ``<name>.json`` (everything else).

A checkpoint is named by its stem path, ``<folder>/<name>``; every function here also takes one of its file
names (``<name>.safetensors`` or ``<name>.json``) or ``<name>.pt``. The ``.pt`` file is the earlier format, a
``torch.save`` dict with the tensors under ``state_dict``; it is still read, with ``torch.load(weights_only=True)``
so that a file from elsewhere never runs pickled code, when it is the file named or the only one there.

Both files are written atomically, the weights first, and reproducibly: the same tensors and fields give the
same bytes (safetensors lists the tensors in a fixed order with no time stamp; the JSON has sorted keys and ends
with a newline). The JSON records the sha256 of the weights file, so a truncated or damaged weights file, or a
pair that was not written together, is refused with an :class:`~common.files.InputError` naming the file.
Loading maps the weights file into memory (``safetensors.torch.load_file``) instead of unpickling it, and refuses
weights that hold NaN or infinity (scanned once per weights hash, :func:`common.weights.check_finite_once`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from common.errors import InputError
from common.files import atomic_path, file_sha256, read_json, write_json
from common.weights import check_finite_once, load_pickled

PathLike = str | os.PathLike[str]
WEIGHTS_SUFFIX, FIELDS_SUFFIX, LEGACY_SUFFIX = ".safetensors", ".json", ".pt"
SHA_KEY = "weights_sha256"  # the JSON's record of the weights file it belongs to
TENSORS_KEY = "state_dict"  # where the tensors are in the dict read_checkpoint returns (and in a .pt file)
_METADATA = {"format": "pt"}  # the safetensors header's metadata: what transformers writes too


@dataclass(frozen=True)
class CheckpointFiles:
    """The files of a checkpoint: the tensors and the fields; both are the ``.pt`` file of the earlier format."""

    weights: Path
    fields: Path

    @property
    def legacy(self) -> bool:
        return self.weights.suffix == LEGACY_SUFFIX


def checkpoint_stem(path: PathLike) -> Path:
    """The checkpoint's stem path: ``path`` without a ``.safetensors``, ``.json`` or ``.pt`` suffix."""
    path = Path(path)
    if path.suffix in (WEIGHTS_SUFFIX, FIELDS_SUFFIX, LEGACY_SUFFIX):
        return path.with_suffix("")
    return path


def stored_files(path: PathLike) -> CheckpointFiles:
    """The files :func:`write_checkpoint` writes for the checkpoint ``path`` names (always the current format)."""
    stem = checkpoint_stem(path)
    return CheckpointFiles(stem.with_name(stem.name + WEIGHTS_SUFFIX), stem.with_name(stem.name + FIELDS_SUFFIX))


def checkpoint_files(path: PathLike) -> CheckpointFiles:
    """The files to read for the checkpoint ``path`` names.

    A ``.pt`` path that exists is read as it is; otherwise the ``.safetensors``/``.json`` pair when either is
    there, else the ``.pt`` file beside them when that is there, else the pair (whose absence the reader reports).
    """
    path, current = Path(path), stored_files(path)
    legacy_file = checkpoint_stem(path).with_name(checkpoint_stem(path).name + LEGACY_SUFFIX)
    legacy = CheckpointFiles(legacy_file, legacy_file)
    if path.suffix == LEGACY_SUFFIX and legacy_file.is_file():
        return legacy
    if current.weights.exists() or current.fields.exists() or not legacy_file.is_file():
        return current
    return legacy


def write_checkpoint(path: PathLike, tensors: Mapping[str, torch.Tensor], fields: Mapping[str, Any]) -> CheckpointFiles:
    """Write ``tensors`` to ``<stem>.safetensors`` and ``fields`` (JSON values) to ``<stem>.json``, atomically; a
    ``<stem>.pt`` of the earlier format is removed, so the checkpoint is never read from a stale file.

    Raises:
        ValueError: ``fields`` holds ``state_dict`` or ``weights_sha256`` (names of the format itself).
        TypeError: a field that JSON cannot hold.
    """
    reserved = sorted({TENSORS_KEY, SHA_KEY} & fields.keys())
    if reserved:
        raise ValueError(f"{path}: the checkpoint fields may not be named {reserved}")
    json.dumps(dict(fields))  # a field JSON cannot hold fails here, before anything is written
    files = stored_files(path)
    # on the CPU, contiguous, each in its own memory (safetensors refuses tensors that share it)
    state = {name: tensor.detach().to("cpu", copy=True).contiguous() for name, tensor in tensors.items()}
    with atomic_path(files.weights) as tmp:
        save_file(state, tmp, metadata=_METADATA)
        sha = file_sha256(tmp)
    write_json(files.fields, {**fields, SHA_KEY: sha})
    checkpoint_stem(path).with_name(checkpoint_stem(path).name + LEGACY_SUFFIX).unlink(missing_ok=True)
    return files


def read_checkpoint(path: PathLike, *, device: torch.device, kind: str) -> tuple[dict[str, Any], CheckpointFiles]:
    """The checkpoint as one dict, its fields with the tensors (on ``device``) under ``state_dict``, and the files
    it was read from. ``kind`` (e.g. "MMT checkpoint") words the errors; the caller checks the fields.

    Raises:
        InputError: a missing file, one that is not valid JSON or not a safetensors (or ``.pt``) file, weights
            that are not the ones the JSON was written with, or that hold NaN or infinity; the message names the file.
    """
    files = checkpoint_files(path)
    if files.legacy:
        checkpoint = _read_legacy(files.weights, kind=kind)
        tensors = checkpoint.get(TENSORS_KEY)
        if isinstance(tensors, dict):
            check_finite_once(files.weights, tensors, f"sha256:{file_sha256(files.weights)}")
            if device.type != "cpu":
                checkpoint[TENSORS_KEY] = {name: tensor.to(device) for name, tensor in tensors.items()}
        return checkpoint, files
    if not files.weights.is_file():
        raise InputError(f"{files.weights}: {kind} not found")
    fields = read_fields(files, kind=kind)
    sha = file_sha256(files.weights)
    if sha != fields.pop(SHA_KEY):
        raise InputError(
            f"{files.weights}: not the weights that {files.fields.name} was written with (a damaged "
            f"or truncated file, or one of another {kind})"
        )
    try:
        tensors = load_file(files.weights, device="cpu")  # memory-mapped
    except Exception as error:  # safetensors raises its own error types for a malformed file
        raise InputError(f"{files.weights}: not a readable {kind} ({error})") from error
    check_finite_once(files.weights, tensors, f"sha256:{sha}")
    if device.type != "cpu":
        tensors = {name: tensor.to(device) for name, tensor in tensors.items()}
    return {**fields, TENSORS_KEY: tensors}, files


def read_fields(files: CheckpointFiles, *, kind: str) -> dict[str, Any]:
    """The JSON of a current-format checkpoint, ``weights_sha256`` included.

    Raises:
        InputError: the JSON is missing, invalid, not an object or records no weights hash.
    """
    if not files.fields.is_file():
        raise InputError(f"{files.fields}: {kind} not found")
    fields = read_json(files.fields)
    if not isinstance(fields, dict) or not isinstance(fields.get(SHA_KEY), str):
        raise InputError(f"{files.fields}: not {kind} fields (expected a JSON object with {SHA_KEY})")
    return fields


def update_fields(path: PathLike, fields: Mapping[str, Any], *, kind: str) -> None:
    """Replace the fields of the checkpoint ``path`` names, keeping its weights; a ``.pt`` checkpoint is written
    anew in the current format.

    Raises:
        InputError: as :func:`read_checkpoint`.
    """
    files = checkpoint_files(path)
    if files.legacy:
        tensors = read_checkpoint(files.weights, device=torch.device("cpu"), kind=kind)[0].get(TENSORS_KEY)
        if not isinstance(tensors, dict):
            raise InputError(f"{files.weights}: holds no {TENSORS_KEY} of tensors ({kind} of the earlier format)")
        write_checkpoint(files.weights, tensors, fields)
        return
    sha = read_fields(files, kind=kind)[SHA_KEY]
    write_json(files.fields, {**fields, SHA_KEY: sha})


def _read_legacy(path: Path, *, kind: str) -> dict[str, Any]:
    """A ``.pt`` checkpoint on the CPU, read with the restricted loader; its ``state_dict`` must hold tensors only."""
    checkpoint = load_pickled(path, what=kind)
    if not isinstance(checkpoint, dict):
        raise InputError(f"{path}: not a readable {kind} (it holds a {type(checkpoint).__name__}, not a dict)")
    tensors = checkpoint.get(TENSORS_KEY)
    if isinstance(tensors, dict):
        others = sorted(
            f"{name} ({type(value).__name__})" for name, value in tensors.items() if not isinstance(value, torch.Tensor)
        )
        if others:
            raise InputError(f"{path}: {TENSORS_KEY} entries that are not tensors: {', '.join(others[:5])}")
    return checkpoint
