"""Stopping a child stops everything it started: the signal first, a kill after the grace period, and the
processes it started outside its group too (as torchrun starts its workers in sessions of their own)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from mmtr import processes

# a child that ignores SIGTERM and starts a grandchild in a session of its own (out of reach of its group)
STUBBORN = """
import pathlib, signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
pathlib.Path(sys.argv[1]).write_text(str(grandchild.pid))
time.sleep(120)
"""


def _running(pid: int) -> bool:
    with contextlib.suppress(psutil.NoSuchProcess):
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    return False


def test_a_child_that_ignores_the_signal_is_killed_after_the_grace_period_with_what_it_started(
    tmp_path: Path,
) -> None:
    ready = tmp_path / "grandchild"
    child = processes.start([sys.executable, "-c", STUBBORN, str(ready)])
    deadline = time.monotonic() + 60
    while not ready.exists() or not ready.read_text():
        assert time.monotonic() < deadline and child.poll() is None
        time.sleep(0.05)
    grandchild = int(ready.read_text())
    assert os.getsid(grandchild) != os.getsid(child.pid)
    start = time.monotonic()
    assert processes.stop(child, signal.SIGTERM, grace=1.0) == -signal.SIGKILL
    assert 1.0 <= time.monotonic() - start < 30
    assert not _running(child.pid) and not _running(grandchild)


def test_a_child_that_obeys_ends_with_the_signal_it_was_sent() -> None:
    child = processes.start([sys.executable, "-c", "import time; time.sleep(120)"])
    time.sleep(0.5)
    start = time.monotonic()
    assert processes.stop(child, signal.SIGTERM, grace=30.0) == -signal.SIGTERM
    assert time.monotonic() - start < 10  # no waiting out the grace period


def test_run_returns_the_exit_status_and_a_signal_becomes_stopped() -> None:
    assert processes.run([sys.executable, "-c", "raise SystemExit(3)"]) == 3
    driver = (
        "import sys; from mmtr import processes\n"
        "try:\n"
        "    processes.run([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        "except processes.Stopped as stopped:\n"
        "    raise SystemExit(stopped.exit_status)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", driver], start_new_session=True)
    deadline = time.monotonic() + 60
    while not psutil.Process(parent.pid).children():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    (child,) = psutil.Process(parent.pid).children()
    time.sleep(0.5)  # the handler is in place before the child starts; give the child its interpreter
    os.kill(parent.pid, signal.SIGINT)
    assert parent.wait(timeout=30) == 128 + signal.SIGINT
    assert not _running(child.pid)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_stopped_names_the_signal_and_the_shells_exit_status(signum: int) -> None:
    stopped = processes.Stopped(signum)
    assert stopped.exit_status == 128 + signum and signal.Signals(signum).name in str(stopped)
