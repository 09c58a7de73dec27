"""Device and precision: resolved once at a flow's edge, then handed to tasks as plain strings.

Tasks may run in other processes (Dask workers), so they rebuild the torch device and the autocast context
from those strings with these functions instead of receiving objects that do not pickle.
"""

from __future__ import annotations

import contextlib
from typing import Literal

import torch

Precision = Literal["fp32", "bf16", "fp16"]

AUTOCAST_DTYPES: dict[str, torch.dtype | None] = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


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


def device_name(name: str) -> str:
    """The concrete device string for ``name`` (``auto`` resolved), to pass to tasks."""
    return str(resolve_device(name))


def autocast(device: torch.device, precision: Precision) -> contextlib.AbstractContextManager[object]:
    """Mixed precision on CUDA for bf16/fp16; fp32 (and any precision on CPU) runs without autocast."""
    dtype = AUTOCAST_DTYPES[precision]
    if dtype is None or device.type != "cuda":
        return contextlib.nullcontext()
    return torch.autocast(device_type="cuda", dtype=dtype)
