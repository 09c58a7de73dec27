"""Device and precision resolution."""

from __future__ import annotations

import pickle

import pytest
import torch

from common.checks import SettingError
from common.runtime import Runtime, autocast, resolve_device


def test_cpu_and_auto_resolve() -> None:
    assert resolve_device("cpu") == torch.device("cpu")
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto").type == expected
    assert Runtime.resolve("auto", "bf16") == Runtime("auto", "bf16")  # each process resolves it where it runs
    assert Runtime.resolve("auto", "bf16").torch_device().type == expected
    assert Runtime.resolve("cpu", "fp32") == Runtime("cpu", "fp32")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error of a CPU-only machine")
def test_cuda_without_a_gpu_is_a_clear_error() -> None:
    with pytest.raises(RuntimeError, match="device: 'cuda' asked for, but this torch build sees no CUDA device"):
        resolve_device("cuda")


def test_autocast_is_a_no_op_on_cpu() -> None:
    with autocast(torch.device("cpu"), "bf16"):
        product = torch.ones(2, 2) @ torch.ones(2, 2)
    assert product.dtype == torch.float32
    with Runtime("cpu", "fp16").autocast()():
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.float32


def test_runtime_is_a_small_picklable_value_with_a_checked_device() -> None:
    runtime = Runtime("cpu", "fp32")
    assert pickle.loads(pickle.dumps(runtime)) == runtime and hash(runtime) == hash(Runtime("cpu", "fp32"))
    assert runtime.torch_device() == torch.device("cpu")
    with pytest.raises(SettingError, match=r"device: got 'tpu', allowed: auto, cpu, cuda, cuda:<index>"):
        Runtime("tpu", "fp32")


@pytest.mark.gpu
def test_bf16_autocast_on_cuda() -> None:
    device = resolve_device("cuda")
    with autocast(device, "bf16"):
        product = torch.ones(2, 2, device=device) @ torch.ones(2, 2, device=device)
    assert product.dtype == torch.bfloat16
