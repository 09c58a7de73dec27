"""Every profile, end to end on tiny sizes: the stages DVC resolves from dvc.yaml and the merged params run in
DVC's order, and the report holds the profile's runs.

The stage commands run in this process (``python -m flows.X args`` -> ``flows.X.main(args)``), in the order of
DVC's own stage graph: the same commands and wiring as ``dvc repro``, without a process start per stage. As DVC's
run cache does, a stage whose command, params and input files are those of a stage an earlier profile ran (in the
same test process) gets that run's outputs instead of running again: most profiles share their upstream stages, and
each distinct stage still runs once.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import re
import shlex
import shutil
from pathlib import Path
from typing import Any

import networkx as nx
import pytest
from dvc.dependency.param import ParamsDependency
from dvc.stage import Stage

from common.metrics_files import is_notes_file, read_metrics
from mmt.augment import VARIANTS
from mmtr.dvc_yaml import update_dvc_yaml
from mmtr.params import parse_params
from mmtr.profiles import experiment_names, load_profile, merge
from report.runs import split_run
from tests.flows.helpers import REPO, tiny_params_tree, write_params

pytestmark = pytest.mark.flow

TINY_SECOND_CORPUS = {"splits": {"train": 8, "val": 3, "test": 6}, "captions_per_image": 5}


def tiny_profile_params(name: str) -> dict[str, Any]:
    """The tiny edition of the repository's params with profile ``name`` merged in, its sizes kept tiny."""
    tree = tiny_params_tree()
    merge(tree, load_profile(name))
    if tree["generate"]["flickr"]["splits"]["train"]:
        tree["generate"]["flickr"] = TINY_SECOND_CORPUS
    tree["retrieval"]["evaluation"].update(fold_images=3, val_images=3)
    # the profiles' 3 seeds: one profile keeps two (the fewest that give a spread), the others one, for time
    tree["retrieval"]["replicates"] = 2 if name == "table5" else 1
    return tree


def content_digest(path: Path) -> str:
    """A digest of a file's bytes, or of a folder's file names and bytes; of nothing for a path that is absent."""
    digest = hashlib.sha256()
    files = sorted(file for file in path.rglob("*") if file.is_file()) if path.is_dir() else [path]
    for file in files:
        if file.is_file():
            digest.update(f"{file.relative_to(path) if path.is_dir() else file.name}\0".encode())
            digest.update(file.read_bytes())
    return digest.hexdigest()


def stage_key(stage: Stage) -> str:
    """What makes a stage's outputs, as DVC's run cache keys them: its command, its params' values, its inputs."""
    digest = hashlib.sha256(stage.cmd.encode())
    for dep in stage.deps:
        if isinstance(dep, ParamsDependency):
            digest.update(json.dumps(dep.read_params(), sort_keys=True, default=str).encode())
        else:
            digest.update(f"{dep.def_path}\0{content_digest(Path(dep.fs_path))}".encode())
    return digest.hexdigest()


