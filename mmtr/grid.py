"""`mmtr grid`: the retrieval runs of params.yaml as queued DVC experiments, several at once, gathered into the
workspace as a serial `dvc repro` leaves it.

1. `dvc repro` of the stages the runs read (features, augmented captions, translated queries), so that every queued
   experiment starts from them instead of building them again.
2. One experiment per pending `train_retrieval@<run>` stage (`dvc exp run --queue --single-item --name <run>`),
   run by ``jobs`` queue workers (`dvc queue start --jobs`), each in a temporary copy of the repository that shares
   its DVC cache. On several GPUs each run claims one of its own (:mod:`common.gpu_slots`).
3. Gather: each finished experiment's outputs are copied from its commit (the model folder from the shared cache,
   the git-tracked metrics, notes and learning curve from the commit itself), `dvc commit` writes their dvc.lock
   entries, each checked against the experiment's own; then `dvc repro` finds the runs done and runs what is left
   (the report, and any stage the runs do not need, such as `export`), as a serial `dvc repro` would.

Why not let a plain `dvc repro` restore the runs from DVC's run-cache: DVC saves no run-cache entry for a stage
with an uncached output that is neither a metric nor a plot (a run's notes and learning curve), so it would train
every run again.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common.errors import InputError
from common.threads import available_cpus
from mmtr import processes

RETRIEVAL = "train_retrieval"
REPORT = "report"
POLL_SECONDS = 5.0
STALLED_SECONDS = 60.0  # tasks left but no queue worker alive this long: the workers are gone
LOG_LINES = 25  # the end of a failed experiment's log that is shown
FINISHED = ("Success", "Failed")


@dataclass(frozen=True)
class Task:
    """One row of `dvc queue status`."""

    id: str
    name: str
    status: str  # Queued, Running, Success, Failed


@dataclass(frozen=True)
class QueueStatus:
    tasks: tuple[Task, ...]
    active: int  # workers running a task
    idle: int


@dataclass(frozen=True)
class Plan:
    """What a grid runs: the upstream stages to bring up to date, the retrieval stages; where the report goes."""

    upstream: tuple[str, ...]
    runs: tuple[str, ...]  # every train_retrieval@<run> stage of the params
    reports_folder: str


def plan(params_file: Path) -> Plan:
    """The stages of ``params_file``'s DAG that a grid touches."""
    from mmtr.dag import build_pipeline
    from mmtr.params import load_params

    params = load_params(params_file)
    pipeline = build_pipeline(params, params_file.name, params_file.parent)
    runs = pipeline.groups.get(RETRIEVAL, {})
    if not runs:
        raise InputError(f"{params_file}: no retrieval runs (retrieval.models x variants x roles is empty)")
    reads = {dep for stage in runs.values() for dep in stage.deps}
    stages = {
        name: stage
        for group, members in pipeline.groups.items()
        if group not in (RETRIEVAL, REPORT)
        for name, stage in ((group if key is None else f"{group}@{key}", stage) for key, stage in members.items())
    }
    upstream = tuple(name for name, stage in stages.items() if any(_covers(out, reads) for out in stage.outs))
    return Plan(upstream, tuple(f"{RETRIEVAL}@{key}" for key in runs), params.paths.reports)


def _covers(out: str, reads: Iterable[str]) -> bool:
    """Whether the output ``out`` (a file or folder) is, or holds, one of the paths ``reads``."""
    return any(read == out or read.startswith(f"{out}/") for read in reads)


def run_name(stage: str) -> str:
    """The experiment's name: the run (``train_retrieval@san-none-all`` -> ``san-none-all``)."""
    return stage.split("@", 1)[1]


def repro_command(stages: Sequence[str]) -> list[str]:
    return ["dvc", "repro", *stages]


def queue_command(stage: str) -> list[str]:
    """Queue ``stage`` alone: its upstream stages are the workspace's (brought up to date first), never rerun.
    ``--force`` replaces an experiment of the same name and commit (an earlier grid's run that failed, or ran on
    settings since changed); the stage is pending anyway, so forcing it reruns nothing else."""
    return ["dvc", "exp", "run", "--queue", "--single-item", "--force", "--name", run_name(stage), stage]


def start_command(jobs: int) -> list[str]:
    return ["dvc", "queue", "start", "--jobs", str(jobs)]


