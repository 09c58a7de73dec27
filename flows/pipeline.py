"""The whole pipeline as one Prefect flow: runs `dvc repro` (DVC owns the DAG; this is not a second wiring).

For users who launch from Prefect (a deployment, a schedule, the UI). Every stage flow started by this
`dvc repro` carries the tag ``pipeline:<this flow run's id>``, so one pipeline run is one filter in the UI. The run
shows a progress bar over the stages of the DAG (`dvc dag`) while DVC works through them, and at the end a table
artifact ``pipeline-stages``: each stage, whether it ran, was unchanged or failed, its wall time, and a link to its
own flow run. With ``--record PATH`` the same table is also written there as JSON (``make demo`` writes
``data/work/pipeline-stages.json``), which ``mmtr results`` reads for the stage times it publishes.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact, update_progress_artifact
from prefect.runtime import flow_run

from common.files import write_json
from mmtr.dvc_yaml import update_dvc_yaml
from mmtr.errors import ParamsError
from mmtr.stage import PIPELINE_RUN_ENV
from tasks import progress_artifact

# what `dvc repro` prints about each stage (DVC 3)
_STARTED = re.compile(r"^Running stage '(?P<stage>[^']+)':")
_UNCHANGED = re.compile(r"^Stage '(?P<stage>[^']+)' (?:didn't change, skipping|is cached - skipping run)")
_FAILED = re.compile(r"^ERROR: failed to reproduce '(?P<stage>[^']+)'")
_NODE = re.compile(r'^"(?P<stage>[^"]+)";$')


@dataclass
class StageRecord:
    """One stage of a `dvc repro` as its output told it: ``status`` is ran, unchanged, failed, running or pending."""

    name: str
    status: str = "pending"
    seconds: float | None = None
    started: float | None = field(default=None, repr=False)


class ReproTracker:
    """Follows `dvc repro`'s output line by line: which stage runs, which were unchanged, how long each took.

    DVC runs one stage at a time in DAG order; a stage ends when the next one is announced, or with the command.

    Args:
        planned: The stages of the DAG (``dvc dag`` nodes), in order; stages the output names beyond them are added.
    """

    def __init__(self, planned: Sequence[str]) -> None:
        self.stages = {name: StageRecord(name) for name in planned}
        self._running: StageRecord | None = None

    @property
    def running(self) -> str | None:
        """The stage DVC is running now, if any."""
        return self._running.name if self._running is not None else None

    @property
    def done(self) -> int:
        return sum(record.status in ("ran", "unchanged", "failed") for record in self.stages.values())

    def feed(self, line: str, now: float) -> bool:
        """Take one line of output; True when it changed a stage's status."""
        text = line.strip()
        if match := _STARTED.match(text):
            self._end_running(now, "ran")
            record = self._record(match["stage"])
            record.status, record.started = "running", now
            self._running = record
            return True
        if match := _UNCHANGED.match(text):
            self._end_running(now, "ran")
            self._record(match["stage"]).status = "unchanged"
            return True
        if match := _FAILED.match(text):
            record = self._record(match["stage"])
            if record is self._running:
                self._end_running(now, "failed")
            else:
                record.status = "failed"
            return True
        return False

    def finish(self, now: float, *, succeeded: bool) -> None:
        """The command ended: the stage still running ran (or failed with the command)."""
        self._end_running(now, "ran" if succeeded else "failed")

    def _record(self, name: str) -> StageRecord:
        return self.stages.setdefault(name, StageRecord(name))

    def _end_running(self, now: float, status: str) -> None:
        if self._running is not None:
            started = self._running.started if self._running.started is not None else now
            self._running.status, self._running.seconds = status, now - started
            self._running = None


def dag_stages(targets: Sequence[str]) -> list[str]:
    """The stages `dvc repro` walks for ``targets`` (all stages when none), in DAG order (``dvc dag --dot``)."""
    stages: list[str] = []
    for target in targets or [""]:
        command = ["dvc", "dag", "--dot", *([target] if target else [])]
        completed = subprocess.run(command, capture_output=True, text=True, check=False)
        if completed.returncode != 0:
            return stages  # the repro that follows reports the problem
        stages += [match["stage"] for line in completed.stdout.splitlines() if (match := _NODE.match(line.strip()))]
    return list(dict.fromkeys(stages))