def copy_path(source: Path, target: Path) -> None:
    if target.is_dir():
        shutil.rmtree(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    if source.is_dir():
        shutil.copytree(source, target)
    else:
        shutil.copy2(source, target)


def run_stages_in_order(project: Path, monkeypatch: pytest.MonkeyPatch, ran: Path) -> list[str]:
    """Run every stage of ``project``'s dvc.yaml in DVC's dependency order; returns the stage names.

    A stage whose :func:`stage_key` is in ``ran`` (outputs kept by key) gets those outputs; the others run, and
    their outputs are kept there."""
    from dvc.repo import Repo

    monkeypatch.chdir(project)
    with Repo(str(project)) as repo:
        graph = repo.index.graph  # edges point from a stage to the stages it depends on
        stages = list(reversed(list(nx.topological_sort(graph))))
        for stage in stages:
            kept = ran / stage_key(stage)
            outs = [(Path(out.fs_path), kept / out.def_path) for out in stage.outs]
            if kept.is_dir():
                for workspace, copy in outs:
                    copy_path(copy, workspace)
                continue
            python, dash_m, module, *args = shlex.split(stage.cmd)
            assert (python, dash_m) == ("python", "-m") and module.startswith("flows."), stage.cmd
            importlib.import_module(module).main(args)
            for workspace, copy in outs:
                copy_path(workspace, copy)
        return [stage.addressing for stage in stages]


@pytest.fixture(scope="module")
def stage_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The stage outputs the profiles of this test process made, by :func:`stage_key`."""
    return tmp_path_factory.mktemp("stage-runs")


@pytest.fixture
def project(tmp_path: Path, prefect_api_url: str) -> Path:
    import subprocess

    shutil.copy2(REPO / ".dvcignore", tmp_path / ".dvcignore")
    for folder in ("data/raw/feature-inputs", "data/raw/mt-models", "data/raw/word-vectors"):
        shutil.copytree(REPO / folder, tmp_path / folder)
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["dvc", "init", "-q", "--no-scm"], cwd=tmp_path, check=True)
    return tmp_path


@pytest.mark.parametrize(
    "name", [name for name in experiment_names() if not name.startswith("real_")]
)  # the built-in world's
def test_profile_runs_end_to_end(name: str, project: Path, monkeypatch: pytest.MonkeyPatch, stage_runs: Path) -> None:
    tree = tiny_profile_params(name)
    write_params(project / "params.yaml", tree)
    update_dvc_yaml(project / "params.yaml")
    stages = run_stages_in_order(project, monkeypatch, stage_runs)

    retrieval, roles = tree["retrieval"], tree["corpus_roles"]
    params = parse_params(tree)
    corpora = {roles["mmt_finetune"], roles["target"]}
    assert {f"prepare@{corpus}" for corpus in corpora} | {f"features@{corpus}" for corpus in corpora} <= set(stages)
    runs = {f"{m}-{v}-{r}" for m in retrieval["models"] for v in retrieval["variants"] for r in retrieval["roles"]}
    assert {stage.removeprefix("train_retrieval@") for stage in stages if "@" in stage and "retrieval" in stage} == runs
    folder = project / "data/metrics/retrieval"
    metrics = {path.stem: read_metrics(path) for path in folder.glob("*.json") if not is_notes_file(path)}
    assert set(metrics) == runs
    for run, result in metrics.items():
        _, _, role = split_run(run)
        tested = set(params.retrieval.role(role, params.languages.pivot).test)
        if retrieval["evaluation"]["protocol"] == "both":
            tested |= {f"{lang}-folds" for lang in tested}
        assert tested <= set(result), f"{run}: tested on {sorted(result)}"
        if tree["retrieval"]["replicates"] == 2:
            assert result["seeds"] == [0, 1] and tested <= set(result["std"]), f"{run}: mean and std of two seeds"
        if retrieval["translate_search"]["languages"] and role == "pivot_only":
            assert set(result["translate_search"]) == {"de"}, f"{run}: de queries translated to en and searched"
    report = (project / "data/reports/results.md").read_text(encoding="utf-8")
    labels = {name: variant.display_name() for name, variant in VARIANTS.items()}
    for run in runs:
        model, variant, role = split_run(run)
        assert f"| {model} | {labels[variant]} | {role} | " in report, f"{run}: no row in results.md"
    # mean ± std cells in the retrieval tables' rows (the translation bootstrap's "mean ± CI" column is not one)
    rows = [line for line in report.splitlines() if line.startswith(tuple(f"| {m} | " for m in retrieval["models"]))]
    assert any(re.search(r"\d ± \d", row) for row in rows) == (tree["retrieval"]["replicates"] == 2)
    prepared_target = project / "data/prepared" / roles["target"]
    assert (prepared_target / "images.parquet").is_file()
