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


def _git(root: Path, *args: str) -> str:
    command = ["git", "-c", "user.name=Test", "-c", "user.email=test@example.org", *args]
    return subprocess.run(command, cwd=root, capture_output=True, text=True, check=True).stdout.strip()


def test_the_pipelines_own_writes_leave_the_commit_clean(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """dvc.lock, declared outputs and metrics, DVC's .gitignore entries and a dvc.yaml regenerated from params.yaml
    are the pipeline's writes: a commit tagged +dirty for them would be +dirty from the second stage of every run."""
    from mmtr.commit import pipeline_outputs
    from mmtr.dvc_yaml import update_dvc_yaml
    from tests.flows.helpers import tiny_params_tree, write_params

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    write_params(tmp_path / "params.yaml", tiny_params_tree())
    update_dvc_yaml(Path("params.yaml"))
    outputs = pipeline_outputs(Path("params.yaml"))
    assert {"dvc.lock", "dvc.yaml", "data/metrics/augment.json", "data/reports", "data/.gitignore"} <= set(outputs)
    assert "data/metrics/retrieval/san-mmt_f-all.history.tsv" in outputs  # a learning curve
    assert len(outputs) == len(set(outputs))
    tracked = ["dvc.lock", "data/metrics/augment.json", "data/reports/results.md", "data/.gitignore", "code.py"]
    for name in tracked:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("committed\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-q", "-m", "code and first results")
    head = _git(tmp_path, "rev-parse", "--short=10", "HEAD")
    assert git_commit() == head

    for name in tracked[:4]:  # what a `dvc repro` rewrites
        (tmp_path / name).write_text("rewritten by a stage\n")
    _git(tmp_path, "mv", "data/reports/results.md", "data/reports/renamed.md")
    (tmp_path / "dvc.yaml").unlink()
    update_dvc_yaml(Path("params.yaml"))  # regenerated: the same DAG
    assert git_commit() == head
    with (tmp_path / "dvc.yaml").open("a") as dvc_yaml:
        dvc_yaml.write("# edited by hand\n")
    assert git_commit() == f"{head}+dirty"  # a hand-edited dvc.yaml is not what params.yaml gives
    update_dvc_yaml(Path("params.yaml"))
    assert git_commit() == head
    (tmp_path / "code.py").write_text("edited\n")
    assert git_commit() == f"{head}+dirty"
    _git(tmp_path, "checkout", "code.py")
    write_params(tmp_path / "params.yaml", tiny_params_tree(dataset="renamed"))  # a setting is code too
    assert git_commit() == f"{head}+dirty"


def test_changed_paths_reads_both_names_of_a_rename() -> None:
    from mmtr.commit import changed_paths

    porcelain = " M dvc.lock\0R  new name.md\0old name.md\0 D data/metrics/x.json\0"
    assert changed_paths(porcelain) == ["dvc.lock", "new name.md", "old name.md", "data/metrics/x.json"]
