"""bench/cli_latency.py: the import seconds read from `-X importtime`'s report, and the docs' table from the JSON
alone."""

from __future__ import annotations

import pytest

from bench.cli_latency import import_report, markdown

REPORT = """import time: self [us] | cumulative | imported package
import time:       120 |        120 |   _io
import time:      2000 |       2500 | site
import time:     50000 |    1500000 |     torch._C
import time:     60000 |    1600000 |   torch
import time:      3000 |    1700000 | common.checkpoints
import time:      1000 |     200000 | pyarrow.parquet
"""

RECORD = {
    "bench": "cli_latency",
    "setup": "a gallery of 200 images",
    "cpu": "AMD EPYC",
    "cores": 2,
    "commit": "abc1234",
    "repeats": 5,
    "torch_threads": 2,
    "random_weights": True,
    "commands": [
        {
            "name": "mmtr --help",
            "command": "mmtr --help",
            "seconds": {"median": 0.104},
            "import_seconds": {"median": 0.051},
            "heavy_imports": [],
        },
        {
            "name": "search, warm cache",
            "command": "mmtr search ...",
            "seconds": {"median": 2.456},
            "import_seconds": {"median": 1.9},
            "heavy_imports": ["torch", "pyarrow"],
        },
    ],
    "load_average_start": [0.5, 0.4, 0.3],
    "load_average_end": [1.25, 1.0, 0.5],
}


def test_the_import_seconds_sum_the_top_level_imports_only() -> None:
    seconds, heavy = import_report(REPORT)
    assert seconds == pytest.approx((2500 + 1700000 + 200000) / 1e6)  # nested ones are inside their parent's
    assert heavy == ["torch", "pyarrow"]


def test_the_table_comes_from_the_json() -> None:
    text = markdown(RECORD)
    assert text.startswith(
        "On AMD EPYC (2 cores), commit abc1234, a gallery of 200 images; load average 0.5 at the start and 1.25 at "
        "the end. Medians of 5 runs, each a fresh process with 2 torch threads:\n"
    )
    assert "| mmtr --help | 0.10 s | 0.05 s | none |" in text
    assert "| search, warm cache | 2.46 s | 1.90 s | torch, pyarrow |" in text
    assert "random: they decode to the length limit" in text
    assert text.endswith("The command lines are in `bench/results/cli_latency.json`.\n")
