"""The whole pipeline as one Prefect flow: runs `dvc repro` (DVC owns the DAG; this is not a second wiring).

For users who launch from Prefect (a deployment, a schedule, the UI). Every stage flow started by this
`dvc repro` carries the tag ``pipeline:<this flow run's id>``, so one pipeline run is one filter in the UI.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Sequence

from prefect import flow, get_run_logger
from prefect.runtime import flow_run

from flows.stage import PIPELINE_RUN_ENV


@flow(name="pipeline", log_prints=True, persist_result=False)
def pipeline(targets: list[str] | None = None, force: bool = False) -> None:
    command = ["dvc", "repro", *(["--force"] if force else []), *(targets or [])]
    env = {**os.environ, PIPELINE_RUN_ENV: str(flow_run.get_id())}
    get_run_logger().info("Running %s", " ".join(command))
    completed = subprocess.run(command, env=env, check=False)
    if completed.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited with {completed.returncode}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m flows.pipeline", description=__doc__)
    parser.add_argument("targets", nargs="*", help="stages to reproduce (default: all)")
    parser.add_argument("--force", action="store_true", help="rerun stages even if unchanged")
    args = parser.parse_args(argv)
    try:
        pipeline(args.targets, args.force)
    except RuntimeError as error:
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
