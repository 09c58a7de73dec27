"""What every loader checks before it trusts a weights file, whatever the backend.

- The tensors fit the model its folder's metadata builds: none missing, none unexpected, every shape the same
  (:func:`check_fits`). Loading anything less would leave layers randomly initialised, or ignore trained ones.
- Every value is finite (:func:`check_finite_once`): NaN weights (a diverged run saved as a consistent pair) would
  rank or translate by NaN. The scan runs once per version of the weights, as the feature stores' does: a success is
  remembered for this process and in the user cache folder, under a key the caller derives from the weights file
  (its sha256 where the reader hashes it anyway, else its path, size, modification time and inode).
- A pickle-capable file (a ``.pt`` of the earlier format, a Hugging Face ``pytorch_model.bin``) is read with
  ``torch.load(weights_only=True)``, which builds tensors, numbers, strings, lists and dicts only; anything else is
  refused in one line that says why and how to convert the file (:func:`load_pickled`, :func:`pickle_refusal`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import torch

from common.errors import InputError
from common.files import user_cache_dir

LISTED = 5  # parameter names shown per kind of problem
CONVERT_HINT = "convert it to safetensors where you trust it (docs/errors.md, 'Pickle-capable files')"
_VERIFIED: set[str] = set()  # weights (by key) found finite in this process


def first_names(names: Iterable[str], listed: int = LISTED) -> str:
    """``a, b, c`` for the first ``listed`` names (sorted), with ``and N more`` after them."""
    ordered = sorted(names)
    shown = ", ".join(ordered[:listed])
    return shown + (f" and {len(ordered) - listed} more" if len(ordered) > listed else "")


def fit_problems(
    missing: Iterable[str], unexpected: Iterable[str], misshaped: Mapping[str, tuple[tuple[int, ...], tuple[int, ...]]]
) -> list[str]:
    """The parts of a does-not-fit message: ``missing N (names)``, ``unexpected N (names)``, ``mis-shaped N (name:
    weights (..), model (..))``, each with the first few names; empty when everything fits."""
    missing, unexpected = sorted(missing), sorted(unexpected)
    problems = []
    if missing:
        problems.append(f"missing {len(missing)} ({first_names(missing)})")
    if unexpected:
        problems.append(f"unexpected {len(unexpected)} ({first_names(unexpected)})")
    if misshaped:
        shown = [
            f"{name}: weights {misshaped[name][0]}, model {misshaped[name][1]}" for name in sorted(misshaped)[:LISTED]
        ]
        more = f" and {len(misshaped) - LISTED} more" if len(misshaped) > LISTED else ""
        problems.append(f"mis-shaped {len(misshaped)} ({'; '.join(shown)}{more})")
    return problems


def check_fits(where: object, stored: Mapping[str, torch.Tensor], own: Mapping[str, torch.Tensor], what: str) -> None:
    """Refuse ``stored`` tensors that are not exactly ``own``'s names and shapes (a model's ``state_dict()``).

    Raises:
        InputError: ``<where>: the weights do not fit <what>: missing N (...); unexpected N (...); mis-shaped N (...)``.
    """
    misshaped = {
        name: (tuple(stored[name].shape), tuple(tensor.shape))
        for name, tensor in own.items()
        if name in stored and stored[name].shape != tensor.shape
    }
    problems = fit_problems(own.keys() - stored.keys(), stored.keys() - own.keys(), misshaped)
    if problems:
        raise InputError(f"{where}: the weights do not fit {what}: {'; '.join(problems)}")


def non_finite(tensors: Mapping[str, torch.Tensor]) -> tuple[str, int] | None:
    """The first tensor (by name) holding NaN or infinity, with how many such values it holds; None if none."""
    for name in sorted(tensors):
        tensor = tensors[name]
        if tensor.is_floating_point() or tensor.is_complex():
            bad = int((~torch.isfinite(tensor)).sum())
            if bad:
                return name, bad
    return None


def check_finite_once(where: object, tensors: Mapping[str, torch.Tensor], key: str) -> None:
    """Refuse weights holding NaN or infinity; scanned once per ``key`` (a version of the weights file).

    Raises:
        InputError: names the file, the first such tensor and how many values of it are not finite.
    """
    marker = user_cache_dir() / "verified-weights" / hashlib.sha256(key.encode()).hexdigest()[:32]
    if key in _VERIFIED or marker.is_file():
        return
    found = non_finite(tensors)
    if found is not None:
        name, count = found
        raise InputError(
            f"{where}: {name} holds {count} NaN or infinite value{'s' if count != 1 else ''} (weights of a diverged "
            "run or a damaged file): retrain the model or restore its weights"
        )
    _VERIFIED.add(key)
    with contextlib.suppress(OSError):  # an unwritable cache only costs a scan next time
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()


def file_version(path: Path) -> str:
    """A key for :func:`check_finite_once` from the file's path, size, modification time and inode: a file
    rewritten or replaced gets another key (cheap for weights too large to hash at every load)."""
    stat = path.stat()
    return f"{path.resolve()}|{stat.st_size}:{stat.st_mtime_ns}:{stat.st_ino}"


def refused_global(error: BaseException) -> str | None:
    """What ``torch.load(weights_only=True)`` refused to build (``Unsupported global: GLOBAL builtins.eval ...``);
    None for any other error (a corrupt or foreign file)."""
    if not isinstance(error, pickle.UnpicklingError):
        return None
    named = [line.strip() for line in str(error).splitlines() if "GLOBAL" in line]
    # torch's line names the global, then suggests allowing it: the name alone is the reason
    return named[0].removeprefix("WeightsUnpickler error: ").split(". ")[0].rstrip(".") if named else None


def error_reason(error: BaseException) -> str:
    """One line of ``error``: past torch's generic first line (``Weights only load failed...``) and its pointer to
    the documentation, up to the first sentence's end."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    specific = [line for line in lines if not line.startswith(("Weights only load failed", "Check the documentation"))]
    return (specific or lines or [type(error).__name__])[0].split(". ")[0].rstrip(".")


def pickle_refusal(path: object, error: BaseException, what: str) -> InputError:
    """The one-line error for a pickle-capable file that ``torch.load(weights_only=True)`` refused (what it refused
    and what to do) or could not read."""
    refused = refused_global(error)
    if refused is not None:
        return InputError(
            f"{path}: refused to unpickle this {what}: {refused}; a pickle can run code when it is read, so only "
            f"tensors, numbers, strings, lists and dicts are read from one: {CONVERT_HINT}"
        )
    return InputError(f"{path}: not a readable {what} ({type(error).__name__}: {error_reason(error)})")


def load_pickled(path: str | os.PathLike[str], *, what: str, map_location: Any = "cpu") -> Any:
    """``torch.load(path, weights_only=True)``; a refusal or an unreadable file is one :class:`InputError` line."""
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except Exception as error:  # torch raises UnpicklingError, RuntimeError, EOFError... for foreign files
        raise pickle_refusal(path, error, what) from error
