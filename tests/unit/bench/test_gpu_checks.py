"""bench/gpu_checks.py: a tiny run on the CPU reports every check, imports nothing a bare GPU machine lacks, and
its runner keeps going past a failing or overrunning check; the Markdown table comes from the JSON alone."""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from common.runtime import Runtime
from mmtr.doc_sections import markers

REPO = Path(__file__).resolve().parents[3]
BENCH = REPO / "bench"
CHECK_NAMES = ["cuda_tests", "extraction", "mmt_train", "mmt_decode", "retrieval_train", "scan_eval", "bf16_agreement"]
NOT_ON_THE_GPU_MACHINE = ("prefect", "dvc", "pydantic", "dask", "httpx")


@pytest.fixture(scope="module")
def gpu_checks() -> ModuleType:
    sys.path.insert(0, str(BENCH))  # the benches import each other as top-level modules, as when run as scripts
    try:
        return importlib.import_module("gpu_checks")
    finally:
        sys.path.remove(str(BENCH))


@pytest.mark.slow
def test_small_cpu_run_reports_every_check(tmp_path: Path) -> None:
    out = tmp_path / "gpu_checks.json"
    command = [sys.executable, "-X", "importtime", "bench/gpu_checks.py", "--device", "cpu", "--small"]
    done = subprocess.run(
        [*command, "--threads", "1", "--out", str(out)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    imported = {name.split(".")[0] for name in re.findall(r"^import time:.*\|\s+(\S+)$", done.stderr, re.MULTILINE)}
    assert {"torch", "benchkit"} <= imported  # the report was read
    assert sorted(imported & set(NOT_ON_THE_GPU_MACHINE)) == []
    record = json.loads(out.read_text())
    assert set(record) == {
        "script", "created", "commit", "machine", "precision", "small", "weights", "budget_s", "order", "checks",
        "total_s",
    }  # fmt: skip
    assert record["order"] == CHECK_NAMES == list(record["checks"])
    assert (record["machine"]["device"], record["precision"], record["small"]) == ("cpu", "fp32", True)
    for name, result in record["checks"].items():
        assert result["status"] == "ok", f"{name}: {result['error']}"
        assert result["figures"], name
        for figure, item in result["figures"].items():
            assert isinstance(item["value"], int | float) and item["unit"], f"{name}.{figure}: {item}"
        assert 0 < result["seconds"] <= result["cap_s"] + 1, name
    figures = {name: {key: item["value"] for key, item in result["figures"].items()} for name, result in
               record["checks"].items()}  # fmt: skip
    tests = figures["cuda_tests"]  # without CUDA every gpu-marked test is skipped, none passes or fails
    assert (tests["passed"], tests["failed"], tests["errors"]) == (0, 0, 0) and tests["skipped"] >= 1
    assert {f for f in figures["extraction"] if f.startswith("images_per_s")} == {
        "images_per_s_batch_1",
        "images_per_s_batch_2",
    }
    stages = {f for f in figures["extraction"] if f.startswith("stage_")}
    assert stages == {
        f"stage_{s}_ms_per_image_batch_2"
        for s in ("preprocess", "backbone", "rpn_proposals", "roipool", "res5", "heads", "selection")
    }
    assert {"san_step_forward_ms", "san_step_backward_ms", "san_step_optimiser_ms"} <= set(figures["retrieval_train"])
    agreement = figures["bf16_agreement"]
    # bf16 really ran: the two precisions differ, by a bf16-sized amount (8 bits of mantissa: ~0.4 % per value)
    for key in ("mmt_logits_relative_error", "butd_backbone_relative_error", "butd_region_features_relative_error"):
        assert 1e-4 < agreement[key] < 0.05, key
    for key in ("mmt_teacher_forced_top1_agreement", "mmt_greedy_token_agreement", "mmt_greedy_identical_sentences"):
        assert 0 <= agreement[key] <= 1, key
    assert 0 <= agreement["scan_t2i_r1_bf16"] <= 100


def test_a_failing_check_records_its_error_and_an_overrunning_one_keeps_its_figures(gpu_checks: ModuleType) -> None:
    def failing(context: Any, report: Any) -> None:
        raise ValueError("no such kernel")

    def overrunning(context: Any, report: Any) -> None:
        report.add("first", 1.5, "steps/s")
        time.sleep(30)

    runtime, sizes = Runtime("cpu", "fp32"), gpu_checks.small_sizes()
    planned = gpu_checks.Planned("failing", failing, 5, 5, "raises")
    failed = gpu_checks.run_check(planned, runtime, sizes, cap_s=5, small=True)
    assert (failed["status"], failed["figures"]) == ("error", {})
    assert failed["error"].strip().splitlines()[-1] == "ValueError: no such kernel"
    started = time.perf_counter()
    planned = gpu_checks.Planned("overrunning", overrunning, 1, 1, "sleeps")
    cut = gpu_checks.run_check(planned, runtime, sizes, cap_s=0.3, small=True)
    assert time.perf_counter() - started < 5
    assert (cut["status"], cut["figures"]) == ("timeout", {"first": {"value": 1.5, "unit": "steps/s"}})
    assert cut["error"] == "time cap of 0.3 s reached (figures measured before it are kept)"


def test_a_check_without_a_figure_is_an_error(gpu_checks: ModuleType) -> None:
    planned = gpu_checks.Planned("silent", lambda context, report: None, 5, 5, "measures nothing")
    result = gpu_checks.run_check(planned, Runtime("cpu", "fp32"), gpu_checks.small_sizes(), cap_s=5, small=True)
    assert (result["status"], result["error"]) == ("error", "the check finished without a figure")


def test_plan_fits_the_calls_in_a_share_of_the_time_left(gpu_checks: ModuleType) -> None:
    context = gpu_checks.Context(Runtime("cpu", "fp32"), gpu_checks.paper_sizes(), time.perf_counter() + 100, False)
    assert context.plan(1.0, 0.5) == 49  # 0.5 x ~99.99 s left / 1 s per call
    assert context.plan(0.01, 0.5) == 60  # capped at sizes.most_calls
    assert context.plan(0.01, 0.5, most=8) == 8
    assert context.plan(500.0, 0.5, least=2) == 2


def test_junit_counts(gpu_checks: ModuleType, tmp_path: Path) -> None:
    report = tmp_path / "junit.xml"
    report.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.a" name="test_ok"/>'
        '<testcase classname="tests.a" name="test_bad"><failure message="assert 1 == 2">...</failure></testcase>'
        '<testcase classname="tests.b" name="test_broken"><error message="fixture failed"/></testcase>'
        '<testcase classname="tests.b" name="test_gpu"><skipped message="needs a CUDA device"/></testcase>'
        "</testsuite></testsuites>"
    )
    counts, failed, skipped = gpu_checks._junit_counts(report)
    assert counts == {"passed": 1, "failed": 1, "errors": 1, "skipped": 1}
    assert failed == ["tests.a::test_bad: assert 1 == 2", "tests.b::test_broken: fixture failed"]
    assert skipped == ["needs a CUDA device"]


RECORD = {
    "created": "2026-01-02T03:04:05+00:00",
    "commit": "0123456789abcdef",
    "machine": {
        "device_name": "NVIDIA H100",
        "capability": "9.0",
        "memory_gib": 79.2,
        "torch": "2.11.0",
        "cuda": "13.0",
    },
    "precision": "bf16",
    "small": False,
    "total_s": 201.4,
    "order": ["cuda_tests", "extraction", "scan_eval"],
    "checks": {
        "cuda_tests": {"status": "ok", "figures": {"passed": {"value": 3, "unit": "tests"}}, "error": None},
        "extraction": {
            "status": "timeout",
            "figures": {"images_per_s_batch_8": {"value": 123.456, "unit": "images/s"}},
            "error": "time cap of 60 s reached (figures measured before it are kept)",
        },
    },
}


def test_markdown_table_from_the_json(gpu_checks: ModuleType) -> None:
    assert gpu_checks.markdown(RECORD) == (
        "Run of 2026-01-02T03:04:05+00:00 on NVIDIA H100 (compute capability 9.0, 79.2 GiB), torch 2.11.0, "
        "CUDA 13.0, precision bf16, commit 0123456789; 201 s in all. Weights are random.\n"
        "\n"
        "| check | figure | value | unit |\n"
        "| --- | --- | --- | --- |\n"
        "| cuda_tests | passed | 3 | tests |\n"
        "| extraction | images_per_s_batch_8 | 123.5 | images/s |\n"
        "| extraction | timeout | | time cap of 60 s reached (figures measured before it are kept) |\n"
        "| scan_eval | not run | | |\n"
    )


def test_markdown_into_a_document_replaces_what_is_between_the_markers(gpu_checks: ModuleType, tmp_path: Path) -> None:
    document = tmp_path / "scaling.md"
    start, end = markers(gpu_checks.SECTION)
    document.write_text(f"# Scaling\n\n{start}\nold table\n{end}\n\nAfter.\n")
    record = tmp_path / "gpu.json"
    record.write_text(json.dumps(RECORD))
    for _ in range(2):  # a second run replaces the first table instead of adding one
        gpu_checks.main(["--markdown", str(record), "--into", str(document)])
    table = gpu_checks.markdown(RECORD)
    assert document.read_text() == f"# Scaling\n\n{start}\n\n{table}\n{end}\n\nAfter.\n"
    document.write_text("# Scaling\n")
    with pytest.raises(SystemExit, match=re.escape(f"{document}: needs the lines {start} and {end}, in that order")):
        gpu_checks.main(["--markdown", str(record), "--into", str(document)])
