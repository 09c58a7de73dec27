"""One Prefect server for a whole `dvc repro` (make demo): reused when PREFECT_API_URL answers, else started with
its database in .prefect/ and stopped afterwards; stopped by SIGTERM or Ctrl-C, it leaves no process running."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import psutil
import pytest

from mmtr import local_server

pytestmark = pytest.mark.flow
REPO = Path(__file__).resolve().parents[2]
PRINT_URL = [sys.executable, "-c", "import os, sys; sys.exit(0 if os.environ['PREFECT_API_URL'] else 3)"]


def test_a_server_that_answers_is_used_as_it_is(prefect_api_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PREFECT_API_URL", prefect_api_url)
    with local_server.prefect_server() as url:
        assert url == prefect_api_url
    assert local_server.run(PRINT_URL) == 0


def test_without_a_server_one_is_started_with_a_kept_database_and_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.setattr(local_server, "HOME", tmp_path / ".prefect")
    with socket.socket() as spare:  # a port nobody listens on, not the user's 4200
        spare.bind(("127.0.0.1", 0))
        port = spare.getsockname()[1]
    monkeypatch.setattr(local_server, "PORT", port)
    with local_server.prefect_server() as url:
        assert local_server.answers(url) and url == f"http://127.0.0.1:{port}/api"
    assert not local_server.answers(url)  # stopped on leaving
    assert list((tmp_path / ".prefect").glob("*.db")), "the database stays for `make ui`"


def test_run_needs_a_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        local_server.main(["run", "--"])
    assert stopped.value.code == 2 and "run needs a command" in capsys.readouterr().err


def _free_port() -> int:
    with socket.socket() as spare:
        spare.bind(("127.0.0.1", 0))
        return int(spare.getsockname()[1])


def _started(command: list[str]) -> subprocess.Popen[bytes]:
    """``command`` in a session of its own, as a terminal would start it: its process group is the session's."""
    return subprocess.Popen(command, cwd=REPO, start_new_session=True, stderr=subprocess.PIPE)


def _alive(processes: Iterable[psutil.Process]) -> list[str]:
    left = []
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                left.append(" ".join(process.cmdline()))
    return left


def _in_session(session: int) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if os.getsid(process.pid) == session and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
    return found


def _wait_for(condition: Callable[[], bool], process: subprocess.Popen[bytes], what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert process.poll() is None, f"ended before {what}: {process.stderr.read() if process.stderr else ''!r}"
        assert time.monotonic() < deadline, f"no {what} within {timeout} s"
        time.sleep(0.2)


def _server_driver(home: Path, port: int, *argv: str) -> list[str]:
    """`python -m mmtr.local_server <argv>` with its database in ``home`` and ``port`` as the preferred port."""
    code = (
        "import sys; from pathlib import Path; from mmtr import local_server; "
        f"local_server.HOME = Path({str(home)!r}); local_server.PORT = {port}; local_server.main(sys.argv[1:])"
    )
    return [sys.executable, "-c", code, *argv]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("how", "signum"),
    [("kill", signal.SIGTERM), ("ctrl-c", signal.SIGINT)],  # ctrl-c: the terminal signals the whole foreground group
)
def test_run_stopped_by_a_signal_stops_the_command_and_the_server(
    how: str, signum: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    port = _free_port()
    marker = tmp_path / "started"
    long_command = f"import pathlib, time; pathlib.Path({str(marker)!r}).touch(); time.sleep(120)"
    runner = _started(_server_driver(tmp_path / ".prefect", port, "run", "--", sys.executable, "-c", long_command))
    _wait_for(marker.exists, runner, "command running under the server", timeout=180)
    assert local_server.answers(f"http://127.0.0.1:{port}/api")
    started = [psutil.Process(runner.pid), *psutil.Process(runner.pid).children(recursive=True)]
    assert len(started) >= 3, "the runner, the server (a session of its own) and the command"
    if how == "kill":
        os.kill(runner.pid, signum)
    else:
        os.killpg(runner.pid, signum)
    assert runner.wait(timeout=90) == 128 + signum
    assert _alive(started) == [] and _in_session(runner.pid) == []
    assert not local_server.answers(f"http://127.0.0.1:{port}/api")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", port))  # the port is free again


@pytest.mark.slow
def test_ui_stopped_by_sigterm_stops_the_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    port = _free_port()
    ui = _started(_server_driver(tmp_path / ".prefect", port, "ui"))
    _wait_for(lambda: local_server.answers(f"http://127.0.0.1:{port}/api"), ui, "UI server", timeout=180)
    started = [psutil.Process(ui.pid), *psutil.Process(ui.pid).children(recursive=True)]
    os.kill(ui.pid, signal.SIGTERM)
    assert ui.wait(timeout=60) == 128 + signal.SIGTERM
    assert _alive(started) == [] and _in_session(ui.pid) == []
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", port))
