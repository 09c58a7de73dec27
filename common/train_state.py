"""Resumable training state: one file per training run, written atomically after every finished epoch.

A long run that is killed (pre-empted, out of time, ``kill -9``) starts again from its last finished epoch instead
of epoch 1. The state holds everything the next epoch depends on: weights, optimiser, loss scaler, the random-number
generators (torch's, CUDA's and the run's numpy generator), counters and the early-stopping bookkeeping. Restored, it
makes the rest of the run take exactly the steps the uninterrupted run takes, so on the CPU the resumed run ends with
the same bytes.

The file lives under ``paths.work`` (not versioned), never among a stage's DVC outputs. It carries a fingerprint of
what the run depends on (configuration, seed, data); a state with another fingerprint is ignored, with a log line
that says so, because it belongs to another run. The trainer removes it once the run's outputs are written.

Loading uses ``torch.load(weights_only=True)``: tensors, numbers, strings, lists and dicts only, never pickled code.
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
from common.files import atomic_path

logger = logging.getLogger(__name__)

PathLike = str | os.PathLike[str]
FINGERPRINT_KEY = "fingerprint"


def fingerprint(*parts: object) -> str:
    """A sha256 of ``parts`` as canonical JSON (dataclasses and paths as their ``repr``/``str``)."""
    text = json.dumps(parts, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class ResumePoint:
    """Where one training run keeps its state, and what it must match to be resumed.

    Attributes:
        path: The state file (``<paths.work>/<stage>/<run>.pt``).
        fingerprint: What the run depends on (:func:`fingerprint`); a stored state with another is not resumed.
    """

    path: Path
    fingerprint: str

    def save(self, state: dict[str, Any]) -> None:
        """Write ``state`` (plus the fingerprint) atomically: a kill during the write leaves the previous state."""
        with atomic_path(self.path) as tmp:
            torch.save({**state, FINGERPRINT_KEY: self.fingerprint}, tmp)

    def load(self) -> dict[str, Any] | None:
        """The stored state, or None when there is none or it belongs to another run (logged).

        Raises:
            InputError: the file exists but cannot be read (truncated or not a state file); it names the file
                and how to start afresh.
        """
        if not self.path.is_file():
            return None
        try:
            state = torch.load(self.path, map_location="cpu", weights_only=True)
        except Exception as error:  # torch raises RuntimeError, pickle.UnpicklingError, EOFError, ...
            raise InputError(
                f"{self.path}: unreadable resume state ({type(error).__name__}: {error}); delete it to start this "
                "training from epoch 1"
            ) from error
        if not isinstance(state, dict) or state.get(FINGERPRINT_KEY) != self.fingerprint:
            logger.info("%s: resume state of another configuration or data; starting from epoch 1", self.path)
            return None
        return state

    def clear(self) -> None:
        """Remove the state (the run's outputs are written; nothing is left to resume)."""
        self.path.unlink(missing_ok=True)


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
