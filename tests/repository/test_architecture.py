"""The import rule of the layers: flows -> tasks -> library (corpora, features, mmt, retrieval) -> common; the
application (mmtr) and the report sit beside flows.

Library packages are plain Python/PyTorch: they import neither Prefect, DVC nor YAML, and never the layers
above them; ``tasks`` never imports ``flows`` nor the application, which never imports ``flows``; ``common``
imports no other package of the project. Every import counts, including those inside functions.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PROJECT = ("common", "corpora", "features", "mmt", "retrieval", "report", "mmtr", "tasks", "flows")
LIBRARY = ("corpora", "features", "mmt", "retrieval")

# package -> top-level modules it must never import
FORBIDDEN: dict[str, set[str]] = {
    "common": {"prefect", "dvc", "yaml", "corpora", "features", "mmt", "retrieval", "report", "mmtr", "tasks", "flows"},
    **{package: {"prefect", "prefect_dask", "dvc", "yaml", "report", "mmtr", "tasks", "flows"} for package in LIBRARY},
    "report": {"prefect", "prefect_dask", "dvc", "yaml", "mmtr", "tasks", "flows"},
    "tasks": {"flows", "mmtr", "dvc", "yaml"},
    "mmtr": {"flows"},
}
# device choice happens once, in common.runtime; library code creates tensors on the inputs' device
DEVICE_CALLS = ("cuda.is_available", ".cuda(")


def imported_modules(path: Path, root: Path) -> list[tuple[int, str]]:
    """(line, module) of every import in the file at ``path``; relative imports are resolved against ``root``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = path.relative_to(root).with_suffix("").parts[:-1]
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            found.append((node.lineno, module))
    return found


def violations(root: Path, rules: dict[str, set[str]]) -> list[str]:
    """``file:line imports module`` for every import that breaks ``rules`` under ``root``."""
    problems = []
    for package, forbidden in rules.items():
        for path in sorted((root / package).rglob("*.py")):
            for line, module in imported_modules(path, root):
                if module.split(".")[0] in forbidden:
                    problems.append(f"{path.relative_to(root)}:{line} imports {module}")
    return problems


def test_every_layer_imports_only_what_lies_below_it() -> None:
    assert violations(REPO, FORBIDDEN) == []


@pytest.mark.parametrize("package", ("common", *LIBRARY, "report"))
def test_library_code_never_picks_a_device_itself(package: str) -> None:
    allowed = {REPO / "common" / "runtime.py"}
    found = [
        f"{path.relative_to(REPO)}:{number}"
        for path in sorted((REPO / package).rglob("*.py"))
        if path not in allowed
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if any(call in line for call in DEVICE_CALLS)
    ]
    assert found == []


def test_the_checker_finds_every_kind_of_import(tmp_path: Path) -> None:
    """The rule test above can fail: a library file importing upwards, lazily or relatively, is reported."""
    (tmp_path / "mmt" / "sub").mkdir(parents=True)
    (tmp_path / "mmt" / "__init__.py").write_text("")
    (tmp_path / "mmt" / "sub" / "helper.py").write_text(
        "import os\n"
        "from ...flows import stage\n"  # relative, up to the top: flows
        "def run():\n"
        "    import prefect.artifacts\n"  # lazy import inside a function
        "    from tasks.mmt import translate_shard\n"
    )
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "ok.py").write_text("from mmt import systems\nimport prefect\n")
    found = violations(tmp_path, {"mmt": FORBIDDEN["mmt"], "tasks": FORBIDDEN["tasks"]})
    assert found == [
        "mmt/sub/helper.py:2 imports flows",
        "mmt/sub/helper.py:4 imports prefect.artifacts",
        "mmt/sub/helper.py:5 imports tasks.mmt",
    ]


def test_every_package_is_checked() -> None:
    packages = {path.parent.name for path in REPO.glob("*/__init__.py")} - {"tests", "bench"}
    assert packages == set(PROJECT)
    assert set(FORBIDDEN) == set(PROJECT) - {"flows"}


def test_library_logs_reach_the_console_and_the_prefect_ui() -> None:
    """pyproject.toml hands every library package's logger to Prefect, and stages lower them to INFO, so training
    progress logged by the library shows in `dvc repro` output and in the flow run's logs."""
    import logging

    from prefect.settings import PREFECT_LOGGING_EXTRA_LOGGERS

    from mmtr.stage import show_library_progress

    assert set(PREFECT_LOGGING_EXTRA_LOGGERS.value()) == {"common", *LIBRARY, "report"}
    show_library_progress()
    assert all(logging.getLogger(f"{name}.module").getEffectiveLevel() == logging.INFO for name in (*LIBRARY, "report"))
