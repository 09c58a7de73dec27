"""kill -9 in the middle of train_retrieval's training, rerun: the second replicate resumes after its last finished
epoch, the first (finished before the kill) is not trained again, and every output is byte-identical to that of an
uninterrupted run; the training states are gone at the end."""

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
from tests.flows.helpers import REPO, tiny_params_tree, write_params
from tests.flows.test_stage_kill import _tree_bytes, kill_when

pytestmark = [pytest.mark.slow, pytest.mark.flow]
RUN, EPOCHS, KILL_AFTER = "san-mmt_f-all", 6, 2


def command(trained: Path, params: Path, root: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "flows.train_retrieval",
        *flags(
            params=params,
            model="san",
            variant="mmt_f",
            role="all",
            augmented=trained / "augmented",
            store=trained / "features" / "compact",
            word_vectors=REPO / "data/raw/word-vectors",
            queries=trained / "queries",
            out=root / "models" / RUN,
            metrics=root / "metrics" / f"{RUN}.json",
            work=root / "work",
        ),
    ]


def saved_epoch(state: Path) -> int:
    """The last finished epoch of a training state on disk (0: none yet); a finished state counts as the end."""
    if not state.is_file():
        return 0
    saved = load_tree(state)
    return EPOCHS if saved["finished"] else int(saved["epoch"])


def test_train_retrieval_killed_mid_training_resumes_to_the_same_outputs(
    trained: Path, tiny_dataset: TinyDataset, tmp_path: Path, prefect_api_url: str
) -> None:
    tree = tiny_params_tree()
    tree["retrieval"]["replicates"] = 2
    tree["retrieval"]["train"].update(epochs=EPOCHS)
    params = write_params(tmp_path / "params.yaml", tree)
    env = {**os.environ, "PREFECT_API_URL": prefect_api_url}
    whole, killed = tmp_path / "whole", tmp_path / "killed"

    started = time.perf_counter()
    subprocess.run(command(trained, params, whole), cwd=REPO, env=env, check=True, capture_output=True)
    uninterrupted = time.perf_counter() - started

    state = killed / "work" / RUN / "seed-1.state.safetensors"  # the second replicate: the first is finished by then
    started = time.perf_counter()
    kill_when(command(trained, params, killed), lambda: saved_epoch(state) >= KILL_AFTER, env)
    killed_after = time.perf_counter() - started
    epoch = saved_epoch(state)
    assert KILL_AFTER <= epoch < EPOCHS, f"the kill came too late to test resuming (after epoch {epoch})"
    assert load_tree(killed / "work" / RUN / "seed-0.state.safetensors")["finished"]
    assert not (killed / "models" / RUN).exists() and not (killed / "metrics" / f"{RUN}.json").exists()

    started = time.perf_counter()
    rerun = subprocess.run(
        command(trained, params, killed), cwd=REPO, env=env, check=True, capture_output=True, text=True
    )
    resumed = time.perf_counter() - started
    log = rerun.stdout + rerun.stderr
    assert f"{RUN} seed 1: resuming after epoch {epoch} of {EPOCHS} from {state}" in log
    assert f"{RUN} seed 0: trained before (stopped after epoch {EPOCHS} of {EPOCHS})" in log
    assert f"{RUN} seed 1 · epoch {epoch + 1}/{EPOCHS} ·" in log and f"{RUN} seed 1 · epoch {epoch}/" not in log
    assert f"{RUN} seed 0 · epoch" not in log

    for folder in ("models", "metrics"):
        expected = _tree_bytes(whole / folder)
        assert _tree_bytes(killed / folder) == expected, folder
    names = set(_tree_bytes(whole / "metrics")) | set(_tree_bytes(whole / "models"))
    assert {f"{RUN}.json", f"{RUN}.history.tsv", f"{RUN}/model.safetensors", f"{RUN}/model.json"} <= names
    assert {f"{RUN}/replicates/seed-1/model.safetensors", f"{RUN}/test-metrics.json"} <= names
    assert not (whole / "work" / RUN).exists() and not (killed / "work" / RUN).exists(), "states left behind"

    timings = {"uninterrupted_s": uninterrupted, "killed_after_s": killed_after, "resumed_s": resumed}
    print("resume timings", json.dumps({"epochs": EPOCHS, "killed_after_epoch": epoch, **timings}))
