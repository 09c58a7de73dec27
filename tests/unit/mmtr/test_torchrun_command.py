"""The torchrun command line a training stage starts itself with (mmtr.stage.torchrun_command)."""

from __future__ import annotations

import sys

import pytest

from mmtr.params import DistributedParams
from mmtr.stage import torchrun_command


def test_one_machine_gets_a_standalone_rendezvous_and_the_stage_arguments_unchanged() -> None:
    command = torchrun_command(
        DistributedParams(4, 1, None, parallel_directions=True), "flows.train_retrieval", ["--params", "p.yaml"]
    )
    assert command == [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node=4",
        "--nnodes=1",
        "--standalone",
        "-m",
        "flows.train_retrieval",
        "--params",
        "p.yaml",
    ]


def test_several_machines_meet_at_the_endpoint_under_the_dvc_stage_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DVC_STAGE", "train_mmt@de")
    command = torchrun_command(
        DistributedParams(8, 2, "node01:29500", parallel_directions=True), "flows.train_mmt", ["--target", "de"]
    )
    assert command[3:8] == [
        "--nproc-per-node=8",
        "--nnodes=2",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=node01:29500",
        "--rdzv-id=train_mmt@de",
    ]
    assert "--standalone" not in command
    assert command[-4:] == ["-m", "flows.train_mmt", "--target", "de"]
    assert DistributedParams(8, 2, "node01:29500", parallel_directions=True).processes == 16
