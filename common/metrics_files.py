"""Metrics files that hold numbers only, with their notes in a sibling file.

DVC reads a metrics file as a tree of numbers (``dvc metrics show``/``diff``, ``dvc exp show``): a string, a list or
a null there becomes a column of its own that compares nothing. So a stage's metrics are written in two files:
``<stem>.json`` holds every number (int or float) at its key path, and ``<stem>.notes.json`` beside it holds
everything else at its key path (sacreBLEU signatures, the reason a metric could not be computed, the seeds of the
replicates), declared as a plain output. :func:`read_metrics` joins them back into the tree that was written.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from common.files import read_json, write_json

NOTES_SUFFIX = ".notes.json"


def notes_path(metrics_path: str | os.PathLike[str]) -> Path:
    """``<folder>/<stem>.notes.json`` beside ``<folder>/<stem>.json``."""
    path = Path(metrics_path)
    return path.with_name(path.name.removesuffix(".json") + NOTES_SUFFIX)


def is_notes_file(path: str | os.PathLike[str]) -> bool:
    return Path(path).name.endswith(NOTES_SUFFIX)


def split_numbers(tree: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the numbers of ``tree``, everything else), each at its key path; mappings are split key by key, and a
    mapping that holds no number (an empty one too) goes whole to the second tree."""
    numbers: dict[str, Any] = {}
    notes: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, Mapping) and value:
            inner_numbers, inner_notes = split_numbers(value)
            if inner_numbers:
                numbers[key] = inner_numbers
            if inner_notes:
                notes[key] = inner_notes
        elif isinstance(value, int | float) and not isinstance(value, bool):
            numbers[key] = value
        else:
            notes[key] = value
    return numbers, notes


def join_numbers(numbers: Mapping[str, Any], notes: Mapping[str, Any]) -> dict[str, Any]:
    """The tree :func:`split_numbers` was given, keys sorted as :func:`~common.files.write_json` writes them."""
    joined: dict[str, Any] = dict(numbers)
    for key, value in notes.items():
        if key in joined:
            if not (isinstance(joined[key], Mapping) and isinstance(value, Mapping)):
                raise ValueError(f"{key}: in both the numbers and the notes")
            joined[key] = join_numbers(joined[key], value)
        else:
            joined[key] = value
    return {key: _sorted(joined[key]) for key in sorted(joined)}


def _sorted(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {key: _sorted(value[key]) for key in sorted(value)}
    return value


def write_metrics(path: str | os.PathLike[str], tree: Mapping[str, Any]) -> None:
    """The numbers of ``tree`` -> ``path``, the rest -> :func:`notes_path` (``{}`` when there is none, so the file
    a stage declares always exists); each written atomically."""
    numbers, notes = split_numbers(tree)
    write_json(path, numbers)
    write_json(notes_path(path), notes)


def read_metrics(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The tree written by :func:`write_metrics` (a metrics file without notes beside it is read alone)."""
    numbers = read_json(path)
    notes_file = notes_path(path)
    notes = read_json(notes_file) if notes_file.is_file() else {}
    if not isinstance(numbers, Mapping) or not isinstance(notes, Mapping):
        raise ValueError(f"{path}: a metrics file holds a JSON object")
    return join_numbers(numbers, notes)
