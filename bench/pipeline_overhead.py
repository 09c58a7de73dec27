"""What the pipeline flow costs on top of `dvc repro` (not a test; prints numbers).

In a scratch copy of the repository's code with the tests' tiny params (git and DVC initialised, one Prefect
server for everything, started here unless ``PREFECT_API_URL`` answers), the targets are brought up to date once;
then, ``--repeats`` times in alternation, the same up-to-date repro is timed

- plain: ``dvc repro <targets>``;
- as the flow: ``python -m flows.pipeline <targets>`` (dvc.yaml regenerated, ``dvc dag``, one flow run with its
  progress and stage-table artifacts, around the same ``dvc repro``).

Each run's wall seconds are printed, then the medians and their difference: the overhead of launching from the
flow. Nothing runs in either (every stage is unchanged), so the difference is the flow's own cost, not a stage's.
``--targets`` defaults to ``generate`` (seconds to bring up to date); with ``--all`` the whole tiny DAG is brought
up to date first (minutes) and every stage is checked.

    python -m bench.pipeline_overhead                    # from the repository root
    python -m bench.pipeline_overhead --repeats 5 --all
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mmtr.dvc_yaml import update_dvc_yaml
from mmtr.local_server import prefect_server
from tests.flows.helpers import copy_project_code, tiny_params_tree, write_params


def scratch_project(root: Path, env: dict[str, str]) -> None:
    """The code and the tiny params in ``root``, committed, with DVC initialised."""
    copy_project_code(root)
    tree = tiny_params_tree()
    tree["retrieval"]["models"] = ["san"]
    write_params(root / "params.yaml", tree)
    update_dvc_yaml(root / "params.yaml")
    for command in (
        ["git", "init", "-q"],
        ["dvc", "init", "-q"],
        ["dvc", "config", "core.analytics", "false"],
        ["git", "add", "-A"],
        ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.org", "commit", "-q", "-m", "code"],
    ):
        subprocess.run(command, cwd=root, env=env, check=True, capture_output=True)


def timed(command: list[str], root: Path, env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.pipeline_overhead", description=__doc__)
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of each (default 3)")
    parser.add_argument("--targets", nargs="*", default=["generate"], help="stages to repro (default: generate)")
    parser.add_argument("--all", action="store_true", help="the whole tiny DAG (brought up to date first: minutes)")
    args = parser.parse_args()
    targets: list[str] = [] if args.all else args.targets
    with tempfile.TemporaryDirectory(prefix="pipeline-overhead-") as scratch:
        root = Path(scratch)
        base = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
        base.pop("PYTHONPATH", None)
        with prefect_server(home=root / ".prefect-server") as api_url:
            env = {**base, "PREFECT_API_URL": api_url}
            scratch_project(root / "project", env)
            project = root / "project"
            print(f"bringing {' '.join(targets) or 'every stage'} up to date ...", flush=True)
            timed(["dvc", "repro", *targets], project, env)
            commands = {
                "dvc repro": ["dvc", "repro", *targets],
                "flows.pipeline": [sys.executable, "-m", "flows.pipeline", *targets],
            }
            seconds: dict[str, list[float]] = {name: [] for name in commands}
            for repeat in range(args.repeats):
                order = list(commands) if repeat % 2 == 0 else list(reversed(commands))  # alternate: no order bias
                for name in order:
                    seconds[name].append(timed(commands[name], project, env))
                    print(f"{name:>15}: {seconds[name][-1]:.2f} s", flush=True)
    medians = {name: statistics.median(values) for name, values in seconds.items()}
    overhead = medians["flows.pipeline"] - medians["dvc repro"]
    print(f"median dvc repro {medians['dvc repro']:.2f} s, flows.pipeline {medians['flows.pipeline']:.2f} s")
    print(f"overhead of the pipeline flow: {overhead:.2f} s per up-to-date repro ({os.cpu_count()} CPU cores)")
    record = {
        "bench": "pipeline_overhead",
        "targets": targets or "all",
        "repeats": args.repeats,
        "cpu_cores": os.cpu_count(),
        "seconds": {name: [round(value, 2) for value in values] for name, values in seconds.items()},
        "median_seconds": {name: round(value, 2) for name, value in medians.items()},
        "overhead_seconds": round(overhead, 2),
    }
    print(json.dumps(record))


if __name__ == "__main__":
    main()
