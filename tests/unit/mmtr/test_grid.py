"""`mmtr grid`'s pieces that need no DVC run: the stages it plans, the command lines it runs, the queue status it
reads, the workers' environment, and its errors before any work."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.errors import InputError
from mmtr import grid
from mmtr.dvc_yaml import update_dvc_yaml
from mmtr.grid import (
    QueueStatus,
    Task,
    commit_command,
    exp_ref,
    parse_queue_status,
    plan,
    progress_line,
    queue_command,
    start_command,
    worker_env,
)
from tests.flows.helpers import tiny_params_tree, write_params

STATUS = """\
Task     Name            Created    Status
3e001b6  san-none-all    10:24 AM   Running
1f6843f  san-mmt_f-all   10:24 AM   Queued
10adb0d  vsepp-none-all  10:20 AM   Success
9c2d4e1  vsepp-mt_f-all  10:20 AM   Failed

Worker status: 1 active, 1 idle
"""


def test_the_plan_is_every_retrieval_run_and_the_stages_they_read(tmp_path: Path) -> None:
    tree = tiny_params_tree()  # models san, vsepp x variants none, mmt_f x role all
    params = write_params(tmp_path / "params.yaml", tree)
    update_dvc_yaml(params)
    stages = plan(params)
    assert stages.runs == tuple(
        f"train_retrieval@{run}" for run in ("san-none-all", "san-mmt_f-all", "vsepp-none-all", "vsepp-mmt_f-all")
    )
    # the runs read the features, the augmented captions and the translated queries; `dvc repro` of these three
    # brings everything above them up to date too
    assert set(stages.upstream) == {"features@synthetic", "augment", "translate_queries"}
    assert stages.reports_folder == "data/reports"


def test_command_lines() -> None:
    assert queue_command("train_retrieval@san-none-all") == [
        *("dvc", "exp", "run", "--queue", "--single-item", "--force", "--name", "san-none-all"),
        "train_retrieval@san-none-all",
    ]
    assert start_command(4) == ["dvc", "queue", "start", "--jobs", "4"]
    assert commit_command(["train_retrieval@a-b-c"]) == ["dvc", "commit", "--force", "train_retrieval@a-b-c"]
    assert exp_ref("0220e7d0da365e4582ed6635dc68f9974a7b08f3", "san-none-all") == (
        "refs/exps/02/20e7d0da365e4582ed6635dc68f9974a7b08f3/san-none-all"
    )


def test_workers_split_the_cores_and_share_one_slots_folder(tmp_path: Path) -> None:
    env = worker_env({"PATH": "/bin"}, jobs=4, cpus=16, gpu_slots=tmp_path)
    assert env == {"PATH": "/bin", "OMP_NUM_THREADS": "4", "MMTR_GPU_SLOTS": str(tmp_path)}
    assert worker_env({}, jobs=3, cpus=2, gpu_slots=tmp_path)["OMP_NUM_THREADS"] == "1"  # at least one
    assert worker_env({"OMP_NUM_THREADS": "2"}, jobs=4, cpus=16, gpu_slots=tmp_path)["OMP_NUM_THREADS"] == "2"


def test_queue_status_and_progress() -> None:
    status = parse_queue_status(STATUS)
    assert status == QueueStatus(
        (
            Task("3e001b6", "san-none-all", "Running"),
            Task("1f6843f", "san-mmt_f-all", "Queued"),
            Task("10adb0d", "vsepp-none-all", "Success"),
            Task("9c2d4e1", "vsepp-mt_f-all", "Failed"),
        ),
        active=1,
        idle=1,
    )
    assert progress_line(status.tasks, 65.4) == "grid: 1 done, 1 running, 1 queued, 1 failed (1 min 05 s)"
    assert progress_line(status.tasks[:1], 9) == "grid: 0 done, 1 running, 0 queued, 0 failed (9 s)"
    with pytest.raises(InputError, match="printed no worker status line"):
        parse_queue_status("Task  Name  Created  Status\n")


def test_clear_errors_before_any_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    params = tmp_path / "params.yaml"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(grid.shutil, "which", lambda _: None)
    with pytest.raises(InputError, match=r"^dvc not found on PATH: activate the project's environment"):
        grid.grid(params, 2)
    monkeypatch.setattr(grid.shutil, "which", lambda _: "/usr/bin/dvc")
    with pytest.raises(InputError, match=f"^{tmp_path}: not a DVC repository \\(no .dvc folder beside params.yaml\\)"):
        grid.grid(params, 2)
    (tmp_path / ".dvc").mkdir()
    with pytest.raises(InputError, match=f"^{tmp_path}: not a git repository; queued DVC experiments need one"):
        grid.grid(params, 2)
