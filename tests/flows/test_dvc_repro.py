"""`dvc repro` in a fresh git repo: stages run, a second run is a no-op, a param change reruns only prepare; the
pipeline flow's run is named and tagged with its stage runs, at a clean commit; stopped by a signal, it leaves no
process running."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

import psutil
import pytest
from prefect.client.orchestration import get_client

from corpora.prepared import read_prepared
from mmtr.dvc_yaml import update_dvc_yaml
from tests.flows.helpers import REPO, copy_project_code, tiny_params_tree, write_params

pytestmark = pytest.mark.slow

STAGES = ("generate", "prepare@synthetic", "prepare_parallel@de", "features@synthetic", "train_mmt@de", "synthesize@de")
STAGES += ("augment", "export", "translate_queries", "report")
STAGES += tuple(f"train_retrieval@san-{variant}-all" for variant in ("none", "mmt_f"))


def run(command: list[str], cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


@pytest.fixture
def project(tmp_path: Path, prefect_api_url: str) -> tuple[Path, dict[str, str]]:
    copy_project_code(tmp_path)
    tree = tiny_params_tree()
    tree["retrieval"]["models"] = ["san"]  # each stage is a process start: the other models run in test_profiles_run
    write_params(tmp_path / "params.yaml", tree)
    update_dvc_yaml(tmp_path / "params.yaml")
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "PREFECT_API_URL": prefect_api_url,  # stage processes report to the test server instead of starting their own
        "PREFECT_FLOWS_HEARTBEAT_FREQUENCY": "30",
    }
    env.pop("PYTHONPATH", None)
    for command in (["git", "init", "-q"], ["dvc", "init", "-q"], ["dvc", "config", "core.analytics", "false"]):
        run(command, tmp_path, env)
    shutil.copytree(REPO / ".dvc" / "plots", tmp_path / ".dvc" / "plots")  # the learning curves' chart template
    commit(tmp_path, env, "code and params")
    return tmp_path, env


def commit(root: Path, env: dict[str, str], message: str, *paths: str) -> str:
    """Commit ``paths`` (default: everything); the short commit, as the runs' ``commit:`` tag names it."""
    run(["git", "add", *(paths or ["-A"])], root, env)
    run(["git", "-c", "user.name=Test", "-c", "user.email=test@example.org", "commit", "-q", "-m", message], root, env)
    return run(["git", "rev-parse", "--short=10", "HEAD"], root, env).strip()


