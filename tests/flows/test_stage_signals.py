"""A data-parallel stage stopped by SIGTERM (as `kill` or the pipeline sends it) stops torchrun and its workers,
though the workers run in sessions of their own: no process of the stage is left."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.flows.conftest import TinyDataset
from tests.flows.test_torchrun_stages import mmt_argv, params_with

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


def _workers(launcher: int) -> list[psutil.Process]:
    """The stage's torchrun workers: its descendants running the stage module, the launcher aside."""
    with contextlib.suppress(psutil.NoSuchProcess):
        return [
            process
            for process in psutil.Process(launcher).children(recursive=True)
            if "flows.train_mmt" in " ".join(process.cmdline()) and "torch.distributed.run" not in process.cmdline()
        ]
    return []


def test_sigterm_to_a_stage_under_torchrun_leaves_no_worker(
    tiny_dataset: TinyDataset, trained: Path, tmp_path: Path, prefect_api_url: str
) -> None:
    two_ranks = params_with(tmp_path, "two", 2, tiny_dataset, mmt_only=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PREFECT_API_URL": prefect_api_url}
    stage = subprocess.Popen(
        [sys.executable, "-m", "flows.train_mmt", *mmt_argv(two_ranks, tiny_dataset, trained, tmp_path / "out")],
        cwd=REPO,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 300
    while len(_workers(stage.pid)) < 2:
        assert stage.poll() is None and time.monotonic() < deadline, "torchrun never started its two workers"
        time.sleep(0.1)
    workers = _workers(stage.pid)
    assert all(os.getsid(worker.pid) != stage.pid for worker in workers)  # out of reach of the stage's session
    started = [psutil.Process(stage.pid), *psutil.Process(stage.pid).children(recursive=True)]
    os.kill(stage.pid, signal.SIGTERM)
    assert stage.wait(timeout=120) == 128 + signal.SIGTERM
    left = []
    for process in started:
        with contextlib.suppress(psutil.NoSuchProcess):
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                left.append(" ".join(process.cmdline()))
    assert left == []
