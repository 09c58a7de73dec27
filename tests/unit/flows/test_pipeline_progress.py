"""Progress as the Prefect UI shows it: the pipeline flow's view of `dvc repro` (which stage ran, which were unchanged
or failed, and for how long) and the notes of long stages."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from flows.pipeline import ReproTracker, dag_stages, stages_markdown, stages_record

REPO = Path(__file__).resolve().parents[3]

# what DVC 3 prints, with a stage's own output in between
OUTPUT = """\
Stage 'generate' didn't change, skipping
Running stage 'prepare@synthetic':
> python -m flows.prepare --params params.yaml --corpus synthetic --out data/prepared/synthetic
12:00:01.000 | INFO    | Flow run 'prepare@synthetic' - Finished in state Completed()
Stage 'prepare_parallel' is cached - skipping run, checking out outputs
Running stage 'train_mmt@de':
> python -m flows.train_mmt --params params.yaml --target de
ERROR: failed to reproduce 'train_mmt@de': failed to run: python -m flows.train_mmt, exited with 2
"""


def test_the_tracker_follows_each_stage_and_times_the_ones_that_ran() -> None:
    tracker = ReproTracker(["generate", "prepare@synthetic", "prepare_parallel", "train_mmt@de", "report"])
    changed = [tracker.feed(line, now=10.0 * index) for index, line in enumerate(OUTPUT.splitlines())]
    assert changed == [True, True, False, False, True, True, False, True]
    tracker.finish(100.0, succeeded=False)
    states = {name: (record.status, record.seconds) for name, record in tracker.stages.items()}
    assert states == {
        "generate": ("unchanged", None),
        "prepare@synthetic": ("ran", 30.0),  # announced at line 1, ended when line 4 said the next stage's fate
        "prepare_parallel": ("unchanged", None),
        "train_mmt@de": ("failed", 20.0),  # announced at line 5, failed at line 7
        "report": ("pending", None),  # never reached
    }
    assert tracker.done == 4


def test_the_last_stage_ends_with_the_command_and_unplanned_stages_are_added() -> None:
    tracker = ReproTracker(["generate"])
    tracker.feed("Running stage 'generate':\n", now=1.0)
    tracker.feed("Running stage 'extra':\n", now=4.5)
    assert tracker.stages["generate"].status == "ran" and tracker.stages["extra"].status == "running"
    tracker.finish(6.0, succeeded=True)
    assert [(r.name, r.status, r.seconds) for r in tracker.stages.values()] == [
        ("generate", "ran", 3.5),
        ("extra", "ran", 1.5),
    ]


def test_the_stage_table_links_each_run_it_knows() -> None:
    tracker = ReproTracker(["generate", "report"])
    tracker.feed("Running stage 'generate':", now=0.0)
    tracker.finish(2.25, succeeded=True)
    markdown = stages_markdown(tracker, {"generate": "http://ui/runs/flow-run/1"}, total_seconds=3.0)
    assert markdown.splitlines() == [
        "# Pipeline: 1 of 2 stages done in 3 s",
        "",
        "| stage | status | wall time (s) | flow run |",
        "|---|---|---|---|",
        "| generate | ran | 2.2 | [generate](http://ui/runs/flow-run/1) |",
        "| report | pending | - | - |",
    ]


def test_dag_stages_are_this_repos_dvc_stages_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    everything = dag_stages([])
    listed = subprocess.run(["dvc", "stage", "list", "--name-only"], capture_output=True, text=True, check=True)
    assert sorted(everything) == sorted(listed.stdout.split())
    assert everything.index("generate") < everything.index("train_mmt@de") < everything.index("report")
    upstream = dag_stages(["augment"])
    assert "augment" in upstream and "generate" in upstream and "report" not in upstream


def test_the_stage_record_holds_the_table_as_data() -> None:
    """What `--record` writes, and `mmtr results` publishes: every stage's fate and wall time, rounded to 0.1 s."""
    tracker = ReproTracker(["generate", "prepare@synthetic", "prepare_parallel", "train_mmt@de", "report"])
    for index, line in enumerate(OUTPUT.splitlines()):
        tracker.feed(line, now=10.04 * index)
    tracker.finish(100.0, succeeded=False)
    record = stages_record(tracker, ["dvc", "repro"], total_seconds=71.26)
    assert record["machine"].endswith(")") and "CPU cores" in record["machine"]
    assert {key: value for key, value in record.items() if key != "machine"} == {
        "command": "dvc repro",
        "seconds": 71.3,
        "stages": [
            {"stage": "generate", "status": "unchanged", "seconds": None},
            {"stage": "prepare@synthetic", "status": "ran", "seconds": 30.1},
            {"stage": "prepare_parallel", "status": "unchanged", "seconds": None},
            {"stage": "train_mmt@de", "status": "failed", "seconds": 20.1},
            {"stage": "report", "status": "pending", "seconds": None},
        ],
    }
