"""kill -9 in the middle of a stage that writes several outputs: each output is absent or complete, never a
folder a reader would take for finished (the README's promise); the next run removes what the kill left and
completes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.command_line import flags
from tests.flows.conftest import TinyDataset

pytestmark = [pytest.mark.slow, pytest.mark.flow]
REPO = Path(__file__).resolve().parents[2]


def kill_when(command: list[str], ready: Callable[[], bool], env: dict[str, str], timeout: float = 300) -> None:
    """Start ``command``, SIGKILL its process group as soon as ``ready()`` holds (or fail if it never does)."""
    process = subprocess.Popen(
        command, cwd=REPO, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + timeout
    while not ready() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert process.poll() is None, "the stage ended before the moment to kill it came"
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def visible(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.iterdir() if not path.name.startswith(".")) if folder.exists() else []


def test_train_mmt_killed_mid_training_leaves_no_system_folder(
    trained: Path, tiny_dataset: TinyDataset, tmp_path: Path, prefect_api_url: str
) -> None:
    models, metrics = tmp_path / "models", tmp_path / "metrics"
    command = [
        sys.executable,
        "-m",
        "flows.train_mmt",
        *flags(
            params=tiny_dataset.params,
            target="de",
            prepared=tiny_dataset.prepared,
            store=trained / "features" / "compact",
            models=models,
            parallel=tiny_dataset.parallel,
            mt_models=tmp_path / "mt-models",
            metrics=metrics,
        ),
    ]
    env = {**os.environ, "PREFECT_API_URL": prefect_api_url}

    def first_direction_fine_tuned() -> bool:  # the en->de MMT has its best-so-far checkpoint: mid-stage
        return any(models.glob(".staged.*/mmt-en-de/finetune.json"))

    kill_when(command, first_direction_fine_tuned, env)
    assert visible(models) == [] and visible(metrics) == [], "a killed run must publish no system or metrics file"
    assert list(models.glob(".staged.*.tmp")), "the kill left its temporary folder (removed by the next run)"

    subprocess.run(command, cwd=REPO, env=env, check=True, capture_output=True)
    assert visible(models) == ["mmt-de-en", "mmt-en-de", "mt-de-en", "mt-en-de"]
    assert not list(models.glob(".*.tmp")) and not list(metrics.glob(".*.tmp"))
    assert {"mmt-en-de.json", "mt-de-en.json", "mmt-vs-mt-en-de.json"} <= set(visible(metrics))
    for folder in visible(models):
        assert (models / folder / "finetune.safetensors").is_file() and (models / folder / "system.json").is_file()


def test_augment_killed_leaves_every_variant_or_none(
    trained: Path, tiny_dataset: TinyDataset, tmp_path: Path, prefect_api_url: str
) -> None:
    out = tmp_path / "augmented"
    command = [
        sys.executable,
        "-m",
        "flows.augment",
        *flags(
            params=trained / "every-variant.yaml",
            prepared=tiny_dataset.prepared,
            synthesized=trained / "synthesized",
            out=out,
            metrics=tmp_path / "augment.json",
        ),
    ]
    env = {**os.environ, "PREFECT_API_URL": prefect_api_url}
    kill_when(command, lambda: any(tmp_path.glob(".augmented.*.tmp/*/captions.*.parquet")), env)
    assert not out.exists() and not (tmp_path / "augment.json").exists()
    subprocess.run(command, cwd=REPO, env=env, check=True, capture_output=True)
    assert visible(out) == sorted(visible(trained / "augmented")) and not list(tmp_path.glob(".augmented.*.tmp"))


def test_train_retrieval_killed_between_replicates_leaves_no_model_folder(
    trained: Path, tiny_dataset: TinyDataset, tmp_path: Path, prefect_api_url: str
) -> None:
    from tests.flows.helpers import tiny_params_tree, train_retrieval_argv, write_params

    tree = tiny_params_tree()
    tree["retrieval"]["replicates"] = 2
    params = write_params(tmp_path / "params.yaml", tree)
    out, metrics = tmp_path / "san-mmt_f-all", tmp_path / "san-mmt_f-all.json"
    command = [sys.executable, "-m", "flows.train_retrieval", *train_retrieval_argv(trained, params, "mmt_f", out)]
    env = {**os.environ, "PREFECT_API_URL": prefect_api_url}
    kill_when(command, lambda: any(tmp_path.glob(".san-mmt_f-all.*.tmp/model.json")), env)  # first seed done
    assert not out.exists() and not metrics.exists()
    subprocess.run(command, cwd=REPO, env=env, check=True, capture_output=True)
    assert (out / "model.safetensors").is_file() and (out / "replicates" / "seed-1" / "model.json").is_file()
    assert metrics.is_file() and not list(tmp_path.glob(".*.tmp"))


def test_generate_killed_while_rendering_leaves_no_dataset(tmp_path: Path, prefect_api_url: str) -> None:
    from tests.flows.helpers import tiny_params_tree, write_params

    tree = tiny_params_tree()
    tree["generate"].update(splits={"train": 300, "val": 10, "test": 10})
    params = write_params(tmp_path / "params.yaml", tree)
    out = tmp_path / "synthetic"
    command = [sys.executable, "-m", "flows.generate", *flags(params=params, out=out)]
    env = {**os.environ, "PREFECT_API_URL": prefect_api_url}
    kill_when(command, lambda: len(list(tmp_path.glob(".synthetic.*.tmp/images/*.png"))) >= 20, env)
    assert not out.exists()
    subprocess.run(command, cwd=REPO, env=env, check=True, capture_output=True)
    assert len(list((out / "images").glob("*.png"))) == 320 and not list(tmp_path.glob(".synthetic.*.tmp"))


def _tree_bytes(folder: Path) -> dict[str, bytes]:
    if folder.is_file():  # a one-file output (prepare_parallel@<target>)
        return {"": folder.read_bytes()}
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


@pytest.mark.parametrize("stage", ["prepare", "prepare_parallel", "report"])
def test_a_stage_whose_write_is_one_swap_leaves_it_absent_or_complete(
    stage: str, trained: Path, tiny_dataset: TinyDataset, tmp_path: Path, prefect_api_url: str
) -> None:
    """Killed the moment its temporary folder appears (or, had it finished first, after it ended), the output is
    absent or byte-identical to an uninterrupted run's."""
    if stage == "prepare":
        out = tmp_path / "synthetic"
        args = ["--corpus", "synthetic"]
    elif stage == "prepare_parallel":
        out = tmp_path / "en-de.parquet"
        args = ["--target", "de", "--parallel", str(tiny_dataset.raw / "parallel")]
    else:
        out = tmp_path / "reports"
        args = flags(
            metrics=trained / "metrics" / "retrieval",
            synthesized=trained / "synthesized",
            prepared=tiny_dataset.prepared,
            corpus="synthetic",
            diversity=trained / "metrics" / "augment.json",
            round_trips=trained / "metrics" / "synthesis",
            translation=trained / "metrics" / "mmt",
            significance=tmp_path / "significance.json",
        )
    if stage == "report" and not (trained / "metrics" / "retrieval").is_dir():  # run alone: one run to report
        from tests.flows.test_retrieval_flows import run_stage

        run_stage(tiny_dataset, trained, "san", "none")
    command = [sys.executable, "-m", f"flows.{stage}", "--params", str(tiny_dataset.params), *args]
    env = {**os.environ, "PREFECT_API_URL": prefect_api_url}
    reference = tmp_path / "reference"
    subprocess.run([*command, "--out", str(reference)], cwd=REPO, env=env, check=True, capture_output=True)
    process = subprocess.Popen(
        [*command, "--out", str(out)],
        cwd=REPO,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 300
    while not any(tmp_path.glob(f".{out.name}.*.tmp")) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.001)
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    if out.exists():
        assert _tree_bytes(out) == _tree_bytes(reference)
    subprocess.run([*command, "--out", str(out)], cwd=REPO, env=env, check=True, capture_output=True)
    assert _tree_bytes(out) == _tree_bytes(reference) and not list(tmp_path.glob(f".{out.name}.*.tmp"))


def test_synthesize_killed_after_its_first_shards_publishes_nothing_and_resumes(
    trained: Path, tiny_dataset: TinyDataset, tmp_path: Path, prefect_api_url: str
) -> None:
    out, metrics, work = tmp_path / "de.parquet", tmp_path / "de.json", tmp_path / "work"
    command = [
        sys.executable,
        "-m",
        "flows.synthesize",
        *flags(
            params=tiny_dataset.params,
            target="de",
            prepared=tiny_dataset.prepared,
            store=trained / "features" / "compact",
            models=trained / "models",
            work=work,
            out=out,
            metrics=metrics,
        ),
    ]
    env = {**os.environ, "PREFECT_API_URL": prefect_api_url}
    kill_when(command, lambda: len(list(work.rglob("shard-*.parquet"))) >= 2, env)
    assert not out.exists() and not metrics.exists()
    finished = len(list(work.rglob("shard-*.parquet")))
    subprocess.run(command, cwd=REPO, env=env, check=True, capture_output=True)
    assert out.read_bytes() == (trained / "synthesized" / "de.parquet").read_bytes()  # as an uninterrupted run
    assert finished >= 2 and metrics.is_file()
