"""One Prefect server for a whole `dvc repro` (make demo): reused when PREFECT_API_URL answers, else started with
its database in .prefect/ and stopped afterwards."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from mmtr import local_server

pytestmark = pytest.mark.flow
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
