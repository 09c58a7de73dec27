"""`mmtr --help` and `mmtr --version` answer at once: building the parser and parsing load neither torch, Prefect,
pyarrow nor DVC (each takes seconds to import); the commands import them when they run."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
HEAVY = ("torch", "prefect", "pyarrow", "dvc")
COMMANDS = ("check-params", "inspect", "translate", "search", "profile", "schema")


def imported_by(argv: list[str]) -> set[str]:
    """The top-level modules ``python -m mmtr.cli <argv>`` imports, from ``-X importtime``'s report."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "mmtr.cli", *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    found = re.findall(r"^import time:\s+\d+ \|\s+\d+ \|\s+(\S+)", done.stderr, flags=re.MULTILINE)
    return {name.split(".")[0] for name in found}


ANSWERED_AT_ONCE = [["--help"], ["--version"], *([command, "--help"] for command in COMMANDS)]


@pytest.mark.parametrize("argv", ANSWERED_AT_ONCE, ids=" ".join)
def test_help_imports_no_heavy_package(argv: list[str]) -> None:
    modules = imported_by(argv)
    assert {"argparse", "mmtr"} <= modules  # the report was read: the parser's own imports are in it
    assert sorted(name for name in HEAVY if name in modules) == []


def test_version_names_the_installed_distribution(capsys: pytest.CaptureFixture[str]) -> None:
    import mmtr
    from mmtr import cli

    with pytest.raises(SystemExit) as stopped:
        cli.main(["--version"])
    assert stopped.value.code == 0
    assert capsys.readouterr().out == f"mmtr {mmtr.__version__}\n"
    assert re.fullmatch(r"\d+(\.\d+)*\S*|0\+unknown", mmtr.__version__)
