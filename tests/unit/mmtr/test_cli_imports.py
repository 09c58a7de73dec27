"""`mmtr --help` and `mmtr --version` answer at once: building the parser and parsing load neither torch, Prefect,
pyarrow nor DVC (each takes seconds to import); the commands import them when they run. `mmtr search` and
`mmtr translate`, run for real on a tiny setup, import what answering one query needs and nothing else: neither
the pipeline's packages nor the other command's, the metrics, another translation backend or pandas."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_setup import SENTENCE, TINY, CliSetup, build

REPO = Path(__file__).resolve().parents[3]
HEAVY = ("torch", "prefect", "pyarrow", "dvc")
COMMANDS = ("check-params", "inspect", "translate", "search", "profile", "schema")
# what neither command needs to answer one query: the pipeline's packages, the Hugging Face stack, the metrics,
# pandas (which pyarrow's read_table and to_numpy import)
NOT_FOR_A_QUERY = ("prefect", "dvc", "yaml", "transformers", "datasets", "huggingface_hub", "sacrebleu", "pandas")
# the modules of the other translation backends and of training: a regional system's translate needs none of them
NOT_FOR_REGIONAL = (
    "mmt.config",
    "mmt.held_models",
    "mmt.marian",
    "mmt.metrics",
    "mmt.pairs",
    "mmt.seq2seq",
    "mmt.train",
)


def imported_modules(argv: list[str], *, stdin: str = "", env: dict[str, str] | None = None) -> set[str]:
    """The modules ``python -m mmtr.cli <argv>`` imports (it must succeed), from ``-X importtime``'s report."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "mmtr.cli", *argv],
        cwd=REPO,
        input=stdin,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return set(re.findall(r"^import time:\s+\d+ \|\s+\d+ \|\s+(\S+)", done.stderr, flags=re.MULTILINE))


def imported_by(argv: list[str]) -> set[str]:
    """The top-level packages ``python -m mmtr.cli <argv>`` imports."""
    return {name.split(".")[0] for name in imported_modules(argv)}


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


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> CliSetup:
    return build(tmp_path_factory.mktemp("cli"), TINY)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "MMTR_CACHE_DIR": str(tmp_path / "user-cache")}  # the finite scans' marks, not ~/.cache


def test_search_imports_neither_translation_nor_pipeline_packages(
    setup: CliSetup, tmp_path: Path, env: dict[str, str]
) -> None:
    modules = imported_modules(setup.search_argv("a red circle", tmp_path / "cache"), env=env)
    packages = {name.split(".")[0] for name in modules}
    assert {"torch", "pyarrow", "retrieval", "features"} <= packages
    unneeded = {*NOT_FOR_A_QUERY, "mmt", "sentencepiece", "sacremoses", "pyarrow.dataset"}
    assert sorted(unneeded & (modules | packages)) == []


def test_translate_with_a_text_only_system_loads_no_feature_store(setup: CliSetup, env: dict[str, str]) -> None:
    modules = imported_modules(setup.translate_argv(setup.mt), stdin=SENTENCE + "\n", env=env)
    packages = {name.split(".")[0] for name in modules}
    assert {"torch", "mmt", "sentencepiece", "sacremoses"} <= packages
    unneeded = {*NOT_FOR_A_QUERY, *NOT_FOR_REGIONAL, "pyarrow", "features", "retrieval"}
    assert sorted(unneeded & (modules | packages)) == []


def test_translate_with_the_mmt_loads_the_store_and_no_other_backend(setup: CliSetup, env: dict[str, str]) -> None:
    line = f"{setup.image_ids[0]}\t{SENTENCE}\n"
    modules = imported_modules(setup.translate_argv(setup.mmt), stdin=line, env=env)
    packages = {name.split(".")[0] for name in modules}
    assert {"torch", "mmt", "pyarrow", "features"} <= packages
    unneeded = {*NOT_FOR_A_QUERY, *NOT_FOR_REGIONAL, "pyarrow.dataset", "retrieval"}
    assert sorted(unneeded & (modules | packages)) == []
