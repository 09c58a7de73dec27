"""Every DVC stage lists the code it runs: its flow file and every tasks and library module that flow imports,
directly or through other project modules (imports inside functions included). Editing any of them must rerun
the stage; a missing dep leaves stale outputs that `dvc repro` calls up to date.

The application modules of `mmtr/` (the params reader, the stage runner) are not followed: they import every
component's config class to parse params.yaml, and what they do is not the stage's computation.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PROJECT = ("common", "corpora", "features", "mmt", "retrieval", "report", "mmtr", "tasks", "flows")


def module_file(module: str) -> Path | None:
    """The file of a project module (``mmt.systems`` -> mmt/systems.py, a package -> its __init__.py)."""
    if module.split(".")[0] not in PROJECT:
        return None
    base = REPO.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def imports_of(path: Path) -> set[Path]:
    """Project files imported by the file at ``path`` (``from package import module`` counts the module)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = path.relative_to(REPO).with_suffix("").parts[:-1]
    found: set[Path] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[: len(package) - node.level + 1]) if node.level else ""
            module = ".".join(part for part in (base, node.module or "") if part)
            names = [module, *(f"{module}.{alias.name}" for alias in node.names)]
        for name in names:
            parts = name.split(".")
            for end in range(1, len(parts) + 1):  # importing a.b.c runs a/__init__, a/b/__init__ and a/b/c
                file = module_file(".".join(parts[:end]))
                if file is not None:
                    found.add(file)
    return found


def code_of_stage(flow: Path) -> set[Path]:
    """The flow file and every project file it reaches, not following other ``flows/`` modules nor ``mmtr/``."""
    seen, todo = {flow}, [flow]
    while todo:
        for imported in imports_of(todo.pop()):
            if imported in seen or imported.relative_to(REPO).parts[0] in ("flows", "mmtr"):
                continue
            seen.add(imported)
            todo.append(imported)
    return seen


def stages() -> list[tuple[str, str, list[str]]]:
    """(name, flow module, dep paths relative to the repository) of every stage DVC resolves from dvc.yaml."""
    from dvc.repo import Repo

    resolved = []
    with Repo(str(REPO)) as repo:
        for stage in repo.index.stages:
            module = stage.cmd.split()[2]
            deps = [str(Path(dep.def_path)) for dep in stage.deps]
            resolved.append((stage.addressing, module, deps))
    return resolved


def uncovered(files: set[Path], deps: list[str]) -> list[str]:
    def covered(file: Path) -> bool:
        relative = file.relative_to(REPO)
        return any(relative == Path(dep) or Path(dep) in relative.parents for dep in deps)

    return sorted(str(file.relative_to(REPO)) for file in files if not covered(file))


@pytest.mark.parametrize(
    ("name", "module", "deps"), stages(), ids=lambda value: value if isinstance(value, str) else ""
)
def test_every_stage_depends_on_the_code_it_runs(name: str, module: str, deps: list[str]) -> None:
    flow = REPO.joinpath(*module.split(".")).with_suffix(".py")
    assert uncovered(code_of_stage(flow), deps) == [], f"{name}: add these to its deps in dvc.yaml"


def test_the_import_walk_follows_packages_functions_and_relative_imports(tmp_path: Path) -> None:
    """The walk itself, on this repository's own files: a lazy import inside a function counts, and importing a
    submodule counts its package's __init__."""
    reached = code_of_stage(REPO / "flows" / "features.py")
    assert REPO / "features" / "extractors.py" in reached  # imported at the top of the flow
    assert REPO / "features" / "bottom_up" / "model.py" in reached  # through the extractor registry
    assert REPO / "corpora" / "__init__.py" in reached  # the package of corpora.tables
    assert REPO / "mmtr" / "params.py" not in reached  # application modules are not followed
    cli = code_of_stage(REPO / "mmtr" / "cli.py")
    assert REPO / "retrieval" / "search.py" in cli  # imported inside a function of the CLI
    assert uncovered({REPO / "mmt" / "beam.py"}, ["mmt"]) == []
    assert uncovered({REPO / "mmt" / "beam.py"}, ["mmt/model.py"]) == ["mmt/beam.py"]


def test_train_mmt_depends_on_every_mmt_setting_but_the_target_list() -> None:
    """Adding a language to mmt.targets must not retrain the others; any other mmt setting must."""
    import dataclasses

    from mmt.config import SystemsConfig
    from mmtr.dag import build_pipeline
    from mmtr.params import load_params

    for stage in build_pipeline(load_params(REPO / "params.yaml")).groups["train_mmt"].values():
        keys = {key for key in stage.params if key.startswith("mmt.")}
        assert keys == {f"mmt.{field.name}" for field in dataclasses.fields(SystemsConfig)} - {"mmt.targets"}
