"""How a stage's flow run is named and tagged in the Prefect UI (DVC exports DVC_STAGE, and DVC_EXP_NAME for
experiments, to every stage command)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from mmtr.stage import git_commit, run_name, run_tags

REPO = Path(__file__).resolve().parents[3]


def test_runs_are_named_after_the_dvc_stage_and_tagged_with_experiment_and_commit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("DVC_STAGE", raising=False)
    monkeypatch.delenv("DVC_EXP_NAME", raising=False)
    monkeypatch.delenv("MMTR_PIPELINE_RUN_ID", raising=False)
    monkeypatch.chdir(REPO)
    assert run_name("train_retrieval") == "train_retrieval"  # run by hand: the stage's own name
    head = subprocess.run(
        ["git", "rev-parse", "--short=10", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert git_commit() in (head, f"{head}+dirty")
    assert run_tags("train_retrieval") == ["stage:train_retrieval", f"commit:{git_commit()}"]
    monkeypatch.setenv("DVC_STAGE", "train_retrieval@san-mmt_f-all")
    monkeypatch.setenv("DVC_EXP_NAME", "table1")
    assert run_name("train_retrieval") == "train_retrieval@san-mmt_f-all"
    assert run_tags("train_retrieval")[:3] == [
        "stage:train_retrieval",
        "dvc:train_retrieval@san-mmt_f-all",
        "exp:table1",
    ]


def test_outside_a_git_repository_there_is_no_commit_tag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    assert git_commit() is None
    assert not any(tag.startswith("commit:") for tag in run_tags("generate"))
