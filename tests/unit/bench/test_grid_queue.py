"""bench/grid_queue.py: the docs' table comes from the JSON alone."""

from __future__ import annotations

from bench.grid_queue import markdown

RECORD = {
    "bench": "grid_queue",
    "machine": "2 CPU cores (x86_64, Linux)",
    "workspace": "a finished demo workspace, copied",
    "runs": ["san-none-all", "san-mt_f-all"],
    "jobs": 2,
    "threads": {"serial": "torch default (every core)", "queued_worker": 1},
    "upstream_seconds": None,
    "serial_seconds": 120.04,
    "queued_seconds": 150.0,
    "speedup": 0.8,
    "same_output_hashes": False,
    "load_average_start": [0.5, 0.4, 0.3],
    "load_average_end": [2.0, 1.0, 0.5],
}


def test_the_table_states_both_sides_and_the_speed_up() -> None:
    text = markdown(RECORD)
    assert text.startswith(
        "On 2 CPU cores (x86_64, Linux), a finished demo workspace, copied: 2 retrieval runs (san-none-all, "
        "san-mt_f-all), load average 0.5 at the start and 2 at the end.\n"
    )
    assert "| serial `dvc repro` (the runs, then the report) | 120.0 s | torch default (every core) | |" in text
    assert (
        "| `mmtr grid --jobs 2` (queue, workers, gathering, the report) | 150.0 s | 1 | no (another thread count) |"
        in text
    )
    assert text.endswith("Speed-up: 0.80x.\n")
