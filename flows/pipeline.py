"""The whole pipeline as one Prefect flow: runs `dvc repro` (DVC owns the DAG; this is not a second wiring).

For users who launch from Prefect (a deployment, a schedule, the UI). The run is named for what it runs, at which
commit, with which settings (``pipeline all · 9e55732abc · params 1f3e0a2b``: the targets, the commit of the code,
the first 8 hex digits of params.yaml's SHA-256) and tagged like the stage runs (``stage:pipeline``,
``commit:<sha>``) plus ``pipeline:<its own id>``; every stage flow started by this `dvc repro` carries that same
tag, so one filter in the UI shows the pipeline run with its stage runs. The run shows a progress bar over the
stages of the DAG (`dvc dag`) while DVC works through them, and at the end a table artifact ``pipeline-stages``:
each stage, whether it ran, was unchanged or failed, its wall time, and a link to its
own flow run. With ``--record PATH`` the same table is also written there as JSON (``make demo`` writes
``data/work/pipeline-stages.json``), which ``mmtr results`` reads for the stage times it publishes.

Stopped by SIGTERM or SIGINT, the flow passes the signal to `dvc repro`'s process group (DVC, the running stage and
what it started), waits for it to end (killing what is left after a grace period, :mod:`mmtr.processes`), marks
its run crashed and exits with 128 + the signal's number.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from uuid import UUID

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact, update_progress_artifact
from prefect.runtime import flow_run

from common.files import write_json
from mmtr import processes
from mmtr.commit import git_commit
from mmtr.dvc_yaml import update_dvc_yaml
from mmtr.errors import user_errors
from mmtr.stage import PIPELINE_RUN_ENV, run_tags
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


def ui_url() -> str | None:
    """The address of the Prefect UI that shows this run: ``PREFECT_UI_URL`` when set, else the API's address
    (``PREFECT_API_URL``) without its ``/api``; None with neither (a temporary server, gone after the run)."""
    from prefect.settings import PREFECT_API_URL

    if configured := os.environ.get("PREFECT_UI_URL"):
        return configured.rstrip("/")
    api = os.environ.get("PREFECT_API_URL") or PREFECT_API_URL.value()
    if not api:
        return None
    api = api.rstrip("/")
    return api.removesuffix("/api")


def stage_run_links(pipeline_run_id: str) -> dict[str, str]:
    """Flow-run name (the DVC stage) -> its page in the Prefect UI (:func:`ui_url`), for the stage runs this
    pipeline run started; empty without a UI."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterTags

    ui = ui_url()
    if not ui:
        return {}
    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(tags=FlowRunFilterTags(all_=[f"pipeline:{pipeline_run_id}"]))
        )
    return {run.name: f"{ui}/runs/flow-run/{run.id}" for run in runs if str(run.id) != pipeline_run_id}


def run_name(targets: Sequence[str], commit: str | None, params_file: Path) -> str:
    """The pipeline run's name: ``pipeline <targets, or all> · <commit> · params <digest of params_file>``."""
    digest = hashlib.sha256(params_file.read_bytes()).hexdigest()[:8] if params_file.is_file() else "missing"
    return f"pipeline {' '.join(targets) or 'all'} · {commit or 'no commit'} · params {digest}"


def this_run_name() -> str:
    """:func:`run_name` for the flow run being created (Prefect calls it, however the run was launched)."""
    targets = flow_run.parameters.get("targets") or []
    return run_name(targets, git_commit(), Path("params.yaml"))


def tag_own_run(run_id: str) -> None:
    """Give the run the tags of a stage run (``stage:pipeline``, ``commit:``, ``exp:``) and ``pipeline:<run_id>``,
    the tag its stage runs carry, so one filter shows them all (its id exists only once the run does)."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        own = client.read_flow_run(UUID(run_id))
        wanted = [*own.tags, *run_tags("pipeline"), f"pipeline:{run_id}"]
        client.update_flow_run(UUID(run_id), tags=list(dict.fromkeys(wanted)))


def stop_signal(stopping: BaseException) -> int:
    """The signal to pass on to `dvc repro` for what interrupted the flow (Prefect turns SIGTERM into its
    TerminationSignal, Python SIGINT into KeyboardInterrupt)."""
    if isinstance(stopping, processes.Stopped):
        return stopping.signum
    if isinstance(stopping, KeyboardInterrupt):
        return signal.SIGINT
    return int(getattr(stopping, "signal", signal.SIGTERM))


@flow(name="pipeline", flow_run_name=this_run_name, log_prints=True, persist_result=False)
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
    tag_own_run(run_id)
    start = time.monotonic()
    process = processes.start(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    try:
        assert process.stdout is not None
        for line in process.stdout:
            sys.stdout.write(line)  # DVC's and the stages' own output, as `dvc repro` shows it
            if tracker.feed(line, time.monotonic()):
                note = f"{tracker.done} of {total} stages done"
                note += f"; running {tracker.running}" if tracker.running else ""
                update_progress_artifact(progress, 100.0 * tracker.done / total, description=note)
        returncode = process.wait()
        processes.stop(process)  # only what DVC left running in its group, if anything
    except BaseException as stopping:  # a signal, or an error of ours: DVC and its stages must not outlive the run
        threading.Thread(target=processes.drain, args=(process.stdout, sys.stdout), daemon=True).start()
        logger.warning("Stopping %s (%s)", " ".join(command), type(stopping).__name__)
        processes.stop(process, stop_signal(stopping))
        raise
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
    # bad params, and a full disk or a read-only folder while the DAG or the record is written: one line, exit 2
    with user_errors(parser.prog, debug=False):
        print(update_dvc_yaml(Path("params.yaml")), flush=True)  # the DAG the params give, before DVC reads it
        try:
            with processes.stop_signals():
                pipeline(args.targets, args.force, args.single_item, args.record)
        except RuntimeError as error:
            print(f"{parser.prog}: error: {error}", file=sys.stderr)
            raise SystemExit(1) from None
        except processes.Stopped as stopped:
            print(f"{parser.prog}: {stopped}; dvc repro and its stages have ended", file=sys.stderr)
            raise SystemExit(stopped.exit_status) from None


if __name__ == "__main__":
    main()
