"""bench/wmt_scale.py: a small run on the real sample measures every step; the table and the extrapolation to
4.5M pairs come from the JSON alone."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from common.files import read_json

REPO = Path(__file__).resolve().parents[3]
BENCH = REPO / "bench"
ENCODE = {"mean_src_ids": 30.0, "mean_tgt_ids": 33.0}
TRAIN = {
    "plan_epoch_s": 0.1,
    "batches_per_epoch": 10,
    "collate_ms_per_batch": 1.0,
    "seconds_per_step": 2.0,
}


@pytest.fixture(scope="module")
def wmt_scale() -> ModuleType:
    sys.path.insert(0, str(BENCH))
    try:
        return importlib.import_module("wmt_scale")
    finally:
        sys.path.remove(str(BENCH))


def _step(seconds: float, memory: float, **figures: Any) -> dict[str, Any]:
    return {"seconds": seconds, "peak_tree_rss_mib": memory, "peak_rss_mib": memory, "figures": figures}


def _record(sample: int) -> dict[str, Any]:
    def run(pairs: int, scale: int) -> dict[str, Any]:
        return {
            "pairs": pairs,
            "steps": {
                "build": _step(1, 50, base_pairs=39_000, distinct_pairs=pairs - 1, files_mib=1.0),
                "prepare": _step(10 * scale, 150, row_groups=scale, parquet_mib=2.0),
                "subword": _step(100 * scale, 300 * scale, sampled_pairs=min(pairs, sample), sample_scan_s=2 * scale),
                "encode": _step(50 * scale, 200 + 100 * scale, store_mib=scale, id_dtype="uint16", **ENCODE),
                "train": _step(20, 1000 + 10 * scale, check_examples_s=scale, **TRAIN),
            },
        }

    return {
        "created": "2026-01-01T00:00:00+00:00",
        "commit": "0123456789abcdef",
        "machine": {"cpus": 2},
        "settings": {"threads": 2, "sample": sample, "vocab": 8000, "batch": 64, "train_steps": 5, "small": False},
        "loadavg_start": [1.0, 1.0, 1.0],
        "loadavg_end": [2.0, 2.0, 2.0],
        "total_s": 60.0,
        "runs": [run(100_000, 1), run(1_000_000, 10)],
    }


def test_extrapolation_is_linear_through_the_two_largest_runs(wmt_scale: ModuleType) -> None:
    record = _record(sample=2_000_000)
    # prepare: 10 s at 100k, 100 s at 1M -> 100 + 90/900k * 3.5M = 450 s; memory flat at 150 MiB
    assert wmt_scale.extrapolated(record, "prepare", "seconds", 4_500_000) == pytest.approx(450.0)
    assert wmt_scale.extrapolated(record, "prepare", "peak_tree_rss_mib", 4_500_000) == pytest.approx(150.0)
    # a sample above 1M: subword training still grows with the corpus, 1000 + 900/900k * 3.5M
    assert wmt_scale.extrapolated(record, "subword", "seconds", 4_500_000) == pytest.approx(4500.0)


def test_a_capped_sample_grows_only_by_the_pass_over_the_corpus(wmt_scale: ModuleType) -> None:
    record = _record(sample=200_000)
    # 1000 s at 1M, the pass over the corpus 2 s -> 20 s: 1000 + 18/900k * 3.5M = 1070 s; memory stays 3000 MiB
    assert wmt_scale.extrapolated(record, "subword", "seconds", 4_500_000) == pytest.approx(1070.0)
    assert wmt_scale.extrapolated(record, "subword", "peak_tree_rss_mib", 4_500_000) == pytest.approx(3000.0)
    table = wmt_scale.markdown(record)
    assert "| subword | 100 / 300 | 1,000 / 3,000 | 1,070 / 3,000 |" in table
    assert "| encode | 50 / 300 | 500 / 1,200 | 2,250 / 4,700 |" in table
    assert "load average 1.0 at the start, 2.0 at the end" in table


def test_the_train_step_grows_by_its_corpus_passes_and_the_store(wmt_scale: ModuleType) -> None:
    record = _record(sample=200_000)
    # 20 s in both runs, but checking the examples grew 1 -> 10 s: 20 + 9/900k * 3.5M = 55 s; memory grows by the
    # encoded store (1 -> 10 MiB), not by the model's steps: 1100 + 9/900k * 3.5M = 1135 MiB
    assert wmt_scale.extrapolated(record, "train", "seconds", 4_500_000) == pytest.approx(55.0)
    assert wmt_scale.extrapolated(record, "train", "peak_tree_rss_mib", 4_500_000) == pytest.approx(1135.0)
    assert "| train | 20 / 1,010 | 20 / 1,100 | 55 / 1,135 |" in wmt_scale.markdown(record)
    record["runs"] = record["runs"][:1]
    assert wmt_scale.extrapolated(record, "train", "seconds", 4_500_000) is None
    assert "extrapolated" not in wmt_scale.markdown(record)


@pytest.mark.slow
def test_small_run_measures_every_step(shared_data: Path, tmp_path: Path) -> None:
    out = tmp_path / "wmt_scale.json"
    command = [sys.executable, "bench/wmt_scale.py", "--small", "--pairs", "3000", "--vocab", "200", "--threads", "1"]
    command += ["--shared", str(shared_data), "--work", str(tmp_path), "--out", str(out)]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    record = read_json(out)
    (run,) = record["runs"]
    steps = run["steps"]
    assert run["pairs"] == 3000 and sorted(steps) == ["build", "encode", "prepare", "subword", "train"]
    assert steps["build"]["figures"]["distinct_pairs"] > 2900  # variants, not copies
    assert steps["prepare"]["figures"]["train_pairs"] == 3000
    assert steps["subword"]["figures"]["sampled_pairs"] == 3000
    assert steps["encode"]["figures"]["pairs"] == 3000 and steps["encode"]["figures"]["id_dtype"] == "uint16"
    assert steps["train"]["figures"]["batches_per_epoch"] == 47  # ceil(3000 / 64)
    assert all(step["seconds"] > 0 and step["peak_rss_mib"] > 0 for step in steps.values())
    assert len(record["loadavg_start"]) == 3 and len(record["loadavg_end"]) == 3
    assert "| encode |" in done.stdout
