"""Optional parts install as extras (`pip install 'mmtr[dask]'`, `'mmtr[meteor]'`, `'mmtr[plots]'`, `'mmtr[all]'`):
the code imports them only where they are used, so that everything else runs without them, and `make install`
installs them all."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("common", "corpora", "features", "mmt", "retrieval", "report", "mmtr", "tasks", "flows")
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
EXTRAS = PYPROJECT["project"]["optional-dependencies"]
# extra -> the modules its distributions provide
OPTIONAL_MODULES = {
    "dask": {"dask", "distributed", "prefect_dask"},
    "meteor": {"pycocoevalcap"},
    "detectron2": {"detectron2"},
    "plots": {"vl_convert"},
}
# Extras built from a source repository (no package index has them): pinned to a commit, left out of `all`, since
# they compile against the installed torch and need `pip install --no-build-isolation`.
SOURCE_BUILT = {"detectron2"}
GIT_REQUIREMENT = re.compile(r"^[A-Za-z0-9_.-]+ @ git\+https://github\.com/[\w.-]+/[\w.-]+\.git@[0-9a-f]{40}$")


def requirement_name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9_.-]+", requirement)
    assert match is not None, requirement
    return match[0].lower().replace("_", "-")


def module_level_imports(source: str) -> set[str]:
    """Top-level modules imported when the module is (outside every function body)."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            return
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(source))
    return found


def test_optional_parts_are_imported_where_they_are_used() -> None:
    optional = set().union(*OPTIONAL_MODULES.values())
    found = [
        f"{path.relative_to(REPO)} imports {name} at module level"
        for package in PACKAGES
        for path in sorted((REPO / package).rglob("*.py"))
        for name in sorted(module_level_imports(path.read_text(encoding="utf-8")) & optional)
    ]
    assert found == []


def test_the_checker_sees_module_level_imports_only() -> None:
    source = "import dask\nif True:\n    from prefect_dask import X\ndef f():\n    import pycocoevalcap\n"
    assert module_level_imports(source) == {"dask", "prefect_dask"}


def test_optional_distributions_are_extras_and_all_holds_every_one() -> None:
    required = {requirement_name(requirement) for requirement in PYPROJECT["project"]["dependencies"]}
    for extra in OPTIONAL_MODULES:
        assert {requirement_name(requirement) for requirement in EXTRAS[extra]}.isdisjoint(required), extra
    assert EXTRAS["all"] == [f"mmtr[{','.join(sorted(set(EXTRAS) - {'all', 'dev'} - SOURCE_BUILT))}]"]
    assert set(OPTIONAL_MODULES) == set(EXTRAS) - {"all", "dev"}


def test_source_built_extras_pin_a_commit_and_the_others_come_from_an_index() -> None:
    for extra in set(EXTRAS) - {"all"}:
        for requirement in EXTRAS[extra]:
            from_source = " @ " in requirement
            assert from_source == (extra in SOURCE_BUILT), requirement
            if from_source:
                assert GIT_REQUIREMENT.match(requirement), f"{requirement}: pin a full commit of a git repository"


def test_the_git_requirement_pattern_refuses_branches_and_short_commits() -> None:
    base = "detectron2 @ git+https://github.com/facebookresearch/detectron2.git"
    assert GIT_REQUIREMENT.match(base + "@" + "0" * 40)
    assert not GIT_REQUIREMENT.match(base + "@main")
    assert not GIT_REQUIREMENT.match(base + "@02b5c4e")
    assert not GIT_REQUIREMENT.match(base)


def test_make_install_installs_every_extra() -> None:
    assert '-e ".[dev,all]"' in (REPO / "Makefile").read_text(encoding="utf-8")


def test_every_package_ships_its_type_information_the_profiles_and_the_card_template() -> None:
    assert PYPROJECT["tool"]["setuptools"]["package-data"] == {
        "*": ["py.typed"],
        "mmtr": ["profiles/*.yaml", "py.typed"],
        "corpora": ["templates/*.md"],
    }
    assert [package for package in PACKAGES if not (REPO / package / "py.typed").is_file()] == []
