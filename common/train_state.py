"""Resumable training state: one file per training run, written atomically after every finished epoch.

A long run that is killed (pre-empted, out of time, ``kill -9``) starts again from its last finished epoch instead
of epoch 1. The state holds everything the next epoch depends on: weights, optimiser, loss scaler, the random-number
generators (torch's, CUDA's and the run's numpy generator), counters and the early-stopping bookkeeping. Restored, it
makes the rest of the run take exactly the steps the uninterrupted run takes, so on the CPU the resumed run ends with
the same bytes.

The file lives under ``paths.work`` (not versioned), never among a stage's DVC outputs. It carries a fingerprint of
what the run depends on (configuration, seed, data); a state with another fingerprint is ignored, with a log line
that says so, because it belongs to another run. The trainer removes it once the run's outputs are written.

The file is a safetensors file with the rest of the state as JSON in its metadata (:mod:`common.tensor_tree`):
reading it never runs pickled code. A state of the earlier format (``<name>.pt``, a ``torch.save`` file) is not
read; its run starts from epoch 1, and clearing removes it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from common.errors import InputError
from common.tensor_tree import load_tree, save_tree

logger = logging.getLogger(__name__)

PathLike = str | os.PathLike[str]
FINGERPRINT_KEY = "fingerprint"
STATE_SUFFIX = ".state.safetensors"
LEGACY_STATE_SUFFIX = ".pt"  # the earlier torch.save format: never read, removed with the current state


def state_file(folder: Path, name: str) -> Path:
    """Where the resume state ``name`` (``seed-0``, ``finetune``) lives in ``folder``."""
    return folder / f"{name}{STATE_SUFFIX}"


def remove_state(path: Path) -> None:
    """Remove the state at ``path`` and one of the earlier format beside it."""
    path.unlink(missing_ok=True)
    legacy_state(path).unlink(missing_ok=True)


def legacy_state(path: Path) -> Path:
    return path.with_name(path.name.removesuffix(STATE_SUFFIX) + LEGACY_STATE_SUFFIX)


def fingerprint(*parts: object) -> str:
    """A sha256 of ``parts`` as canonical JSON (dataclasses and paths as their ``repr``/``str``)."""
    text = json.dumps(parts, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class ResumePoint:
    """Where one training run keeps its state, and what it must match to be resumed.

    Attributes:
        path: The state file (``<paths.work>/<stage>/<run>/<name>.state.safetensors``, :func:`state_file`).
        fingerprint: What the run depends on (:func:`fingerprint`); a stored state with another is not resumed.
    """

    path: Path
    fingerprint: str

    def save(self, state: dict[str, Any]) -> None:
        """Write ``state`` (plus the fingerprint) atomically: a kill during the write leaves the previous state."""
        save_tree(self.path, {**state, FINGERPRINT_KEY: self.fingerprint})

    def load(self) -> dict[str, Any] | None:
        """The stored state, or None when there is none or it belongs to another run (logged).

        Raises:
            InputError: the file exists but cannot be read (truncated or not a state file); it names the file
                and how to start afresh.
        """
        if not self.path.is_file():
            if legacy_state(self.path).is_file():
                logger.info(
                    "%s: resume state of the earlier pickle format, not read; starting from epoch 1",
                    legacy_state(self.path),
                )
            return None
        try:
            state = load_tree(self.path)
        except InputError as error:
            raise InputError(
                f"unreadable resume state: {error}; delete it to start this training from epoch 1"
            ) from error
        if not isinstance(state, dict) or state.get(FINGERPRINT_KEY) != self.fingerprint:
            logger.info("%s: resume state of another configuration or data; starting from epoch 1", self.path)
            return None
        return state

    def clear(self) -> None:
        """Remove the state (the run's outputs are written; nothing is left to resume)."""
        remove_state(self.path)


def rng_state(generator: np.random.Generator | None = None) -> dict[str, Any]:
    """The random-number state a training step can draw from: torch's CPU generator, every CUDA device's, and
    ``generator``'s (batch order, sampling)."""
    state: dict[str, Any] = {"torch": torch.get_rng_state()}
    if torch.cuda.is_initialized():  # CUDA in use: dropout on the GPU draws from its generators
        state["cuda"] = torch.cuda.get_rng_state_all()
    if generator is not None:
        state["numpy"] = generator.bit_generator.state
    return state


def restore_rng_state(state: dict[str, Any], generator: np.random.Generator | None = None) -> None:
    """Put back what :func:`rng_state` captured."""
    torch.set_rng_state(state["torch"])
    if "cuda" in state:  # applied now, or by torch when CUDA starts (its lazy calls)
        torch.cuda.set_rng_state_all(state["cuda"])
    if generator is not None:
        generator.bit_generator.state = state["numpy"]
