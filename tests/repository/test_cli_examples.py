"""The `mmtr` examples a reader copies from the docs run as written, as the console script runs them.

The commands that need no pipeline output run here as they stand; and every fenced block of README.md and
docs/*.md whose info string is ``console``, right after an ``<!-- tested -->`` comment, has its ``$ mmtr ...`` lines
run too (the output lines shown under them are not compared). Those run in a scratch folder holding copies of the
repository's params.yaml, its schema and dvc.yaml, so that an example that rewrites the params file (``mmtr profile
table4``) leaves the repository's alone.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mmtr.profiles import profile_names

REPO = Path(__file__).resolve().parents[2]
COMMANDS = ("check-params", "inspect", "translate", "search", "profile", "schema")
TESTED = "<!-- tested -->"
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*(\S*)\s*$")


def mmtr(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``mmtr <argv>`` in ``cwd``: the console script's entry point, run from this checkout."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    return subprocess.run(
        [sys.executable, "-m", "mmtr.cli", *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def ran(argv: list[str], cwd: Path = REPO) -> str:
    done = mmtr(argv, cwd)
    assert done.returncode == 0, f"mmtr {shlex.join(argv)}: exit {done.returncode}\n{done.stderr[-3000:]}"
    assert "Traceback" not in done.stderr
    return done.stdout


def marked_commands(markdown: str) -> list[list[str]]:
    """The arguments of every ``$ mmtr ...`` line in the ``console`` blocks that follow ``<!-- tested -->``."""
    commands: list[list[str]] = []
    fence: str | None = None
    tested = previous = False
    for line in markdown.splitlines():
        opened = FENCE.match(line)
        if fence is None:
            if opened:
                fence, tested = opened[1], previous and opened[2] == "console"
            elif line.strip():
                previous = line.strip() == TESTED
            continue
        if opened and opened[1][0] == fence[0] and len(opened[1]) >= len(fence) and not opened[2]:
            fence, previous = None, False
        elif tested and line.startswith("$ mmtr "):
            commands.append(shlex.split(line.removeprefix("$ mmtr ")))
    return commands


def documented() -> list[list[str]]:
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    return [argv for page in pages if page.is_file() for argv in marked_commands(page.read_text(encoding="utf-8"))]


def test_version_and_help() -> None:
    assert re.fullmatch(r"mmtr \S+\n", ran(["--version"]))
    text = ran(["--help"])
    assert all(command in text for command in COMMANDS)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(command: str) -> None:
    assert ran([command, "--help"]).startswith(f"usage: mmtr {command}")


def test_profile_lists_the_profiles() -> None:
    assert [line.split()[0] for line in ran(["profile"]).splitlines()] == profile_names()


def test_schema_writes_the_committed_schema(tmp_path: Path) -> None:
    out = tmp_path / "params.schema.json"
    ran(["schema", "--out", str(out)])
    assert out.read_text(encoding="utf-8") == (REPO / "params.schema.json").read_text(encoding="utf-8")


@pytest.mark.parametrize("argv", documented(), ids=shlex.join)
def test_documented_examples_run(argv: list[str], tmp_path: Path) -> None:
    for name in ("params.yaml", "params.schema.json", "dvc.yaml"):
        shutil.copy(REPO / name, tmp_path / name)
    ran(argv, cwd=tmp_path)


def test_only_tested_console_blocks_are_read() -> None:
    markdown = "\n".join(
        [
            "<!-- tested -->",
            "```console",
            "$ mmtr --version",
            "mmtr 0.1.0",
            "$ mmtr profile --out 'my params.yaml' table4",
            "```",
            "```console",  # not marked
            "$ mmtr check-params",
            "```",
            TESTED,
            "",
            "```bash",  # marked, but not a console block
            "$ mmtr check-params",
            "```",
            TESTED,
            "Some text between the comment and the block.",
            "```console",
            "$ mmtr check-params",
            "```",
            TESTED,
            "````console",
            "$ dvc repro",  # not an mmtr command
            "```",  # shorter than the opening fence: still inside the block
            "$ mmtr schema",
            "````",
            "$ mmtr inspect",  # outside every block
        ]
    )
    assert marked_commands(markdown) == [["--version"], ["profile", "--out", "my params.yaml", "table4"], ["schema"]]
