"""Where shards run: threads locally, an existing Dask cluster with runner.kind dask, which needs the optional
`dask` extra and says so when it is not installed."""

from __future__ import annotations

import sys

import pytest

from common.errors import InputError
from mmtr.params import RunnerParams
from mmtr.stage import task_runner


def test_local_shards_run_on_threads() -> None:
    from prefect.task_runners import ThreadPoolTaskRunner

    runner = task_runner(RunnerParams("local", 3, None))
    assert isinstance(runner, ThreadPoolTaskRunner) and runner._max_workers == 3


def test_a_dask_runner_without_the_extra_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "prefect_dask", None)  # as if not installed: importing it raises ImportError
    with pytest.raises(
        InputError,
        match=r"^runner\.kind: dask needs prefect-dask and dask\.distributed \(.*\): "
        r"pip install 'mmtr\[dask\]'$",
    ):
        task_runner(RunnerParams("dask", 1, "tcp://127.0.0.1:8786"))
