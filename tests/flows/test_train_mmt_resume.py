"""kill -9 during the MMT's fine-tuning, then the same command again: the rerun resumes pre-training's finished
result and fine-tuning after its last finished epoch, and writes the bytes an uninterrupted run writes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from common.tensor_tree import load_tree
from tests.command_line import flags
from tests.flows.conftest import TinyDataset
from tests.flows.test_features_flow import run_features
from tests.flows.test_stage_kill import REPO, kill_when

pytestmark = [pytest.mark.slow, pytest.mark.flow]
FINETUNE_EPOCHS = 3
KILL_AFTER_EPOCH = 2


def tree_bytes(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


def run_to_end(command: list[str], env: dict[str, str]) -> str:
    """Run ``command``; its log (stdout and stderr), or a failure that shows the log's end."""
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    log = done.stdout + done.stderr
    assert done.returncode == 0, f"exit status {done.returncode}:\n{log[-5000:]}"
    return log


def state_epoch(path: Path) -> int:
    """The last finished epoch of a resume state (0: none yet, or a finished fit's)."""
    if not path.is_file():
        return 0
    state = load_tree(path)  # written atomically: never half a file
    return 0 if state["finished"] else int(state["epoch"])


def test_train_mmt_killed_mid_fine_tuning_resumes_to_the_uninterrupted_outputs(
    tiny_dataset: TinyDataset, tmp_path: Path, prefect_api_url: str
) -> None:
    from tests.flows.helpers import tiny_params_tree, write_params

    store, _ = run_features(tiny_dataset, tmp_path, tiny_dataset.raw / "images", tiny_dataset.params)
    tree = tiny_params_tree(raw=tiny_dataset.raw)
    tree["mmt"]["finetune"].update(epochs=FINETUNE_EPOCHS, patience=FINETUNE_EPOCHS)
    tree["mmt"]["systems"] = ["mmt"]  # the text-only system's fine-tuning goes through the same fit: time saved
    tree["retrieval"]["translate_search"]["languages"] = []  # it would need the text-only system
    params = write_params(tmp_path / "params.yaml", tree)
    env = {**os.environ, "PREFECT_API_URL": prefect_api_url}

    def command(run: str) -> list[str]:
        return [
            sys.executable,
            "-m",
            "flows.train_mmt",
            *flags(
                params=params,
                target="de",
                prepared=tiny_dataset.prepared,
                store=store,
                models=tmp_path / run / "models",
                parallel=tiny_dataset.parallel,
                mt_models=tmp_path / "mt-models",
                metrics=tmp_path / run / "metrics",
                work=tmp_path / run / "work",
            ),
        ]

    started = time.perf_counter()
    run_to_end(command("uninterrupted"), env)
    uninterrupted = time.perf_counter() - started

    work = tmp_path / "killed" / "work"
    fine_tuning = work / "mmt-en-de" / "finetune.state.safetensors"
    started = time.perf_counter()
    kill_when(command("killed"), lambda: state_epoch(fine_tuning) >= KILL_AFTER_EPOCH, env)
    killed_after = time.perf_counter() - started
    assert state_epoch(fine_tuning) < FINETUNE_EPOCHS, "killed mid-run, before fine-tuning's last epoch"
    assert (work / "mmt-en-de" / "pretrain.state.safetensors").is_file(), (
        "pre-training's finished state is kept for the rerun"
    )

    started = time.perf_counter()
    log = run_to_end(command("killed"), env)
    resumed = time.perf_counter() - started
    epoch = state_epoch_logged(log)
    timings = {"uninterrupted_s": uninterrupted, "killed_after_s": killed_after, "resumed_s": resumed}
    print("resume timings", json.dumps({"epochs": FINETUNE_EPOCHS, "killed_after_epoch": epoch, **timings}))
    assert f"mmt-en-de finetune: resuming after epoch {epoch} of {FINETUNE_EPOCHS}" in log
    assert "mmt-en-de pretrain: finished before, after epoch 1" in log

    for folder in ("models", "metrics"):
        expected, got = tree_bytes(tmp_path / "uninterrupted" / folder), tree_bytes(tmp_path / "killed" / folder)
        assert sorted(got) == sorted(expected)
        assert [name for name in expected if got[name] != expected[name]] == []
    assert not any(work.rglob("*.state.safetensors"))
    assert not any((tmp_path / "uninterrupted" / "work").rglob("*.state.safetensors"))


def state_epoch_logged(log: str) -> int:
    """The epoch the rerun says it resumes after (the kill may come an epoch later than the first poll saw)."""
    marker = "mmt-en-de finetune: resuming after epoch "
    assert marker in log, f"no resume line in the rerun's log:\n{log[-3000:]}"
    epoch = int(log.split(marker, 1)[1].split()[0])
    assert KILL_AFTER_EPOCH <= epoch < FINETUNE_EPOCHS
    return epoch
