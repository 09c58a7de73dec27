"""Resource faults and SIGTERM at the stage entry points, on the tiny dataset.

A full disk while a stage writes ends it in one line naming the file and the errno, its previous output as it was;
SIGTERM (what a cluster scheduler sends before it kills a job) stops a stage within seconds with exit status 143
and one line, its previous output as it was and no temporary left; the rerun writes what an uninterrupted run does.
The sharded stages run with slow batches (:mod:`tests.flows.slow_stage`), so that the signal lands mid-shard.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from corpora import tables
from flows import prepare
from tests.command_line import flags
from tests.flows.conftest import TinyDataset
from tests.flows.helpers import tiny_params_tree, train_retrieval_argv, write_params
from tests.flows.slow_stage import BATCH_LINE
from tests.unit.common.test_hostile_faults import NO_SPACE, arrow_no_space, fail_on_call, hidden, tree_bytes

pytestmark = [pytest.mark.slow, pytest.mark.flow]
REPO = Path(__file__).resolve().parents[2]
STOP_WITHIN = 15.0  # seconds from SIGTERM to exit: a scheduler's usual grace is 30
EPOCHS = 5  # train_mmt's fine-tuning: a stop that waited for the training would log its last epoch


def prepare_argv(tiny_dataset: TinyDataset, out: Path) -> list[str]:
    return flags(params=tiny_dataset.params, corpus="synthetic", out=out)


def test_disk_full_while_prepare_writes_is_one_line_and_the_rerun_completes(
    tiny_dataset: TinyDataset, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "synthetic"
    prepare.main(prepare_argv(tiny_dataset, out))
    before = tree_bytes(out)
    capsys.readouterr()
    with monkeypatch.context() as patch:
        fail_on_call(patch, tables.pq, "write_table", arrow_no_space(), call=2)
        with pytest.raises(SystemExit) as stopped:
            prepare.main(prepare_argv(tiny_dataset, out))
    err = capsys.readouterr().err
    assert stopped.value.code == 2
    assert (
        err.strip().splitlines()[-1]
        == f"python -m flows.prepare: error: cannot write {out}/captions.parquet: {NO_SPACE}"
    )
    assert tree_bytes(out) == before and hidden(tmp_path) == []
    prepare.main(prepare_argv(tiny_dataset, out))
    assert tree_bytes(out) == before and hidden(tmp_path) == []


def sigterm_when(command: list[str], ready: Callable[[str], bool], env: dict[str, str]) -> tuple[int, str, float]:
    """Run ``command``, send it SIGTERM when a line of its output satisfies ``ready``; its exit status, its whole
    output and the seconds it took to exit after the signal."""
    process = subprocess.Popen(
        command,
        cwd=REPO,
        env=env,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    lines: list[str] = []
    sent = threading.Event()
    signalled_at = [0.0]

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line)
            if not sent.is_set() and ready(line):
                signalled_at[0] = time.monotonic()
                os.kill(process.pid, signal.SIGTERM)
                sent.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        status = process.wait(timeout=300)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    reader.join(timeout=10)
    assert sent.is_set(), "the stage ended before the moment to stop it came:\n" + "".join(lines)
    return status, "".join(lines), time.monotonic() - signalled_at[0]


def assert_stopped_cleanly(status: int, output: str, took: float, stage: str) -> None:
    assert status == 128 + signal.SIGTERM, output
    assert output.strip().splitlines()[-1] == f"python -m flows.{stage}: stopped by SIGTERM", output
    assert took < STOP_WITHIN, f"{took:.1f} s from SIGTERM to exit:\n{output}"


def test_sigterm_stops_prepare_cleanly_and_the_rerun_writes_the_same_tables(
    tiny_dataset: TinyDataset, tmp_path: Path, prefect_api_url: str
) -> None:
    out = tmp_path / "synthetic"
    command = [sys.executable, "-m", "flows.prepare", *prepare_argv(tiny_dataset, out)]
    env = {**os.environ, "PREFECT_API_URL": prefect_api_url}
    subprocess.run(command, cwd=REPO, env=env, check=True, capture_output=True)
    before = tree_bytes(out)
    # read, not yet written: the tables task runs next
    status, output, took = sigterm_when(command, lambda line: "Read " in line and " captions (" in line, env)
    assert_stopped_cleanly(status, output, took, "prepare")
    assert tree_bytes(out) == before and hidden(tmp_path) == []
    subprocess.run(command, cwd=REPO, env=env, check=True, capture_output=True)
    assert tree_bytes(out) == before and hidden(tmp_path) == []


def test_sigterm_stops_train_retrieval_mid_training_and_the_rerun_completes(
    trained: Path, tiny_dataset: TinyDataset, tmp_path: Path, prefect_api_url: str
) -> None:

    tree = tiny_params_tree()
    tree["retrieval"]["replicates"] = 2
    params = write_params(tmp_path / "params.yaml", tree)
    out, metrics = tmp_path / "san-mmt_f-all", tmp_path / "san-mmt_f-all.json"
    command = [sys.executable, "-m", "flows.train_retrieval", *train_retrieval_argv(trained, params, "mmt_f", out)]
    env = {**os.environ, "PREFECT_API_URL": prefect_api_url}
    subprocess.run(command, cwd=REPO, env=env, check=True, capture_output=True)
    before, metrics_before = tree_bytes(out), metrics.read_bytes()

    def training_started(line: str) -> bool:
        return any(tmp_path.glob(".san-mmt_f-all.*.tmp"))  # its output folder is being written

    status, output, took = sigterm_when(command, training_started, env)
    assert_stopped_cleanly(status, output, took, "train_retrieval")
    assert tree_bytes(out) == before and metrics.read_bytes() == metrics_before
    assert hidden(tmp_path) == []
    subprocess.run(command, cwd=REPO, env=env, check=True, capture_output=True)
    assert (out / "model.safetensors").read_bytes() == before["model.safetensors"]
    assert hidden(tmp_path) == []


def test_disk_full_while_train_retrieval_writes_its_model(
    trained: Path,
    tiny_dataset: TinyDataset,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from common import checkpoints
    from flows import train_retrieval
    from tests.unit.common.test_hostile_faults import safetensors_fault

    out, metrics = tmp_path / "san-none-all", tmp_path / "san-none-all.json"
    argv = train_retrieval_argv(trained, tiny_dataset.params, "none", out)
    with monkeypatch.context() as patch:
        fail_on_call(patch, checkpoints, "save_file", safetensors_fault(errno.ENOSPC))
        with pytest.raises(SystemExit) as stopped:
            train_retrieval.main(argv)
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert stopped.value.code == 2
    assert last.startswith("python -m flows.train_retrieval: error: cannot write ") and last.endswith(NO_SPACE), last
    assert f"{out}/" in last and ".tmp" not in last, last
    assert not out.exists() and not metrics.exists() and hidden(tmp_path) == []
    train_retrieval.main(argv)
    assert (out / "model.safetensors").is_file() and metrics.is_file() and hidden(tmp_path) == []


def nth_batch(count: int) -> Callable[[str], bool]:
    """Whether ``count`` batches of a slowed stage (:mod:`tests.flows.slow_stage`) have started, line by line."""
    seen = [0]

    def ready(line: str) -> bool:
        seen[0] += line.rstrip().endswith(BATCH_LINE)  # a print in a task is logged with a prefix
        return seen[0] >= count

    return ready


def test_sigterm_stops_features_mid_shard_and_the_rerun_writes_the_same_store(
    tiny_dataset: TinyDataset, tmp_path: Path, prefect_api_url: str
) -> None:

    tree = tiny_params_tree(raw=tiny_dataset.raw)
    tree["features"].update(shard_size=12, batch_size=1, probe=False)  # one shard of 12 one-image batches
    params = write_params(tmp_path / "params.yaml", tree)
    out, metrics, work = tmp_path / "features", tmp_path / "features.json", tmp_path / "work"
    argv = flags(
        params=params,
        prepared=tiny_dataset.prepared,
        images=tiny_dataset.raw / "images",
        boxes=tiny_dataset.raw / "objects.parquet",
        inputs=tmp_path / "inputs",
        work=work,
        out=out,
        metrics=metrics,
    )
    command = [sys.executable, "-m", "flows.features", *argv]
    env = {**os.environ, "PREFECT_API_URL": prefect_api_url}
    subprocess.run(command, cwd=REPO, env=env, check=True, capture_output=True)
    before, metrics_before = tree_bytes(out), metrics.read_bytes()

    slow = [sys.executable, "-m", "tests.flows.slow_stage", "features", *argv]
    status, output, took = sigterm_when(slow, nth_batch(2), env)  # the shard's second image is under way
    assert_stopped_cleanly(status, output, took, "features")
    assert output.count(BATCH_LINE) < 12, output  # the shard was given up, not finished
    assert tree_bytes(out) == before and metrics.read_bytes() == metrics_before
    assert list(work.rglob("done/*.json")) == [] and hidden(tmp_path) == []
    subprocess.run(command, cwd=REPO, env=env, check=True, capture_output=True)
    assert tree_bytes(out) == before and metrics.read_bytes() == metrics_before
    assert hidden(tmp_path) == []


def test_sigterm_stops_synthesize_mid_translation_and_the_rerun_writes_the_same_captions(
    trained: Path, tiny_dataset: TinyDataset, tmp_path: Path, prefect_api_url: str
) -> None:

    tree = tiny_params_tree(raw=tiny_dataset.raw)
    # the 30 train captions of a pass in two shards of 15 one-caption batches, translated side by side
    tree["synthesis"].update(shard_size=15, batch_size=1)
    tree["runner"]["max_workers"] = 2
    params = write_params(tmp_path / "params.yaml", tree)
    out, metrics = tmp_path / "de.parquet", tmp_path / "de.json"

    def command(work: Path, *module: str) -> list[str]:
        paths = flags(prepared=tiny_dataset.prepared, store=trained / "features" / "compact", models=trained / "models")
        return [
            sys.executable,
            "-m",
            *module,
            *flags(params=params, target="de"),
            *paths,
            *flags(work=work, out=out, metrics=metrics),
        ]

    env = {**os.environ, "PREFECT_API_URL": prefect_api_url}
    # its own work folder: a synthesis keeps its finished shards, which the stopped run would reuse
    subprocess.run(command(tmp_path / "first", "flows.synthesize"), cwd=REPO, env=env, check=True, capture_output=True)
    before, metrics_before = out.read_bytes(), metrics.read_bytes()

    work = tmp_path / "work"
    slow = command(work, "tests.flows.slow_stage", "synthesize")
    status, output, took = sigterm_when(slow, nth_batch(3), env)  # both shards of the first pass are under way
    assert_stopped_cleanly(status, output, took, "synthesize")
    assert output.count(BATCH_LINE) < 30, output  # neither shard was finished
    assert out.read_bytes() == before and metrics.read_bytes() == metrics_before
    assert list(work.rglob("*.parquet")) == [] and hidden(tmp_path) == []
    subprocess.run(command(work, "flows.synthesize"), cwd=REPO, env=env, check=True, capture_output=True)
    assert out.read_bytes() == before and metrics.read_bytes() == metrics_before
    assert hidden(tmp_path) == []


def processes_marked(marker: str) -> list[int]:
    """The processes whose environment holds ``TEST_RUN_MARKER=<marker>`` (a stage and the workers it started)."""
    found = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if process.environ().get("TEST_RUN_MARKER") == marker:
                found.append(process.pid)
    return found


@pytest.mark.parametrize("parallel_directions", [False, True], ids=["one-after-the-other", "side-by-side"])
def test_sigterm_stops_train_mmt_mid_training_and_the_rerun_completes(
    tiny_dataset: TinyDataset, tmp_path: Path, prefect_api_url: str, parallel_directions: bool
) -> None:
    """Side by side, the directions train in a process pool's workers, which the signal does not reach: they give
    up their fits when the stage stops, and none is left running."""
    from tests.flows.test_features_flow import run_features

    store, _ = run_features(tiny_dataset, tmp_path, tiny_dataset.raw / "images", tiny_dataset.params)
    tree = tiny_params_tree(raw=tiny_dataset.raw)
    tree["mmt"]["finetune"].update(epochs=EPOCHS, patience=EPOCHS)
    tree["mmt"]["systems"] = ["mmt"]
    tree["retrieval"]["translate_search"]["languages"] = []  # it would need the text-only system
    tree["distributed"].update(parallel_directions=parallel_directions)
    params = write_params(tmp_path / "params.yaml", tree)
    models, metrics = tmp_path / "models", tmp_path / "metrics"

    def command(work: Path) -> list[str]:
        paths = flags(prepared=tiny_dataset.prepared, parallel=tiny_dataset.parallel, store=store)
        outputs = flags(models=models, mt_models=tmp_path / "mt-models", metrics=metrics, work=work)
        return [sys.executable, "-m", "flows.train_mmt", *flags(params=params, target="de"), *paths, *outputs]

    marker = tmp_path.name
    env = {**os.environ, "PREFECT_API_URL": prefect_api_url, "TEST_RUN_MARKER": marker}
    subprocess.run(command(tmp_path / "first"), cwd=REPO, env=env, check=True, capture_output=True)
    before = {"models": tree_bytes(models), "metrics": tree_bytes(metrics)}

    work = tmp_path / "work"
    status, output, took = sigterm_when(command(work), lambda line: "finetune · epoch 2/" in line, env)
    print(f"train_mmt stopped {took:.1f} s after SIGTERM")
    assert_stopped_cleanly(status, output, took, "train_mmt")
    assert f"finetune · epoch {EPOCHS}/" not in output, output  # the trainings were stopped, not waited for
    assert processes_marked(marker) == [], output  # no direction's worker trains on
    assert {"models": tree_bytes(models), "metrics": tree_bytes(metrics)} == before
    assert hidden(tmp_path) == []
    subprocess.run(command(work), cwd=REPO, env=env, check=True, capture_output=True)  # resumes from its states
    assert {"models": tree_bytes(models), "metrics": tree_bytes(metrics)} == before
    assert hidden(tmp_path) == [] and not any(work.rglob("*.state.safetensors"))
