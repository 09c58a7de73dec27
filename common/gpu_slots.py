"""One GPU per stage process where several stage processes share a machine (queued experiments, `mmtr grid`).

A process claims a GPU by holding an exclusive lock on ``<folder>/<index>.lock`` (``fcntl.flock``). The operating
system drops the lock when the process ends, however it ends (a crash or ``kill -9`` included), so a slot is never
left taken by a process that is gone. Which GPU a stage runs on changes no output: the device setting (``auto``)
stays what DVC records.
"""

from __future__ import annotations

import fcntl
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

log = logging.getLogger(__name__)

SLOTS_ENV = "MMTR_GPU_SLOTS"  # the slots folder; `mmtr grid` sets it for its workers (default: under paths.work)
POLL_SECONDS = 2.0


@dataclass
class GpuSlot:
    """A claimed GPU: ``cuda:<index>`` is this process's until :meth:`release` (or the process's end)."""

    index: int
    handle: BinaryIO

    def release(self) -> None:
        self.handle.close()  # closing the file drops its lock


def slots_folder(work: str) -> Path:
    """Where the slot locks live: ``$MMTR_GPU_SLOTS``, else ``gpu-slots`` under ``work`` (``paths.work``), taken
    from the repository root DVC runs the stage for (``DVC_ROOT``: a queued experiment runs in a temporary copy, and
    every copy must lock the same files)."""
    if configured := os.environ.get(SLOTS_ENV):
        return Path(configured)
    return Path(os.environ.get("DVC_ROOT", ".")) / work / "gpu-slots"


def try_claim(folder: Path, count: int) -> GpuSlot | None:
    """The first of GPUs ``0..count-1`` that no other process holds, now claimed; None when all are held."""
    folder.mkdir(parents=True, exist_ok=True)
    for index in range(count):
        handle = (folder / f"{index}.lock").open("ab")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            continue
        return GpuSlot(index, handle)
    return None


def claim(folder: Path, count: int, poll: float = POLL_SECONDS) -> GpuSlot:
    """The first free GPU of ``count``, waiting (polling every ``poll`` seconds) while every one is held: more
    workers than GPUs take turns instead of sharing a GPU's memory."""
    waited = False
    while (slot := try_claim(folder, count)) is None:
        if not waited:
            log.info("all %d GPUs are held by other stages (locks in %s): waiting for one", count, folder)
            waited = True
        time.sleep(poll)
    return slot


_HELD: dict[Path, GpuSlot] = {}  # this process's claim per folder, kept until the process ends


def held_gpu(folder: Path, count: int) -> int:
    """This process's GPU: claimed on the first call (:func:`claim`), the same index on every later one."""
    if folder not in _HELD:
        _HELD[folder] = claim(folder, count)
        log.info("this stage runs on cuda:%d (lock %s)", _HELD[folder].index, folder / f"{_HELD[folder].index}.lock")
    return _HELD[folder].index
