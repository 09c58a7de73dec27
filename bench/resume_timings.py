"""The resume tests' timings: a training stage run whole, killed with SIGKILL mid-training, and rerun (resumed).

Runs the stage's resume test on the tests' tiny dataset, which prints its timings as one JSON line, and writes them,
with the CPU count and the load average at the start and the end (a figure taken under load says so), to
``bench/results/resume_timings-<stage>.json``:

- ``train_mmt``: ``tests/flows/test_train_mmt_resume.py``, both directions' MMT; killed once the en->de fine-tuning
  state is at epoch 2 on disk; the rerun reads pre-training's finished state back and resumes fine-tuning.
- ``train_retrieval``: ``tests/flows/test_retrieval_resume.py``, SAN, two replicates; the second killed once its state
  after epoch 2 is on disk.

``--markdown`` prints the sentence the stage's docs page carries; with ``--into`` it replaces the one between the
markers there.

    python -m bench.resume_timings train_mmt          # from the repository root (minutes: the tiny pipeline first)
    python -m bench.resume_timings train_mmt --markdown bench/results/resume_timings-train_mmt.json \
        --into docs/pipeline.md
    python -m bench.resume_timings train_retrieval --markdown bench/results/resume_timings-train_retrieval.json \
        --into docs/retrieval.md
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from common.files import write_text
from mmtr.doc_sections import add_section_arguments, publish_section

REPO = Path(__file__).resolve().parents[1]
TESTS = {"train_mmt": "tests/flows/test_train_mmt_resume.py", "train_retrieval": "tests/flows/test_retrieval_resume.py"}
PREFIX = "resume timings "
SECTION = "resume-timings"  # the docs section this bench writes (mmtr.doc_sections)


def measure(stage: str) -> dict[str, Any]:
    """Run the stage's test once; its timings with the machine's load around them."""
    test = TESTS[stage]
    load_start = os.getloadavg()
    command = [sys.executable, "-m", "pytest", test, "-n", "0", "-q", "-s", "-p", "no:cacheprovider"]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    load_end = os.getloadavg()
    lines = [line for line in done.stdout.splitlines() if line.startswith(PREFIX)]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"{test} failed (exit {done.returncode}):\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}")
    timings = json.loads(lines[-1].removeprefix(PREFIX))
    return {
        "bench": "resume_timings",
        "stage": stage,
        "cpus": os.cpu_count(),
        "loadavg_start": [round(value, 2) for value in load_start],
        "loadavg_end": [round(value, 2) for value in load_end],
        **{key: round(value, 1) if isinstance(value, float) else value for key, value in timings.items()},
    }


def markdown(record: dict[str, Any]) -> str:
    """The sentence the stage's docs page carries, wrapped like the docs' prose."""
    stage = record["stage"]
    loaded = max(record["loadavg_start"][0], record["loadavg_end"][0]) > record["cpus"]
    epochs, killed = record["epochs"], record["killed_after_epoch"]
    left = f"last {epochs - killed} epoch" + ("s" if epochs - killed != 1 else "")
    if stage == "train_mmt":
        what = f"both directions' MMT (pre-training, then {epochs} fine-tuning epochs)"
        killed_at = f"the en->de fine-tuning's epoch {killed}"
        rerun = f"pre-training's finished state read back, the en->de fine-tuning's {left}"
    else:
        what = f"two replicates of {epochs} epochs"
        killed_at = f"the second replicate's epoch {killed}"
        rerun = f"the first replicate's result read back, the second's {left}"
    sentence = (
        f"Measured by `{TESTS[stage]}` (`bench/results/resume_timings-{stage}.json`) on {record['cpus']} CPU cores, "
        f"1-minute load average {record['loadavg_start'][0]:g} at the start and {record['loadavg_end'][0]:g} at the end"
        + (" (a shared machine: every figure is inflated)" if loaded else "")
        + f": {what} ran whole in {record['uninterrupted_s']:g} s; the run killed after {killed_at} had run "
        f"{record['killed_after_s']:g} s, and its rerun took {record['resumed_s']:g} s ({rerun}, then the tests). "
        "Each run includes the stage's start (Python, torch, Prefect)."
    )
    return textwrap.fill(sentence, width=120, break_on_hyphens=False, break_long_words=False) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("stage", choices=sorted(TESTS), help="the training stage whose resume test runs")
    parser.add_argument("--out", type=Path, help="the JSON file (default: bench/results/resume_timings-<stage>.json)")
    add_section_arguments(parser)
    args = parser.parse_args(argv)
    if publish_section(args, SECTION, markdown):
        return
    record = measure(args.stage)
    out = args.out or REPO / "bench" / "results" / f"resume_timings-{args.stage}.json"
    write_text(out, json.dumps(record, indent=2) + "\n")
    print(json.dumps(record))


if __name__ == "__main__":
    main()
