"""Which commit of the code a run ran: the tag ``commit:<sha>`` of every run, ``+dirty`` only for edited code.

The pipeline writes git-tracked files itself (dvc.lock, the uncached metrics, notes and plots under data/, DVC's
.gitignore entries, dvc.yaml regenerated from params.yaml), so from the second stage of a `dvc repro` on the
working tree differs from the commit. Those files are the pipeline's outputs, not its code: a change to them
alone leaves the commit clean. Any other tracked file that differs (code, params.yaml, a hand-edited dvc.yaml)
makes it ``+dirty``.
"""

from __future__ import annotations

import subprocess
from pathlib import Path, PurePosixPath

from mmtr.errors import ParamsError


def git_commit(params_file: str = "params.yaml") -> str | None:
    """The short commit of the working tree, ``+dirty`` when a tracked file other than the pipeline's own
    outputs (:func:`pipeline_outputs`) differs from it; None outside git."""
    try:
        commit = _git("rev-parse", "--short=10", "HEAD").strip()
        prefix = _git("rev-parse", "--show-prefix").strip()  # this folder within the repository
        status = _git("status", "--porcelain=v1", "-z", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return None
    outputs = [f"{prefix}{path}" for path in pipeline_outputs(Path(params_file))]
    edited = [path for path in changed_paths(status) if not any(_within(path, output) for output in outputs)]
    return f"{commit}+dirty" if edited else commit


def commit_date() -> str:
    """The date of the checked-out commit (YYYY-MM-DD), or ``unknown date`` outside git."""
    try:
        return _git("log", "-1", "--format=%cs").strip() or "unknown date"
    except (OSError, subprocess.SubprocessError):
        return "unknown date"


def pipeline_outputs(params_file: Path) -> list[str]:
    """The git-tracked files a `dvc repro` may write, relative to the folder of ``params_file``'s dvc.yaml:
    dvc.lock, every declared output, metric and plot of the DAG ``params_file`` gives, the .gitignore DVC keeps
    beside each cached output, and dvc.yaml itself while it is the one ``params_file`` gives (a hand edit is
    code). Only dvc.lock without a readable params file."""
    from mmtr.dag import build_pipeline
    from mmtr.dvc_yaml import render
    from mmtr.params import load_params

    outputs = ["dvc.lock"]
    root = params_file.parent
    try:
        pipeline = build_pipeline(load_params(params_file), params_file.name, root)
    except (ParamsError, OSError):
        return outputs
    for stages in pipeline.groups.values():
        for stage in stages.values():
            outputs += [*stage.outs, *stage.uncached, *stage.metrics]
            outputs += [str(PurePosixPath(out).parent / ".gitignore") for out in stage.outs]
    outputs += [file for plot in pipeline.plots for file, _ in plot.y]  # the learning curves (stage outputs too)
    dvc_yaml = root / "dvc.yaml"
    if dvc_yaml.is_file() and dvc_yaml.read_text(encoding="utf-8") == render(pipeline):
        outputs.append("dvc.yaml")
    unique = dict.fromkeys(outputs)
    return [str(PurePosixPath(root.as_posix()) / output) if root != Path() else output for output in unique]


def changed_paths(porcelain_z: str) -> list[str]:
    """The paths of ``git status --porcelain=v1 -z``: each changed file, both names of a rename or copy."""
    paths: list[str] = []
    entries = iter(porcelain_z.split("\0"))
    for entry in entries:
        if len(entry) < 4:
            continue  # the empty string after the last NUL
        paths.append(entry[3:])
        if entry[0] in "RC":
            paths.append(next(entries, ""))  # the name it had
    return [path for path in paths if path]


def _within(path: str, output: str) -> bool:
    output = output.rstrip("/")
    return path == output or path.startswith(f"{output}/")


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], capture_output=True, text=True, check=True, timeout=30).stdout
