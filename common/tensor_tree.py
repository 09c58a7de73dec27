"""Nested states (dicts, lists and tuples of tensors, numbers and strings) as one safetensors file, no pickle.

The project's own caches and training states hold more than a flat name -> tensor map: an optimiser's state dict
keys its per-parameter state by integers and keeps betas as tuples, a numpy generator's state holds 128-bit
integers, a gallery cache holds its image ids. :func:`save_tree` writes the tensors as a safetensors file (named
``0``, ``1``, ... in the order met) and the rest of the tree as JSON in the file's metadata, with the tensors
replaced by their names and integer keys and tuples tagged so that :func:`load_tree` gives back an equal tree of the
same types. Reading never runs code: safetensors maps raw tensor bytes, JSON builds plain values.

The same tree gives the same bytes (tensors and keys in the order met), so a resumed run that rewrites its state
writes what the uninterrupted run wrote. Dicts keep their order: a training history's keys are its table's columns.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load, save_file

from common.errors import InputError
from common.files import atomic_path

PathLike = str | os.PathLike[str]
TREE_KEY = "tree"  # the metadata entry that holds the JSON skeleton
TENSOR, TUPLE, ITEMS = "$tensor", "$tuple", "$items"  # tags: a tensor's name, a tuple, a dict with non-string keys
_TAGS = (TENSOR, TUPLE, ITEMS)
_KEY_TYPES = (str, int, float, bool, type(None))


def save_tree(path: PathLike, tree: object) -> None:
    """Write ``tree`` atomically to ``path`` (a safetensors file).

    Raises:
        TypeError: a leaf that is not a tensor, number, string, bool or None (named by its place in the tree).
        StorageError: the write failed for lack of space or permission (from :func:`~common.files.atomic_path`).
    """
    tensors: dict[str, torch.Tensor] = {}
    skeleton = _encode(tree, tensors, "state")
    text = json.dumps(skeleton, separators=(",", ":"))
    with atomic_path(path) as tmp:
        save_file(tensors, str(tmp), metadata={TREE_KEY: text})


def load_tree(path: PathLike) -> Any:
    """The tree :func:`save_tree` wrote to ``path``, its tensors on the CPU.

    Raises:
        InputError: the file is not a readable safetensors file with a tree (truncated, damaged, another format).
    """
    try:
        # read whole, not memory-mapped: the tensors must not change if the file is rewritten in place later
        data = Path(path).read_bytes()
        tensors = load(data)
        header_size = int.from_bytes(data[:8], "little")
        metadata = json.loads(data[8 : 8 + header_size]).get("__metadata__") or {}
    except Exception as error:  # safetensors raises SafetensorError, OSError, ValueError for damaged files
        raise InputError(f"{path}: not a readable safetensors file ({type(error).__name__}: {error})") from error
    if TREE_KEY not in metadata:
        raise InputError(f"{path}: a safetensors file without a {TREE_KEY!r} entry in its metadata, not a stored state")
    try:
        return _decode(json.loads(metadata[TREE_KEY]), tensors)
    except (ValueError, KeyError, TypeError) as error:
        raise InputError(f"{path}: damaged state metadata ({type(error).__name__}: {error})") from error


def _encode(value: object, tensors: dict[str, torch.Tensor], where: str) -> Any:
    if isinstance(value, torch.Tensor):
        name = str(len(tensors))
        # a copy: tied or sliced tensors share storage, which safetensors refuses to write
        tensors[name] = value.detach().to("cpu", copy=True).contiguous()
        return {TENSOR: name}
    if isinstance(value, dict):
        if all(isinstance(key, str) and key not in _TAGS for key in value):
            return {key: _encode(item, tensors, f"{where}[{key!r}]") for key, item in value.items()}
        items = []
        for key, item in value.items():
            if not isinstance(key, _KEY_TYPES):
                raise TypeError(f"{where}: a dict key of type {type(key).__name__} cannot be stored")
            items.append([key, _encode(item, tensors, f"{where}[{key!r}]")])
        return {ITEMS: items}
    if isinstance(value, tuple):
        return {TUPLE: [_encode(item, tensors, f"{where}[{index}]") for index, item in enumerate(value)]}
    if isinstance(value, list):
        return [_encode(item, tensors, f"{where}[{index}]") for index, item in enumerate(value)]
    if isinstance(value, _KEY_TYPES):
        return value
    raise TypeError(f"{where}: a value of type {type(value).__name__} cannot be stored")


def _decode(value: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(value, list):
        return [_decode(item, tensors) for item in value]
    if not isinstance(value, dict):
        return value
    if TENSOR in value:
        return tensors[value[TENSOR]]
    if TUPLE in value:
        return tuple(_decode(item, tensors) for item in value[TUPLE])
    if ITEMS in value:
        return {key: _decode(item, tensors) for key, item in value[ITEMS]}
    return {key: _decode(item, tensors) for key, item in value.items()}
