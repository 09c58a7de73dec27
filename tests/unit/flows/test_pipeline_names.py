"""The pipeline run's name, and the UI address its stage table links to (the server's own, not Prefect's default)."""

from __future__ import annotations

import hashlib
import signal
from pathlib import Path

import pytest
from prefect.exceptions import TerminationSignal

from flows.pipeline import run_name, stop_signal, ui_url
from mmtr.processes import Stopped


def test_the_ui_follows_the_server_address(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PREFECT_UI_URL", raising=False)
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:4321/api")
    assert ui_url() == "http://127.0.0.1:4321"
    monkeypatch.setenv("PREFECT_API_URL", "http://login01:8080/prefect/api/")
    assert ui_url() == "http://login01:8080/prefect"
    monkeypatch.setenv("PREFECT_UI_URL", "https://prefect.example.org/")  # behind a proxy: said explicitly
    assert ui_url() == "https://prefect.example.org"


def test_the_run_is_named_for_targets_commit_and_params(tmp_path: Path) -> None:
    params = tmp_path / "params.yaml"
    params.write_text("seed: 0\n")
    digest = hashlib.sha256(b"seed: 0\n").hexdigest()[:8]
    assert run_name([], "9e557327a7", params) == f"pipeline all · 9e557327a7 · params {digest}"
    assert run_name(["prepare", "report"], None, params) == f"pipeline prepare report · no commit · params {digest}"
    assert run_name([], "9e557327a7+dirty", tmp_path / "absent.yaml").endswith("· params missing")


def test_the_signal_that_stopped_the_flow_is_the_one_passed_to_dvc() -> None:
    assert stop_signal(TerminationSignal(signal=signal.SIGTERM)) == signal.SIGTERM  # Prefect's form of SIGTERM
    assert stop_signal(KeyboardInterrupt()) == signal.SIGINT
    assert stop_signal(Stopped(signal.SIGINT)) == signal.SIGINT
    assert stop_signal(RuntimeError("progress artifact failed")) == signal.SIGTERM
