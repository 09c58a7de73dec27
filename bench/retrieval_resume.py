"""The resume test's timings: `train_retrieval` run whole, killed with SIGKILL mid-training, and rerun (resumed).

Runs ``tests/flows/test_retrieval_resume.py`` (the tests' tiny dataset; SAN, two replicates; the second killed once
its state after epoch 2 is on disk), which prints its timings as one JSON line, and writes them, with the CPU count
and the load average at the start and the end (a figure taken under load says so), to
``bench/results/retrieval_resume.json``. ``--markdown`` prints the sentence docs/retrieval.md carries; with
``--into`` it replaces the one between the markers there.

    python -m bench.retrieval_resume                     # from the repository root (minutes: the tiny pipeline first)
    python -m bench.retrieval_resume --markdown bench/results/retrieval_resume.json --into docs/retrieval.md
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

REPO = Path(__file__).resolve().parents[1]
TEST = "tests/flows/test_retrieval_resume.py"
DEFAULT_OUT = REPO / "bench" / "results" / "retrieval_resume.json"
PREFIX = "resume timings "
MARKERS = ("<!-- resume-timings:start -->", "<!-- resume-timings:end -->")


def measure() -> dict[str, Any]:
    """Run the test once; its timings with the machine's load around them."""
    load_start = os.getloadavg()
    command = [sys.executable, "-m", "pytest", TEST, "-n", "0", "-q", "-s", "-p", "no:cacheprovider"]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    load_end = os.getloadavg()
    lines = [line for line in done.stdout.splitlines() if line.startswith(PREFIX)]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"{TEST} failed (exit {done.returncode}):\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}")
    timings = json.loads(lines[-1].removeprefix(PREFIX))
    return {
        "bench": "retrieval_resume",
        "cpus": os.cpu_count(),
        "loadavg_start": [round(value, 2) for value in load_start],
        "loadavg_end": [round(value, 2) for value in load_end],
        **{key: round(value, 1) if isinstance(value, float) else value for key, value in timings.items()},
    }


def markdown(record: dict[str, Any]) -> str:
    """The sentence docs/retrieval.md carries, wrapped like the docs' prose."""
    loaded = max(record["loadavg_start"][0], record["loadavg_end"][0]) > record["cpus"]
    sentence = (
        f"Measured by `{TEST}` (`bench/results/retrieval_resume.json`) on {record['cpus']} CPU cores, 1-minute load "
        f"average {record['loadavg_start'][0]:g} at the start and {record['loadavg_end'][0]:g} at the end"
        + (" (a shared machine: every figure is inflated)" if loaded else "")
        + f": two replicates of {record['epochs']} epochs ran whole in {record['uninterrupted_s']:g} s; the run "
        f"killed after the second replicate's epoch {record['killed_after_epoch']} had run "
        f"{record['killed_after_s']:g} s, "
        f"and its rerun took {record['resumed_s']:g} s (the first replicate's result read back, the second's last "
        f"{record['epochs'] - record['killed_after_epoch']} epochs, both replicates tested). Each run includes the "
        "stage's start (Python, torch, Prefect)."
    )
    return textwrap.fill(sentence, width=120, break_on_hyphens=False, break_long_words=False) + "\n"


def replace_between_markers(document: Path, text: str) -> None:
    content = document.read_text(encoding="utf-8")
    start, end = content.find(MARKERS[0]), content.find(MARKERS[1])
    if start < 0 or end < start:
        raise SystemExit(f"{document}: needs the lines {MARKERS[0]} and {MARKERS[1]}, in that order")
    write_text(document, content[: start + len(MARKERS[0])] + "\n\n" + text + "\n" + content[end:])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the JSON file")
    parser.add_argument("--markdown", type=Path, metavar="JSON", help="print the sentence of a finished run and exit")
    parser.add_argument("--into", type=Path, metavar="MD", help="with --markdown: write it between the markers")
    args = parser.parse_args(argv)
    if args.into and not args.markdown:
        parser.error("--into goes with --markdown")
    if args.markdown:
        sentence = markdown(json.loads(args.markdown.read_text(encoding="utf-8")))
        if args.into:
            replace_between_markers(args.into, sentence)
        else:
            print(sentence, end="")
        return
    record = measure()
    write_text(args.out, json.dumps(record, indent=2) + "\n")
    print(json.dumps(record))


if __name__ == "__main__":
    main()
