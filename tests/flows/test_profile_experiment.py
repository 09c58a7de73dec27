"""`mmtr profile <name> --run` for real: the profile is merged into a tiny project's params.yaml, `dvc exp run -n
<name>` runs the whole pipeline as a DVC experiment, and `dvc exp show --json` reads back the experiment's name, the
profile's params and the numbers the run's metrics files hold.

The profile is a real one (``table5``) cut to one model and one seed in the project's copy of the package, so that
the experiment trains two retrieval runs of one seed, not four of three; its sizes are the tiny project's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from mmtr.dvc_yaml import update_dvc_yaml
from mmtr.grid import parse_queue_status
from mmtr.profiles import load_profile
from tests.flows.helpers import REPO, commit, copy_project_code, run, tiny_params_tree, write_params

pytestmark = [pytest.mark.slow, pytest.mark.flow]

PROFILE = "table5"
RUNS = ("san-mmt_f-pivot_only", "san-mmt_f-discard_human_targets")  # retrieval.models x variants x roles


def leaves(tree: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every value of ``tree`` that is not a non-empty mapping, by its dotted key path."""
    for key, value in tree.items():
        if isinstance(value, Mapping) and value:
            yield from leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def at(tree: Mapping[str, Any], path: str) -> Any:
    for key in path.split("."):
        tree = tree[key]
    return tree


def experiments(shown: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each experiment's data by its name, from `dvc exp show --json` (a list of baselines, each with its
    experiments)."""
    return {
        rev["name"]: rev["data"]
        for baseline in shown
        for exp in baseline.get("experiments") or []
        for rev in exp["revs"]
    }


def metrics_of(data: Mapping[str, Any]) -> dict[str, Any]:
    return {path: entry["data"] for path, entry in data["metrics"].items()}


@pytest.fixture
def project(tmp_path: Path, prefect_api_url: str) -> Iterator[tuple[Path, dict[str, str]]]:
    """A committed tiny project whose copy of ``table5`` trains one model, one seed."""
    root = tmp_path / "project"
    root.mkdir()
    copy_project_code(root)
    profile = load_profile(PROFILE)
    profile["retrieval"].update(models=["san"], replicates=1)
    (root / "mmtr" / "profiles" / f"{PROFILE}.yaml").write_text(
        f"# {PROFILE}, cut to one model and one seed\n" + yaml.safe_dump(profile, sort_keys=False), encoding="utf-8"
    )
    tree = tiny_params_tree()
    tree["retrieval"]["evaluation"].update(val_images=3)  # the profile leaves it to params.yaml
    write_params(root / "params.yaml", tree)
    update_dvc_yaml(root / "params.yaml")
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "PREFECT_API_URL": prefect_api_url,
        "PREFECT_FLOWS_HEARTBEAT_FREQUENCY": "30",
    }
    env.pop("PYTHONPATH", None)
    for command in (["git", "init", "-q"], ["dvc", "init", "-q"], ["dvc", "config", "core.analytics", "false"]):
        run(command, root, env)
    shutil.copytree(REPO / ".dvc" / "plots", root / ".dvc" / "plots")
    commit(root, env, "code and params")
    yield root, env
    # the queue's workers end once idle; a failed test must not leave one behind either
    subprocess.run(["dvc", "queue", "stop", "--kill"], cwd=root, env=env, capture_output=True, check=False)


def test_profile_runs_as_a_dvc_experiment_that_exp_show_reads_back(project: tuple[Path, dict[str, str]]) -> None:
    root, env = project
    out = run([sys.executable, "-m", "mmtr.cli", "profile", PROFILE, "--run"], root, env)
    assert f"dvc exp run -n {PROFILE}" in out
    assert all(f"Running stage 'train_retrieval@{name}'" in out for name in RUNS), out

    shown = experiments(json.loads(run(["dvc", "exp", "show", "--json"], root, env)))
    assert set(shown) == {PROFILE}, shown.keys()
    params = shown[PROFILE]["params"]["params.yaml"]["data"]
    profile = load_profile(PROFILE, root / "mmtr" / "profiles")
    for path, value in leaves(profile):
        assert at(params, path) == value, f"params.yaml {path} of experiment {PROFILE}"
    assert at(params, "retrieval.models") == ["san"] and at(params, "retrieval.replicates") == 1

    metrics = metrics_of(shown[PROFILE])
    assert {f"data/metrics/retrieval/{name}.json" for name in RUNS} <= set(metrics)
    for path, numbers in metrics.items():  # every metrics file of dvc.yaml, as the run left it in the workspace
        assert numbers == json.loads((root / path).read_text(encoding="utf-8")), path
    assert set(metrics["data/metrics/retrieval/san-mmt_f-pivot_only.json"]["translate_search"]) == {"de"}

    # the docs' grid (configuration.md, "Experiments"): the experiment kept, then one queued experiment per value
    commit(root, env, f"profile {PROFILE}")  # queued experiments start from the commit and its tracked changes
    run(["dvc", "exp", "run", "--queue", "-S", "retrieval.train.epochs=1,3"], root, env)
    queued = parse_queue_status(run(["dvc", "queue", "status"], root, env)).tasks
    assert [task.status for task in queued] == ["Queued", "Queued"], queued
    out = run(["dvc", "exp", "run", "--run-all"], root, env)
    assert out.count("Running stage 'train_retrieval@") == 2 * len(RUNS), out
    assert "Running stage 'train_mmt@de'" not in out  # what the grid does not change comes from the commit
    done = parse_queue_status(run(["dvc", "queue", "status"], root, env)).tasks
    assert [task.status for task in done] == ["Success", "Success"], done

    grid = experiments(json.loads(run(["dvc", "exp", "show", "--json"], root, env)))
    assert len(grid) == 2, grid.keys()  # the baseline's experiments: table5's is on the commit before
    epochs = {name: at(data["params"]["params.yaml"]["data"], "retrieval.train.epochs") for name, data in grid.items()}
    assert sorted(epochs.values()) == [1, 3], epochs
    for name, data in grid.items():
        for path, numbers in metrics_of(data).items():  # what `dvc exp show` read is what the experiment committed
            assert numbers == json.loads(run(["git", "show", f"{data['rev']}:{path}"], root, env)), f"{name} {path}"
        for run_ in RUNS:  # each trained its own number of epochs: one history row per epoch
            history = run(["git", "show", f"{data['rev']}:data/metrics/retrieval/{run_}.history.tsv"], root, env)
            assert len(history.splitlines()) == 1 + epochs[name], f"{name} {run_}:\n{history}"
