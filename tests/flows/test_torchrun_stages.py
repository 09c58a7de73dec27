"""The training stages under torchrun, started by the stage command itself (`distributed.nproc_per_node: 2`, two
Gloo processes on the CPU), against the same stage in one process: the same learning curve and test metrics,
one set of outputs written by rank 0, and a clean failure when rank 0 stops on a user error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from flows import train_mmt, train_retrieval
from tests.command_line import flags
from tests.flows.conftest import TinyDataset
from tests.flows.helpers import tiny_params_tree, write_params

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def stage_process(module: str, argv: list[str], prefect_api_url: str) -> subprocess.CompletedProcess[str]:
    """``python -m <module> <argv>`` as DVC runs it (the stage starts torchrun itself), reporting to the session's
    Prefect server (else rank 0 would start a temporary one)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PREFECT_API_URL": prefect_api_url}
    return subprocess.run(
        [sys.executable, "-m", module, *argv], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )


def params_with(tmp_path: Path, name: str, nproc: int, tiny_dataset: TinyDataset, *, mmt_only: bool = False) -> Path:
    tree = tiny_params_tree(raw=tiny_dataset.raw)
    tree["distributed"].update(nproc_per_node=nproc)
    tree["mmt"]["model"].update(dropout=0.0)  # each rank draws its own dropout masks: none, to compare the runs
    if mmt_only:  # the MT system trains the same way: the MMT alone keeps the test short
        tree["mmt"]["systems"] = ["mmt"]
        tree["retrieval"]["translate_search"]["languages"] = []  # it translates with the MT system
    return write_params(tmp_path / f"{name}.yaml", tree)


def retrieval_argv(params: Path, trained: Path, out: Path) -> list[str]:
    return flags(
        params=params,
        model="san",
        variant="mmt_f",
        role="all",
        augmented=trained / "augmented",
        store=trained / "features" / "compact",
        word_vectors=trained / "word-vectors",
        queries=trained / "queries",
        out=out / "model",
        metrics=out / "metrics.json",
    )


def read(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def test_train_retrieval_on_two_ranks_matches_one_process(
    tiny_dataset: TinyDataset, trained: Path, tmp_path: Path, prefect_api_url: str
) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    train_retrieval.main(retrieval_argv(params_with(tmp_path, "one", 1, tiny_dataset), trained, one))
    done = stage_process(
        "flows.train_retrieval",
        retrieval_argv(params_with(tmp_path, "two", 2, tiny_dataset), trained, two),
        prefect_api_url,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "torch.distributed.run" not in done.stderr or "Traceback" not in done.stderr
    # one model folder, written once, with the same files
    assert sorted(path.name for path in (two / "model").iterdir()) == sorted(
        path.name for path in (one / "model").iterdir()
    )
    single, parallel = read(one / "model" / "model.json"), read(two / "model" / "model.json")
    assert parallel["extra"]["best_epoch"] == single["extra"]["best_epoch"]
    for found, expected in zip(parallel["extra"]["history"], single["extra"]["history"], strict=True):
        assert found["loss"] == pytest.approx(expected["loss"], rel=1e-4)
        assert found["val_rsum"] == pytest.approx(expected["val_rsum"], rel=1e-4)
    metrics_one, metrics_two = read(one / "metrics.json"), read(two / "metrics.json")
    for lang in ("en", "de"):
        assert metrics_two[lang]["rsum"] == pytest.approx(metrics_one[lang]["rsum"], abs=1e-6)


def mmt_argv(params: Path, tiny_dataset: TinyDataset, trained: Path, out: Path) -> list[str]:
    return flags(
        params=params,
        target="de",
        prepared=tiny_dataset.prepared,
        parallel=tiny_dataset.parallel,
        store=trained / "features" / "compact",
        models=out / "models",
        mt_models=out / "mt-models",
        metrics=out / "metrics",
    )


def test_train_mmt_on_two_ranks_matches_one_process(
    tiny_dataset: TinyDataset, trained: Path, tmp_path: Path, prefect_api_url: str
) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    train_mmt.main(mmt_argv(params_with(tmp_path, "one", 1, tiny_dataset, mmt_only=True), tiny_dataset, trained, one))
    two_ranks = params_with(tmp_path, "two", 2, tiny_dataset, mmt_only=True)
    # with a work folder: rank 0 encodes the text-only corpus there and both ranks map the same files
    argv = [*mmt_argv(two_ranks, tiny_dataset, trained, two), "--work", str(two / "work")]
    done = stage_process("flows.train_mmt", argv, prefect_api_url)
    assert done.returncode == 0, done.stderr[-3000:]
    assert not (two / "work" / "encoded").exists()  # gone with the resume states once the outputs are in place
    assert sorted(path.name for path in (two / "metrics").iterdir()) == sorted(
        path.name for path in (one / "metrics").iterdir()
    )
    for system in ("mmt-en-de", "mmt-de-en"):
        curve_one = read(one / "models" / system / "finetune.json")["extra"]
        curve_two = read(two / "models" / system / "finetune.json")["extra"]
        assert curve_two["step"] == curve_one["step"]
        assert curve_two["score"] == pytest.approx(curve_one["score"], rel=1e-4, abs=1e-4)
        test_one, test_two = read(one / "metrics" / f"{system}.json"), read(two / "metrics" / f"{system}.json")
        assert test_two["bleu"] == pytest.approx(test_one["bleu"], abs=0.5)


def test_a_user_error_on_rank_0_releases_the_other_ranks_and_ends_with_its_one_line(
    tiny_dataset: TinyDataset, trained: Path, tmp_path: Path, prefect_api_url: str
) -> None:
    argv = retrieval_argv(params_with(tmp_path, "two", 2, tiny_dataset), trained, tmp_path / "out")
    argv[argv.index("--model") + 1] = "clip"  # rank 0 stops before any training call; rank 1 waits for one
    done = stage_process("flows.train_retrieval", argv, prefect_api_url)
    assert done.returncode != 0
    assert "python -m flows.train_retrieval: error: unknown retrieval model 'clip'" in done.stderr
    assert "exitcode  : 2" in done.stderr  # rank 0's status; rank 1 was released and ended cleanly
    assert not (tmp_path / "out").exists()
