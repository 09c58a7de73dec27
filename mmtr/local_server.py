"""One local Prefect server for a whole `dvc repro`, its database kept between runs, so the UI shows every run.

Without a server each stage's flow starts a temporary one (8-16 s each, and nothing is kept for the UI). Here:

    python -m mmtr.local_server run -- dvc repro   # uses the server at PREFECT_API_URL if one answers, else
                                                    # starts one (database in .prefect/), runs, stops it
    python -m mmtr.local_server ui                 # the UI on the same database, until Ctrl-C

`make demo` and `make ui` call these. Stopped by SIGTERM or SIGINT (Ctrl-C), either passes the signal on to the
command's process group, waits for it to end (killing it after a grace period), stops the server it started and
exits with 128 + the signal's number (:mod:`mmtr.processes`): no server or stage process outlives it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx

from mmtr import processes

REPO = Path(__file__).resolve().parents[1]
HOME = REPO / ".prefect"  # the server's database and settings (git-ignored)
HOST, PORT = "127.0.0.1", 4200
SERVER_GRACE_SECONDS = 30.0  # the server closes its database before it is killed


def answers(api_url: str, timeout: float = 2.0) -> bool:
    """Whether a Prefect server answers at ``api_url`` (its ``/health``)."""
    try:
        return httpx.get(f"{api_url.rstrip('/')}/health", timeout=timeout).is_success
    except httpx.HTTPError:
        return False


def free_port(preferred: int | None = None) -> int:
    """``preferred`` (default :data:`PORT`) when nothing listens there, else any free local port."""
    preferred = PORT if preferred is None else preferred
    with socket.socket() as probe:
        if probe.connect_ex((HOST, preferred)) != 0:
            return preferred
    with socket.socket() as spare:
        spare.bind((HOST, 0))
        return int(spare.getsockname()[1])


def server_command(port: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "prefect",
        "server",
        "start",
        "--host",
        HOST,
        "--port",
        str(port),
        "--no-scheduler",
        "--no-late-runs",
        "--analytics-off",
    ]


def server_env(home: Path | None = None) -> dict[str, str]:
    home = HOME if home is None else home
    return {**os.environ, "PREFECT_HOME": str(home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}


@contextlib.contextmanager
def prefect_server(startup_timeout: float = 120.0, home: Path | None = None) -> Iterator[str]:
    """Yield the API URL of a running server: the one at ``PREFECT_API_URL`` when it answers, else one started
    here (and stopped on leaving) with its database in ``home`` (default ``.prefect/``).

    Raises:
        RuntimeError: the started server did not answer within ``startup_timeout`` seconds (its log is named).
    """
    configured = os.environ.get("PREFECT_API_URL")
    if configured and answers(configured):
        yield configured
        return
    home = HOME if home is None else home
    port = free_port()
    api_url = f"http://{HOST}:{port}/api"
    home.mkdir(parents=True, exist_ok=True)
    log = home / "server.log"
    server = None
    try:
        with open(log, "ab") as output:  # a session of its own: the terminal's Ctrl-C reaches the command first
            server = processes.start(
                server_command(port), env=server_env(home), new_session=True, stdout=output, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + startup_timeout
        while not answers(api_url):
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the Prefect server did not start (see {log})")
            time.sleep(0.5)
        print(f"Prefect server at {api_url} (database in {home}); UI: http://{HOST}:{port}", file=sys.stderr)
        yield api_url
    finally:
        if server is not None:
            processes.stop(server, signal.SIGTERM, SERVER_GRACE_SECONDS)


def run(command: Sequence[str]) -> int:
    """Run ``command`` with ``PREFECT_API_URL`` pointing at one server for all of it; its exit status.

    Raises:
        processes.Stopped: SIGTERM or SIGINT came first; the command and the server have been stopped.
    """
    with processes.stop_signals(), prefect_server() as api_url:
        # the pipeline gives its own stages GRACE_SECONDS: it gets that and time to report the crash
        env = {**os.environ, "PREFECT_API_URL": api_url}
        return processes.run(command, env=env, grace=2 * processes.GRACE_SECONDS)


def ui() -> int:
    """Serve the UI on the kept database until stopped; the server's exit status.

    Raises:
        processes.Stopped: SIGTERM or SIGINT (Ctrl-C) stopped it; the server has ended.
    """
    HOME.mkdir(exist_ok=True)
    port = free_port()
    print(f"Prefect UI: http://{HOST}:{port} (database in {HOME}); Ctrl-C stops it", file=sys.stderr)
    return processes.run(server_command(port), env=server_env(), grace=SERVER_GRACE_SECONDS)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m mmtr.local_server", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    runner = commands.add_parser("run", help="run a command (e.g. dvc repro) against one server")
    runner.add_argument("cmd", nargs=argparse.REMAINDER, help="the command, after --")
    commands.add_parser("ui", help="serve the UI on the kept database until interrupted")
    args = parser.parse_args(argv)
    command: list[str] = []
    if args.command == "run":
        command = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
        if not command:
            parser.error("run needs a command, e.g. run -- dvc repro")
    try:
        raise SystemExit(run(command) if command else ui())
    except RuntimeError as error:
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    except processes.Stopped as stopped:
        print(f"{parser.prog}: {stopped}; every process it started has ended", file=sys.stderr)
        raise SystemExit(stopped.exit_status) from None


if __name__ == "__main__":
    main()