def test_repro_runs_then_skips_then_reruns_on_param_change(project: tuple[Path, dict[str, str]]) -> None:
    root, env = project
    first = run(["dvc", "repro"], root, env)
    assert all(f"Running stage '{stage}'" in first for stage in STAGES)
    corpus = read_prepared(root / "data" / "prepared" / "synthetic")
    assert corpus.images.num_rows == 12 and set(corpus.images.column("dataset").to_pylist()) == {"synthetic"}
    assert (root / "dvc.lock").is_file()

    second = run(["dvc", "repro"], root, env)
    assert "Running stage" not in second
    assert all(f"Stage '{stage}' didn't change, skipping" in second for stage in STAGES)
    metrics = run(["dvc", "metrics", "show", "--json"], root, env)
    assert "probe" in metrics and "colour" in metrics
    assert "data/metrics/retrieval/san-mmt_f-all.json" in metrics and "rsum" in metrics
    assert "| san | MMT(f) | all |" in (root / "data" / "reports" / "results.md").read_text()
    plots = json.loads(run(["dvc", "plots", "show", "--json"], root, env))
    curve = plots["data"]["retrieval-san"]  # one chart per retrieval model (dvc.yaml's top-level plots), runs overlaid
    rows = [row for entry in curve for row in entry["content"]["data"]["values"]] if curve else []
    run_rows = [row for row in rows if row["filename"].endswith("san-mmt_f-all.history.tsv")]
    assert run_rows and {"epoch", "val_rsum", "loss", "val_rsum_en", "val_rsum_de"} <= set(run_rows[0]), plots

    head = commit(root, env, "first results")  # dvc.lock, metrics, reports, DVC's .gitignore files now tracked

    renamed_tree = tiny_params_tree(dataset="synthetic-renamed")
    renamed_tree["retrieval"]["models"] = ["san"]
    write_params(root / "params.yaml", renamed_tree)
    head = commit(root, env, "renamed dataset", "params.yaml")
    third = run([sys.executable, "-m", "flows.pipeline", "prepare"], root, env)  # dvc repro prepare, as a flow
    assert "Stage 'generate' didn't change, skipping" in third
    assert "Running stage 'prepare@synthetic'" in third and "Running stage 'prepare_parallel@de'" not in third
    renamed = read_prepared(root / "data" / "prepared" / "synthetic")
    assert set(renamed.images.column("dataset").to_pylist()) == {"synthetic-renamed"}
    runs = asyncio.run(_flow_runs())
    # one run of the pipeline flow, named for its targets, commit and params, tagged like its stage runs
    (pipeline_run,) = [run for run in runs if run.name_of_flow == "pipeline"]
    digest = hashlib.sha256((root / "params.yaml").read_bytes()).hexdigest()[:8]
    assert pipeline_run.name == f"pipeline prepare · {head} · params {digest}"
    assert {"stage:pipeline", f"commit:{head}", f"pipeline:{pipeline_run.id}"} <= set(pipeline_run.tags)
    tagged = [run for run in runs if f"pipeline:{pipeline_run.id}" in run.tags and run.id != pipeline_run.id]
    assert [run.name_of_flow for run in tagged] == ["prepare"]
    # runs are named after the DVC stage that ran them, and tagged with it (DVC exports DVC_STAGE to commands)
    assert tagged[0].name == "prepare@synthetic" and "dvc:prepare@synthetic" in tagged[0].tags
    assert f"commit:{head}" in tagged[0].tags
    retrieval = [run for run in runs if run.name_of_flow == "train_retrieval"]
    assert {run.name for run in retrieval} >= {"train_retrieval@san-mmt_f-all", "train_retrieval@san-none-all"}
    # the pipeline run's own artifacts: a progress bar over the DAG's stages and the table of what each did
    artifacts = asyncio.run(_artifacts(pipeline_run.id))
    assert artifacts["pipeline-progress"].data == 100.0
    table = artifacts["pipeline-stages"].data.splitlines()
    assert table[0].startswith("# Pipeline: 2 of 2 stages done in")
    assert "| generate | unchanged | - | - |" in table
    (row,) = [line for line in table if line.startswith("| prepare@synthetic | ran |")]
    ui = env["PREFECT_API_URL"].removesuffix("/api")  # the test server's own port, not Prefect's default 4200
    assert row.endswith(f"| [prepare@synthetic]({ui}/runs/flow-run/{tagged[0].id}) |")
    # each stage run carries its run card: the command, the settings it depends on, its inputs and outputs
    card = asyncio.run(_artifacts(tagged[0].id))["run-card-prepare-synthetic"].data
    assert card.startswith("# Run card: prepare@synthetic") and "python -m flows.prepare --params params.yaml" in card
    assert "- `data/prepared/synthetic`" in card and "dataset: synthetic-renamed" in card
    assert f"commit {head}" in card
    # --force --single-item reruns the named stage alone, not what it depends on
    fourth = run([sys.executable, "-m", "flows.pipeline", "report", "--force", "--single-item"], root, env)
    assert "Running stage 'report'" in fourth and "Stage 'generate'" not in fourth and "stage 'augment'" not in fourth
    # dvc.lock changed with the third run: the pipeline's own write, so the code is still the commit's
    assert " M dvc.lock" in run(["git", "status", "--porcelain"], root, env)
    runs = asyncio.run(_flow_runs())
    (report_pipeline,) = [run for run in runs if run.name_of_flow == "pipeline" and run.id != pipeline_run.id]
    assert report_pipeline.name == f"pipeline report · {head} · params {digest}"
    (report,) = [run for run in runs if f"pipeline:{report_pipeline.id}" in run.tags and run.name_of_flow == "report"]
    assert f"commit:{head}" in report.tags and f"commit:{head}" in report_pipeline.tags


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stopped_pipeline_stops_dvc_and_its_stage(signum: int, project: tuple[Path, dict[str, str]]) -> None:
    """SIGTERM (kill) or SIGINT (Ctrl-C) while a stage renders images: the pipeline passes it to `dvc repro`, whose
    stage ends; no process is left, and both runs are marked crashed instead of running forever."""
    root, env = project
    tree = tiny_params_tree()
    tree["generate"].update(splits={"train": 300, "val": 10, "test": 10})  # long enough to be stopped mid-way
    write_params(root / "params.yaml", tree)
    pipeline = subprocess.Popen(
        [sys.executable, "-m", "flows.pipeline", "generate"],
        cwd=root,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 300
    while len(list(root.glob("data/raw/.synthetic.*.tmp/images/*.png"))) < 5:
        assert pipeline.poll() is None and time.monotonic() < deadline, "the stage never got to render images"
        time.sleep(0.1)
    started = [psutil.Process(pipeline.pid), *psutil.Process(pipeline.pid).children(recursive=True)]
    commands = [" ".join(process.cmdline()) for process in started]
    assert any("dvc repro" in command for command in commands), commands
    assert any("-m flows.generate" in command for command in commands), commands
    os.kill(pipeline.pid, signum)
    assert pipeline.wait(timeout=120) == 128 + signum
    left = []
    for process in started:
        with contextlib.suppress(psutil.NoSuchProcess):
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                left.append(process.cmdline())
    assert left == []
    runs = asyncio.run(_flow_runs())
    head = run(["git", "rev-parse", "--short=10", "HEAD"], root, env).strip()
    name = f"pipeline generate · {head}+dirty"  # params.yaml was edited
    (stopped,) = [run for run in runs if run.name_of_flow == "pipeline" and run.name.startswith(name)]
    (stage,) = [run for run in runs if f"pipeline:{stopped.id}" in run.tags and run.name_of_flow == "generate"]
    assert stopped.state == "CRASHED" and stage.state == "CRASHED"


@dataclass(frozen=True)
class _Run:
    id: str
    name: str
    name_of_flow: str
    tags: list[str]
    state: str | None


async def _artifacts(flow_run_id: str) -> dict[str, Any]:
    """The latest artifact of each key that the flow run made."""
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    async with get_client() as client:
        made = await client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[UUID(flow_run_id)]))
        )
    latest: dict[str, Any] = {}
    for artifact in sorted(made, key=lambda artifact: str(artifact.updated)):
        latest[str(artifact.key)] = artifact
    return latest


async def _flow_runs() -> list[_Run]:
    async with get_client() as client:
        runs = await client.read_flow_runs()
        flows = {flow.id: flow.name for flow in await client.read_flows()}
    return [
        _Run(str(run.id), run.name, flows[run.flow_id], list(run.tags), getattr(run.state_type, "value", None))
        for run in runs
    ]
