"""The retrieval grid queued (`mmtr grid --jobs N`) against the serial `dvc repro`, in wall seconds.

In a scratch copy of the repository's code with the repository's params.yaml (its retrieval runs as they are; the
MMT and the compact encoder train for fewer epochs, which changes how long the upstream stages take, not the
retrieval runs' data sizes), git and DVC initialised and one Prefect server for every stage:

1. the stages the retrieval runs read are brought up to date once and committed, then the project is copied;
2. serial: `dvc repro` in one copy (every retrieval run, one after the other, then the report);
3. queued: `mmtr grid --jobs N` in the other (the runs as queued experiments on N workers, gathered, the report).

Each side's torch uses the threads it gets by default: serial all the cores, a queue worker its share
(``OMP_NUM_THREADS`` = cores // N). Whether both leave the same output hashes in dvc.lock is recorded too (CPU
float sums may differ in their last bits with another thread count). Writes bench/results/grid_queue.json, with
the load averages at the start and the end (the machine may be shared).

    python -m bench.grid_queue             # from the repository root
    python -m bench.grid_queue --jobs 4
    python -m bench.grid_queue --from ../finished-clone   # copies of a finished `make demo` workspace instead
    python -m bench.grid_queue --markdown bench/results/grid_queue.json --into docs/scaling.md   # the table

With ``--from`` the bench skips step 1: it copies a workspace whose stages are up to date (a clone after
`make demo`: git, dvc.lock, its DVC cache), forgets the retrieval runs there (their dvc.lock entries and outputs),
commits, and times the same two sides on the demo's own settings.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from common.files import write_text
from mmtr.doc_sections import add_section_arguments, publish_section
from mmtr.dvc_yaml import update_dvc_yaml
from mmtr.grid import plan
from mmtr.local_server import prefect_server
from tests.flows.helpers import REPO, copy_project_code, write_params

RESULTS = REPO / "bench" / "results" / "grid_queue.json"
SECTION = "grid-queue"  # the docs section this bench writes (mmtr.doc_sections)


def scratch_project(root: Path, env: dict[str, str]) -> None:
    """The code and the repository's params (shorter upstream training) in ``root``, committed, DVC initialised."""
    copy_project_code(root)
    tree = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
    tree["mmt"]["pretrain"]["epochs"] = 1
    tree["mmt"]["finetune"]["epochs"] = 2
    tree["features"]["compact"]["training"]["epochs"] = 2
    write_params(root / "params.yaml", tree)
    update_dvc_yaml(root / "params.yaml")
    for command in (["git", "init", "-q"], ["dvc", "init", "-q"], ["dvc", "config", "core.analytics", "false"]):
        subprocess.run(command, cwd=root, env=env, check=True, capture_output=True)
    shutil.copytree(REPO / ".dvc" / "plots", root / ".dvc" / "plots")  # the learning curves' chart template
    commit(root, env, "code and params")


def copied_workspace(source: Path, root: Path, runs: tuple[str, ...], env: dict[str, str]) -> None:
    """``source`` (a finished workspace) copied to ``root`` without its environment, the retrieval runs forgotten
    (their dvc.lock entries and outputs removed), committed."""
    skip = shutil.ignore_patterns(".venv", ".prefect", ".pytest_cache", "__pycache__", ".site", "dvc_plots")
    shutil.copytree(source, root, symlinks=True, ignore=skip)
    lock_path = root / "dvc.lock"
    lock = yaml.safe_load(lock_path.read_text(encoding="utf-8"))
    for stage in runs:
        for out in lock["stages"].pop(stage)["outs"]:
            target = root / out["path"]
            if target.is_dir():
                shutil.rmtree(target)
            else:
                target.unlink(missing_ok=True)
    lock_path.write_text(yaml.safe_dump(lock, sort_keys=False), encoding="utf-8")
    commit(root, env, "retrieval runs forgotten")


def commit(root: Path, env: dict[str, str], message: str) -> None:
    subprocess.run(["git", "add", "-A"], cwd=root, env=env, check=True, capture_output=True)
    subprocess.run(
        ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.org", "commit", "-q", "-m", message],
        cwd=root,
        env=env,
        check=True,
        capture_output=True,
    )


