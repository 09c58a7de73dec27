"""Device and precision: resolved once at a flow's edge, then handed on as a small picklable value.

Work may run in other processes (Dask workers), so :class:`Runtime` carries plain strings and rebuilds the
torch device and the autocast context wherever it is used, instead of holding objects that do not pickle.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch

from common.checks import check
from common.distributed import joined
from common.gpu_slots import held_gpu

Precision = Literal["fp32", "bf16", "fp16"]
AutocastFactory = Callable[[], AbstractContextManager[object]]

AUTOCAST_DTYPES: dict[str, torch.dtype | None] = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
DEVICE_NAMES = "auto, cpu, cuda, cuda:<index>"


def check_device(key: str, name: str) -> None:
    """A device setting: ``auto``, ``cpu``, ``cuda`` or ``cuda:<index>``."""
    check(re.fullmatch(r"auto|cpu|cuda(:\d+)?", name) is not None, key, name, DEVICE_NAMES)


def resolve_device(name: str) -> torch.device:
    """``auto`` -> CUDA when available, else CPU; an explicit CUDA device that is absent is an error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError(f"params.yaml: device: {name!r} asked for, but this torch build sees no CUDA device")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise RuntimeError(
                f"params.yaml: device: {name!r}, but only {torch.cuda.device_count()} CUDA device(s) exist"
            )
    return device


def autocast(device: torch.device, precision: Precision) -> AbstractContextManager[object]:
    """Mixed precision on CUDA for bf16/fp16; fp32 (and any precision on CPU) runs without autocast."""
    dtype = AUTOCAST_DTYPES[precision]
    if dtype is None or device.type != "cuda":
        return contextlib.nullcontext()
    return torch.autocast(device_type="cuda", dtype=dtype)


@dataclass(frozen=True)
class Runtime:
    """Where and in which precision torch work runs.

    Attributes:
        device: A device name ("cpu", "cuda:0"), or ``auto``: CUDA where the work runs has it, else the CPU
            (:meth:`torch_device` decides in each process, so a Dask worker on a GPU node uses its GPU even when the
            stage process that handed it the runtime has none).
        precision: fp32, or bf16/fp16 autocast (CUDA only).
    """

    device: str = "cpu"
    precision: Precision = "fp32"

    def __post_init__(self) -> None:
        check_device("device", self.device)

    @classmethod
    def resolve(cls, device: str, precision: Precision, gpu_slots: Path | None = None) -> Runtime:
        """The runtime of the ``device`` and ``precision`` settings: an explicit CUDA device is checked here, at the
        flow's edge (a clear error before any work); ``auto`` stays ``auto``, for each process to resolve.

        With ``gpu_slots`` (a folder), ``auto`` on a machine of several CUDA devices becomes the first GPU no other
        stage process holds, claimed for this process's life (:mod:`common.gpu_slots`): stages run side by side
        (queued experiments) take a GPU each. Under torchrun each rank has its GPU already (``LOCAL_RANK``)."""
        resolved = resolve_device(device)
        count = torch.cuda.device_count() if resolved.type == "cuda" else 0
        if device == "auto" and gpu_slots is not None and count > 1 and not joined():
            return cls(f"cuda:{held_gpu(gpu_slots, count)}", precision)
        return cls("auto" if device == "auto" else str(resolved), precision)

    def torch_device(self) -> torch.device:
        """The device; on CUDA under torchrun, this process's own GPU (``LOCAL_RANK``), whichever rank resolved the
        runtime (rank 0 hands its runtime to the others)."""
        device = resolve_device(self.device)
        if device.type == "cuda" and joined():
            return torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        return device

    def autocast(self) -> AutocastFactory:
        """A factory of fresh autocast contexts (one per forward pass)."""
        return functools.partial(autocast, self.torch_device(), self.precision)


def host_to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host tensor copied to ``device`` without the host waiting.

    A plain copy to a CUDA device synchronises its stream: the host waits for every kernel queued before it, so a
    small index tensor copied per training step makes the step wait for the previous one. A copy from pinned
    memory is queued like a kernel (the pinned block is kept until the copy is done).
    """
    if device.type != "cuda":
        return tensor.to(device)
    return tensor.pin_memory().to(device, non_blocking=True)


def cpu_threads() -> int:
    """How many CPU threads torch uses in this process."""
    return torch.get_num_threads()


def use_cpu_threads(count: int) -> None:
    """Give torch ``count`` CPU threads in this process (processes that share the cores take a part each)."""
    torch.set_num_threads(count)
