"""Child processes that end when their parent is stopped: every process the project starts, it stops.

A child runs in a process group of its own. SIGTERM or SIGINT to the parent (``kill``, Ctrl-C) becomes a
:class:`Stopped` exception in its main thread instead of an exit that skips every ``finally``; the parent passes
the same signal to the child's group, gives it :data:`GRACE_SECONDS` to stop in order (DVC releases its locks,
Prefect marks the run crashed, torchrun stops its workers), then kills what is left of the group and every process
the child started outside it (torchrun's workers run in sessions of their own).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from types import FrameType
from typing import IO, Any

import psutil

GRACE_SECONDS = 20.0  # what a stopped child gets to end in order before it is killed
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Stopped(BaseException):
    """SIGTERM or SIGINT reached this process (a BaseException, like KeyboardInterrupt: no handler of ordinary
    errors swallows it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum

    @property
    def exit_status(self) -> int:
        """The shell's convention for a process ended by a signal (130 for SIGINT, 143 for SIGTERM)."""
        return 128 + self.signum


def _raise_stopped(signum: int, _frame: FrameType | None) -> None:
    raise Stopped(signum)


@contextlib.contextmanager
def stop_signals() -> Iterator[None]:
    """Inside: SIGTERM and SIGINT raise :class:`Stopped` in the main thread (the previous handlers come back on
    leaving). Outside the main thread, where Python takes no signal handler, nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, _raise_stopped) for signum in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def start(
    command: Sequence[str], *, env: Mapping[str, str] | None = None, new_session: bool = False, **popen: Any
) -> subprocess.Popen[Any]:
    """Start ``command`` as the leader of a new process group (of a new session with ``new_session``: then the
    terminal's Ctrl-C does not reach it, only :func:`stop` does)."""
    placement: dict[str, Any] = {"start_new_session": True} if new_session else {"process_group": 0}
    return subprocess.Popen(list(command), env=None if env is None else dict(env), **placement, **popen)


def run(command: Sequence[str], *, env: Mapping[str, str] | None = None, grace: float = GRACE_SECONDS) -> int:
    """Run ``command`` to its end (like ``subprocess.run``) in a group of its own, within :func:`stop_signals`;
    its exit status. Stopped meanwhile, the child is stopped with the same signal (:func:`stop`) and
    :class:`Stopped` is raised again; at the end whatever the command left running in its group is stopped too.
    """
    with stop_signals():
        process = None
        try:
            process = start(command, env=env)
            process.wait()
        except Stopped as stopped:
            if process is not None:
                stop(process, stopped.signum, grace)
            raise
        stop(process, signal.SIGTERM, grace)  # only stragglers: the leader has ended
        return process.returncode


def stop(process: subprocess.Popen[Any], signum: int = signal.SIGTERM, grace: float = GRACE_SECONDS) -> int:
    """Send ``signum`` to ``process``'s group, wait up to ``grace`` seconds for the group to end, then kill what
    is left of it and every descendant seen meanwhile; the process's exit status.

    A second stop signal during the wait kills at once. ``process`` must lead its group (:func:`start`).
    """
    group = process.pid
    seen = _descendants(process.pid)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signum)
    deadline = time.monotonic() + grace
    try:
        while (process.poll() is None or _group_alive(group)) and time.monotonic() < deadline:
            seen |= _descendants(process.pid)
            time.sleep(0.1)
    except Stopped:
        pass  # asked twice: no more waiting
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)
        for descendant in seen:
            with contextlib.suppress(psutil.Error):
                descendant.kill()  # psutil checks it is still the same process (not a reused pid)
        _wait_gone(seen, timeout=5.0)  # a kill lands asynchronously: return once they are gone
    return process.wait()


def drain(stream: IO[str] | None, sink: IO[str]) -> None:
    """Copy what is left of ``stream`` to ``sink`` until it ends (a stopped child's last words, so that it never
    blocks on a full pipe while it shuts down)."""
    if stream is None:
        return
    with contextlib.suppress(ValueError, OSError):
        for line in stream:
            sink.write(line)


def _descendants(pid: int) -> set[psutil.Process]:
    try:
        return set(psutil.Process(pid).children(recursive=True))
    except psutil.Error:
        return set()


def _alive(process: psutil.Process) -> bool:
    """Running, and not a zombie (an init that does not reap, as in some containers, keeps zombies forever)."""
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _wait_gone(seen: set[psutil.Process], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while any(_alive(process) for process in seen) and time.monotonic() < deadline:
        time.sleep(0.05)


def _group_alive(group: int) -> bool:
    """Whether a live process (:func:`_alive`) is left in ``group``."""
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if os.getpgid(process.pid) == group and _alive(process):
                return True
    return False