def timed(command: list[str], root: Path, env: dict[str, str]) -> float:
    print("$ " + " ".join(command), flush=True)
    start = time.perf_counter()
    done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}")
    print(f"  {seconds:.1f} s", flush=True)
    return seconds


def output_hashes(root: Path, stages: tuple[str, ...]) -> dict[str, dict[str, str]]:
    lock = yaml.safe_load((root / "dvc.lock").read_text(encoding="utf-8"))["stages"]
    return {stage: {out["path"]: out["md5"] for out in lock[stage]["outs"]} for stage in stages}


def markdown(record: dict[str, Any]) -> str:
    """The table docs/scaling.md carries, from the JSON alone."""
    start, end = record["load_average_start"][0], record["load_average_end"][0]
    threads = record["threads"]
    lines = [
        f"On {record['machine']}, {record['workspace']}: {len(record['runs'])} retrieval runs "
        f"({', '.join(record['runs'])}), load average {start:g} at the start and {end:g} at the end.",
        "",
        "| how | wall time | torch threads per run | same output hashes |",
        "| --- | ---: | --- | --- |",
        f"| serial `dvc repro` (the runs, then the report) | {record['serial_seconds']:.1f} s | "
        f"{threads['serial']} | |",
        f"| `mmtr grid --jobs {record['jobs']}` (queue, workers, gathering, the report) | "
        f"{record['queued_seconds']:.1f} s | {threads['queued_worker']} | "
        f"{'yes' if record['same_output_hashes'] else 'no (another thread count)'} |",
        "",
        f"Speed-up: {record['speedup']:.2f}x.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.grid_queue", description=__doc__)
    parser.add_argument("--jobs", type=int, default=2, help="queue workers (default 2)")
    parser.add_argument("--from", dest="source", type=Path, help="a finished workspace to copy (skips the upstream)")
    add_section_arguments(parser)
    args = parser.parse_args()
    if publish_section(args, SECTION, markdown):
        return
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="grid-queue-") as scratch:
        base = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
        base.pop("PYTHONPATH", None)
        base.pop("OMP_NUM_THREADS", None)  # each side's own default (see the docstring)
        with prefect_server(home=Path(scratch) / ".prefect-server") as api_url:
            env = {**base, "PREFECT_API_URL": api_url}
            queued = Path(scratch) / "queued"
            upstream: float | None = None
            if args.source:
                stages = plan(args.source / "params.yaml")
                copied_workspace(args.source.resolve(), queued, stages.runs, env)
            else:
                scratch_project(queued, env)
                stages = plan(queued / "params.yaml")
                print(f"bringing the upstream stages up to date: {' '.join(stages.upstream)} ...", flush=True)
                upstream = timed(["dvc", "repro", *stages.upstream], queued, env)
                commit(queued, env, "upstream stages")
            serial = Path(scratch) / "serial"
            shutil.copytree(queued, serial, symlinks=True)
            serial_seconds = timed(["dvc", "repro"], serial, env)
            grid_command = [sys.executable, "-m", "mmtr.cli", "grid", "--jobs", str(args.jobs)]
            queued_seconds = timed(grid_command, queued, env)
            same = output_hashes(queued, stages.runs) == output_hashes(serial, stages.runs)
    cores = os.cpu_count() or 1
    result: dict[str, Any] = {
        "bench": "grid_queue",
        "machine": f"{cores} CPU cores ({platform.machine()}, {platform.system()})",
        "runs": [run.removeprefix("train_retrieval@") for run in stages.runs],
        "jobs": args.jobs,
        "threads": {"serial": "torch default (every core)", "queued_worker": max(1, cores // args.jobs)},
        "workspace": "a finished demo workspace, copied" if args.source else "scratch project (shorter upstream)",
        "upstream_seconds": None if upstream is None else round(upstream, 1),
        "serial_seconds": round(serial_seconds, 1),
        "queued_seconds": round(queued_seconds, 1),
        "speedup": round(serial_seconds / queued_seconds, 2),
        "same_output_hashes": same,
        "what_is_timed": "serial: `dvc repro` (the runs, then the report); queued: `mmtr grid` (queue, workers, "
        "gather, the report)",
        "load_average_start": [round(value, 2) for value in load_start],
        "load_average_end": [round(value, 2) for value in os.getloadavg()],
    }
    write_text(RESULTS, json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