def stages_markdown(tracker: ReproTracker, links: dict[str, str], total_seconds: float) -> str:
    """The table of the ``pipeline-stages`` artifact."""
    lines = [
        f"# Pipeline: {tracker.done} of {len(tracker.stages)} stages done in {total_seconds:.0f} s",
        "",
        "| stage | status | wall time (s) | flow run |",
        "|---|---|---|---|",
    ]
    for record in tracker.stages.values():
        seconds = "-" if record.seconds is None else f"{record.seconds:.1f}"
        link = f"[{record.name}]({links[record.name]})" if record.name in links else "-"
        lines.append(f"| {record.name} | {record.status} | {seconds} | {link} |")
    return "\n".join(lines) + "\n"


def stages_record(tracker: ReproTracker, command: Sequence[str], total_seconds: float) -> dict[str, object]:
    """The stage table as data: the command, the machine it ran on, its wall time, and each stage's status and
    wall time."""
    stages = [
        {"stage": r.name, "status": r.status, "seconds": None if r.seconds is None else round(r.seconds, 1)}
        for r in tracker.stages.values()
    ]
    machine = f"{os.cpu_count()} CPU cores ({platform.machine()}, {platform.system()})"
    return {"command": " ".join(command), "machine": machine, "seconds": round(total_seconds, 1), "stages": stages}


def stage_run_links(pipeline_run_id: str) -> dict[str, str]:
    """Flow-run name (the DVC stage) -> its page in the Prefect UI, for the stage runs this pipeline run started;
    empty without a UI (a temporary server)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterTags
    from prefect.settings import PREFECT_UI_URL

    ui = PREFECT_UI_URL.value()
    if not ui:
        return {}
    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(tags=FlowRunFilterTags(all_=[f"pipeline:{pipeline_run_id}"]))
        )
    return {run.name: f"{ui.rstrip('/')}/runs/flow-run/{run.id}" for run in runs}


@flow(name="pipeline", log_prints=True, persist_result=False)
def pipeline(
    targets: list[str] | None = None, force: bool = False, single_item: bool = False, record: str | None = None
) -> None:
    options = [*(["--force"] if force else []), *(["--single-item"] if single_item else [])]
    command = ["dvc", "repro", *options, *(targets or [])]
    run_id = str(flow_run.get_id())
    env = {**os.environ, PIPELINE_RUN_ENV: run_id}
    logger = get_run_logger()
    tracker = ReproTracker(list(targets or []) if single_item else dag_stages(targets or []))
    total = max(len(tracker.stages), 1)
    progress = progress_artifact(f"0 of {total} stages done", key="pipeline-progress")
    logger.info("Running %s (%d stages in the DAG)", " ".join(command), len(tracker.stages))
    start = time.monotonic()
    with subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    ) as process:
        assert process.stdout is not None
        for line in process.stdout:
            sys.stdout.write(line)  # DVC's and the stages' own output, as `dvc repro` shows it
            if tracker.feed(line, time.monotonic()):
                note = f"{tracker.done} of {total} stages done"
                note += f"; running {tracker.running}" if tracker.running else ""
                update_progress_artifact(progress, 100.0 * tracker.done / total, description=note)
        returncode = process.wait()
    tracker.finish(time.monotonic(), succeeded=returncode == 0)
    elapsed = time.monotonic() - start
    update_progress_artifact(
        progress, 100.0 * tracker.done / total, description=f"{tracker.done} of {total} stages done in {elapsed:.0f} s"
    )
    markdown = stages_markdown(tracker, stage_run_links(run_id), elapsed)
    create_markdown_artifact(key="pipeline-stages", markdown=markdown, description="Stages of this dvc repro")
    if record:
        write_json(record, stages_record(tracker, command, elapsed))
    if returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited with {returncode}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m flows.pipeline", description=__doc__)
    parser.add_argument("targets", nargs="*", help="stages to reproduce (default: all)")
    parser.add_argument("--force", action="store_true", help="rerun stages even if unchanged")
    parser.add_argument(
        "--single-item",
        action="store_true",
        help="only the named stages, not what they depend on (with --force: rerun just those)",
    )
    parser.add_argument("--record", help="also write the stage table as JSON to this file")
    args = parser.parse_args(argv)
    try:
        print(update_dvc_yaml(Path("params.yaml")), flush=True)  # the DAG the params give, before DVC reads it
    except ParamsError as error:
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    try:
        pipeline(args.targets, args.force, args.single_item, args.record)
    except RuntimeError as error:
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