def commit_command(stages: Sequence[str]) -> list[str]:
    return ["dvc", "commit", "--force", *stages]


def worker_env(env: Mapping[str, str], jobs: int, cpus: int, gpu_slots: Path) -> dict[str, str]:
    """The environment the queue workers (and so every run) inherit: torch's CPU threads split between the
    ``jobs`` workers (``OMP_NUM_THREADS``, unless already set), and the one GPU-slot folder every temporary copy
    locks (:mod:`common.gpu_slots`)."""
    from common.gpu_slots import SLOTS_ENV

    workers = dict(env)
    workers.setdefault("OMP_NUM_THREADS", str(max(1, cpus // jobs)))
    workers.setdefault(SLOTS_ENV, str(gpu_slots))
    return workers


_ROW = re.compile(r"^(?P<id>[0-9a-f]{7,})\s+(?P<name>\S+)\s+.*?\s(?P<status>Queued|Running|Success|Failed)\s*$")
_WORKERS = re.compile(r"Worker status:\s*(?P<active>\d+) active,\s*(?P<idle>\d+) idle")


def parse_queue_status(text: str) -> QueueStatus:
    """The tasks and workers `dvc queue status` lists."""
    tasks = tuple(
        Task(match["id"], match["name"], match["status"]) for line in text.splitlines() if (match := _ROW.match(line))
    )
    workers = _WORKERS.search(text)
    if workers is None:
        raise InputError(f"`dvc queue status` printed no worker status line:\n{text}")
    return QueueStatus(tasks, int(workers["active"]), int(workers["idle"]))


def progress_line(tasks: Iterable[Task], elapsed: float) -> str:
    counts = dict.fromkeys(("Success", "Running", "Queued", "Failed"), 0)
    for task in tasks:
        counts[task.status] = counts.get(task.status, 0) + 1
    return (
        f"grid: {counts['Success']} done, {counts['Running']} running, {counts['Queued']} queued, "
        f"{counts['Failed']} failed ({format_elapsed(elapsed)})"
    )


def format_elapsed(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest:02d} s" if minutes else f"{rest} s"


def exp_ref(baseline: str, name: str) -> str:
    """The git ref DVC keeps experiment ``name`` of the commit ``baseline`` under."""
    return f"refs/exps/{baseline[:2]}/{baseline[2:]}/{name}"


@dataclass
class Grid:
    """One grid run in the repository ``root`` (where params.yaml, dvc.yaml and .dvc/ are)."""

    root: Path
    params_file: Path
    jobs: int
    out: Any = sys.stdout

    def say(self, line: str) -> None:
        print(line, file=self.out, flush=True)

    def dvc(self, command: Sequence[str], env: Mapping[str, str] | None = None) -> None:
        """Run a dvc command, its output on the console; a failure ends the grid."""
        self.say("$ " + " ".join(command))
        status = processes.run(command, env=env)
        if status != 0:
            raise InputError(f"`{' '.join(command)}` failed (exit status {status})")

    def capture(self, command: Sequence[str]) -> str:
        done = subprocess.run(command, cwd=self.root, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise InputError(f"`{' '.join(command)}` failed:\n{done.stdout}{done.stderr}")
        return done.stdout

    def pending(self, stages: Sequence[str]) -> list[str]:
        """The retrieval stages `dvc status` finds changed (or never run), in DAG order."""
        changed = json.loads(self.capture(["dvc", "status", "--json", *stages]) or "{}")
        return [stage for stage in stages if stage in changed]

    def queue_status(self) -> QueueStatus:
        return parse_queue_status(self.capture(["dvc", "queue", "status"]))

    def run(self, plan_: Plan, *, dry_run: bool = False) -> None:
        if dry_run:
            self.dry_run(plan_)
            return
        self.dvc(repro_command(plan_.upstream))
        self.track_lock()
        pending = self.pending(plan_.runs)
        if pending:
            self.say(f"grid: {len(pending)} of {len(plan_.runs)} retrieval runs to train, {self.jobs} at a time")
            failed = self.run_queued(pending)
        else:
            self.say(f"grid: all {len(plan_.runs)} retrieval runs are up to date")
            failed = []
        if failed:
            raise InputError(
                f"{len(failed)} of {len(pending)} retrieval runs failed ({', '.join(failed)}): their logs are above "
                f"(dvc queue logs <run>); the others are gathered, so `mmtr grid` again trains these alone"
            )
        self.dvc(repro_command([]))  # the report, and whatever else a serial `dvc repro` would run
        self.say(f"grid: the report is in {plan_.reports_folder}/ (results.md, index.html)")

    def dry_run(self, plan_: Plan) -> None:
        self.say("$ " + " ".join(repro_command(plan_.upstream)))
        pending = self.pending(plan_.runs)
        self.say(f"# {len(pending)} of {len(plan_.runs)} retrieval runs pending now (the upstream stages as they are)")
        for stage in pending:
            self.say("$ " + " ".join(queue_command(stage)))
        self.say("$ " + " ".join(start_command(self.jobs)))
        self.say("# wait for the queue, then gather: outputs from each experiment's commit, then")
        self.say("$ " + " ".join(commit_command(pending)))
        self.say("$ " + " ".join(repro_command([])))

    def track_lock(self) -> None:
        """A queued experiment starts from the commit plus the changes of tracked files: an untracked dvc.lock (a
        first run) would leave it without the upstream stages' results, and it would build them all again. So it is
        staged, as DVC's own hint after a run says (nothing is committed)."""
        tracked = subprocess.run(
            ["git", "ls-files", "--error-unmatch", "dvc.lock"], cwd=self.root, capture_output=True, check=False
        )
        if tracked.returncode != 0:
            self.say("$ git add dvc.lock  # queued experiments start from the tracked files")
            self.capture(["git", "add", "dvc.lock"])

    def run_queued(self, stages: Sequence[str]) -> list[str]:
        """Queue ``stages``, run them on the workers, gather the finished ones; the stages that failed."""
        baseline = self.capture(["git", "rev-parse", "HEAD"]).strip()
        before = {task.id for task in self.queue_status().tasks}
        by_name = {run_name(stage): stage for stage in stages}
        try:
            for stage in stages:
                self.dvc(queue_command(stage))
            mine = {task.id: task.name for task in self.queue_status().tasks if task.id not in before}
            if sorted(mine.values()) != sorted(by_name):
                raise InputError(
                    f"`dvc queue status` lists {sorted(mine.values())}, not the runs queued: {sorted(by_name)}"
                )
            env = worker_env(os.environ, self.jobs, available_cpus(), self.slots_folder())
            self.dvc(start_command(self.jobs), env=env)
            tasks = self.wait(set(mine))
        except processes.Stopped:
            self.stop_queue({task.id for task in self.queue_status().tasks} - before)
            raise
        self.stop_idle_workers()
        status = {by_name[task.name]: task for task in tasks}
        failed = [stage for stage in stages if status[stage].status == "Failed"]  # in DAG order
        for stage in failed:
            self.show_log(stage, status[stage])
        done = [stage for stage in stages if status[stage].status == "Success"]
        if done:
            self.gather(baseline, done)
        return failed

    def slots_folder(self) -> Path:
        from common.gpu_slots import slots_folder
        from mmtr.params import load_params

        folder = slots_folder(load_params(self.params_file).paths.work)
        return folder if folder.is_absolute() else self.root / folder

    def wait(self, ids: set[str]) -> list[Task]:
        """Poll the queue until every task of ``ids`` has finished, printing a line whenever the counts change."""
        started = time.monotonic()
        last_line, no_workers_since = "", None
        while True:
            status = self.queue_status()
            tasks = [task for task in status.tasks if task.id in ids]
            line = progress_line(tasks, time.monotonic() - started)
            if line.split(" (")[0] != last_line.split(" (")[0]:
                self.say(line)
                last_line = line
            if all(task.status in FINISHED for task in tasks):
                return tasks
            if status.active + status.idle == 0:
                no_workers_since = no_workers_since or time.monotonic()
                if time.monotonic() - no_workers_since > STALLED_SECONDS:
                    left = ", ".join(task.name for task in tasks if task.status not in FINISHED)
                    raise InputError(
                        f"the DVC queue has no worker left but runs are unfinished ({left}): see `dvc queue status`; "
                        "`dvc queue remove --all` then `mmtr grid` again"
                    )
            else:
                no_workers_since = None
            time.sleep(POLL_SECONDS)

    def stop_idle_workers(self) -> None:
        """With nothing left to run, the workers are stopped now: an idle worker that is about to end could take a
        task of the next grid and leave it marked running with nobody running it."""
        if not any(task.status in ("Queued", "Running") for task in self.queue_status().tasks):
            self.capture(["dvc", "queue", "stop"])

    def stop_queue(self, ids: Iterable[str]) -> None:
        """Ctrl-C or kill: the running runs are killed and the workers stopped, this grid's tasks removed."""
        self.say("grid: stopping the queue workers")
        for command in (["dvc", "queue", "stop", "--kill"], ["dvc", "queue", "remove", *ids]):
            subprocess.run(command, cwd=self.root, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def show_log(self, stage: str, task: Task) -> None:
        done = subprocess.run(
            ["dvc", "queue", "logs", task.id], cwd=self.root, capture_output=True, text=True, check=False
        )
        tail = (done.stdout + done.stderr).splitlines()[-LOG_LINES:]
        print(f"grid: {stage} failed (experiment {task.name}); the end of its log:", file=sys.stderr)
        for line in tail:
            print(f"  {line}", file=sys.stderr)

    def gather(self, baseline: str, stages: Sequence[str]) -> None:
        """Each finished run's outputs from its experiment's commit into the workspace, then its dvc.lock entry by
        `dvc commit`, which must equal the experiment's own (same inputs, settings and outputs)."""
        import yaml
        from dvc.api import DVCFileSystem

        entries: dict[str, dict[str, Any]] = {}
        for stage in stages:
            rev = self.capture(["git", "rev-parse", exp_ref(baseline, run_name(stage))]).strip()
            lock = yaml.safe_load(self.capture(["git", "show", f"{rev}:dvc.lock"]))
            entries[stage] = lock["stages"][stage]
            files = DVCFileSystem(str(self.root), rev=rev)
            for out in entries[stage]["outs"]:
                self.fetch(files, out["path"])
        lock_file = self.root / "dvc.lock"
        before = lock_file.read_text(encoding="utf-8")
        self.dvc(commit_command(stages))
        after = yaml.safe_load(lock_file.read_text(encoding="utf-8"))["stages"]
        differ = [stage for stage in stages if after.get(stage) != entries[stage]]
        if differ:
            from common.files import write_text

            write_text(lock_file, before)
            raise InputError(
                f"{', '.join(differ)}: the workspace no longer matches what the experiment ran on (a setting or an "
                "input changed while the queue ran); dvc.lock is left as it was: run `mmtr grid` again"
            )
        self.say(f"grid: gathered {len(stages)} runs into the workspace and dvc.lock")

    def fetch(self, files: Any, path: str) -> None:
        """``path`` (a file or folder) as the experiment left it, replacing the workspace's whole."""
        target = self.root / path
        staging = target.with_name(f".{target.name}.grid.tmp")
        shutil.rmtree(staging, ignore_errors=True)
        staging.parent.mkdir(parents=True, exist_ok=True)
        files.get(path, str(staging), recursive=True)
        if target.is_dir():
            shutil.rmtree(target)
        staging.replace(target)


def grid(params_file: Path, jobs: int, *, dry_run: bool = False) -> None:
    """`mmtr grid`: the checks a user can mend first (dvc, the repository), then the run."""
    if shutil.which("dvc") is None:
        raise InputError("dvc not found on PATH: activate the project's environment (make install)")
    root = params_file.resolve().parent
    if not (root / ".dvc").is_dir():
        raise InputError(f"{root}: not a DVC repository (no .dvc folder beside {params_file.name})")
    if not (root / ".git").exists():
        raise InputError(f"{root}: not a git repository; queued DVC experiments need one")
    if Path.cwd().resolve() != root:
        raise InputError(f"run `mmtr grid` in the repository root ({root}), where DVC runs the stages")
    try:
        with processes.stop_signals():
            Grid(root, params_file, jobs).run(plan(params_file), dry_run=dry_run)
    except processes.Stopped as stopped:  # Ctrl-C or kill: the queue is stopped, the exit says by what
        print(f"mmtr grid: {stopped}", file=sys.stderr)
        raise SystemExit(stopped.exit_status) from None
