"""`mmtr grid --jobs 2` on a tiny project: the retrieval runs are trained by the DVC queue's workers, and the
gathered workspace (dvc.lock, metrics, report) is the one a serial `dvc repro` leaves in a copy of the project."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from mmtr.dvc_yaml import update_dvc_yaml
from mmtr.grid import plan
from tests.flows.helpers import REPO, commit, copy_project_code, run, tiny_params_tree, write_params

pytestmark = [pytest.mark.slow, pytest.mark.flow]

RUNS = ("san-none-all", "san-mmt_f-all")


def lock_entries(root: Path) -> dict[str, dict[str, object]]:
    """Every stage's dvc.lock entry, its outputs by path (their md5s)."""
    stages = yaml.safe_load((root / "dvc.lock").read_text(encoding="utf-8"))["stages"]
    return {name: {out["path"]: out["md5"] for out in entry["outs"]} for name, entry in stages.items()}


@pytest.fixture
def project(tmp_path: Path, prefect_api_url: str) -> tuple[Path, dict[str, str]]:
    root = tmp_path / "grid"
    root.mkdir()
    copy_project_code(root)
    tree = tiny_params_tree()
    tree["retrieval"]["models"] = ["san"]
    write_params(root / "params.yaml", tree)
    update_dvc_yaml(root / "params.yaml")
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "PREFECT_API_URL": prefect_api_url,
        "PREFECT_FLOWS_HEARTBEAT_FREQUENCY": "30",
        "OMP_NUM_THREADS": "1",  # the same threads in the serial copy and the queue's workers: the same floats
    }
    env.pop("PYTHONPATH", None)
    for command in (["git", "init", "-q"], ["dvc", "init", "-q"], ["dvc", "config", "core.analytics", "false"]):
        run(command, root, env)
    shutil.copytree(REPO / ".dvc" / "plots", root / ".dvc" / "plots")
    commit(root, env, "code and params")
    return root, env


def test_grid_trains_on_the_queue_and_gathers_what_a_serial_repro_gives(
    project: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    root, env = project
    stages = plan(root / "params.yaml")
    assert stages.runs == tuple(f"train_retrieval@{run}" for run in RUNS)
    assert set(stages.upstream) == {"features@synthetic", "augment", "translate_queries"}
    run(["dvc", "repro", *stages.upstream], root, env)  # built once, then copied: both sides train from the same
    commit(root, env, "upstream stages")
    serial = tmp_path / "serial"
    shutil.copytree(root, serial, symlinks=True)
    serial_out = run(["dvc", "repro"], serial, env)
    assert all(f"Running stage 'train_retrieval@{name}'" in serial_out for name in RUNS)

    out = run([sys.executable, "-m", "mmtr.cli", "grid", "--jobs", "2"], root, env)
    assert "grid: 2 of 2 retrieval runs to train, 2 at a time" in out
    assert "grid: 2 done, 0 running, 0 queued, 0 failed" in out
    # the queue trained them: the closing `dvc repro` found them done and ran what they do not need
    assert "Running stage 'train_retrieval" not in out
    assert all(f"Stage 'train_retrieval@{name}' didn't change, skipping" in out for name in RUNS)
    assert "Running stage 'report'" in out and "Running stage 'export'" in out
    assert "grid: the report is in data/reports/" in out
    queue = run(["dvc", "queue", "status"], root, env)
    assert all(any(name in line and "Success" in line for line in queue.splitlines()) for name in RUNS), queue
    logs = run(["dvc", "queue", "logs", RUNS[0]], root, env)
    assert f"Running stage 'train_retrieval@{RUNS[0]}'" in logs

    gathered, expected = lock_entries(root), lock_entries(serial)
    assert gathered == expected  # every stage's output hashes, the runs' models and metrics and the report
    for name in RUNS:
        for suffix in (".json", ".notes.json", ".history.tsv"):
            path = f"data/metrics/retrieval/{name}{suffix}"
            assert (root / path).read_bytes() == (serial / path).read_bytes(), path
    assert (root / "data/reports/results.md").read_text() == (serial / "data/reports/results.md").read_text()
    assert "Running stage" not in run(["dvc", "repro"], root, env)  # nothing left to do
    assert "Running stage" not in run([sys.executable, "-m", "mmtr.cli", "grid"], root, env)

    # a run that fails is named with the end of its log, and nothing of it is gathered
    code = root / "flows" / "train_retrieval.py"
    future = "from __future__ import annotations\n"
    broken = f'{future}raise SystemExit("the retrieval code is broken")\n'
    code.write_text(code.read_text(encoding="utf-8").replace(future, broken))
    lock_before = (root / "dvc.lock").read_text(encoding="utf-8")
    failed = subprocess.run(
        [sys.executable, "-m", "mmtr.cli", "grid", "--jobs", "2"], cwd=root, env=env, capture_output=True, text=True
    )
    assert failed.returncode == 2, failed.stdout + failed.stderr
    for name in RUNS:
        assert f"grid: train_retrieval@{name} failed (experiment {name}); the end of its log:" in failed.stderr
    assert "  the retrieval code is broken" in failed.stderr
    assert (
        "mmtr: error: 2 of 2 retrieval runs failed (train_retrieval@san-none-all, train_retrieval@san-mmt_f-all)"
        in failed.stderr
    )
    assert (root / "dvc.lock").read_text(encoding="utf-8") == lock_before
