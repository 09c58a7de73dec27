"""dvc.yaml's text from the stages of :mod:`mmtr.dag`: write it (``mmtr dag``), check it, name what changed.

A group of one unnamed stage is a plain DVC stage; any other group is a ``foreach`` over its stages' own values,
each item holding the stage's command and lists, ``do`` referring to them by index (DVC's templating cannot give the
stages of one group lists of their own length, so shorter lists are padded, see :func:`_foreach`).

The learning curves are uncached outputs of their stages and drawn by top-level ``plots`` (one chart per MMT language
pair and per retrieval model, each with its own title, the runs overlaid): plots declared in a ``foreach`` would
share one title, and a file that is both a stage's plot and in a top-level chart would be drawn twice.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import yaml

from common.files import write_text
from mmtr.dag import STAGE_CODE, Pipeline, Plot, Stage, build_pipeline
from mmtr.errors import ParamsError
from mmtr.params import Params, load_params

HEADER = """\
# The pipeline DAG, generated from params.yaml by `mmtr dag`: do not edit; edit params.yaml and run `mmtr dag`
# (`python -m flows.pipeline` and `make demo` do it for you; every stage refuses to run on a stale dvc.yaml).
# Each stage runs one Prefect flow (python -m flows.<stage>) and depends on exactly the files and settings it
# reads, so `dvc repro` reruns what a change touches and nothing else (docs/pipeline.md, "The DAG").
# A `foreach` group lists each stage's own data deps in its item and the group's code once in `do`; DVC takes
# one list length for the group, so a stage that reads fewer files than its siblings repeats its flow file.
# `plots`: the learning curves, one chart per MMT pair and per retrieval model (`mmtr plots` draws them offline).
"""
# The template of every chart, in DVC's templates folder (.dvc/plots): a line per file, column and seed.
PLOT_TEMPLATE = "learning_curve"


def render(pipeline: Pipeline) -> str:
    """dvc.yaml's text: plain stages, and a ``foreach`` per group of several (or keyed) stages."""
    stages: dict[str, object] = {}
    for group, members in pipeline.groups.items():
        if list(members) == [None]:
            stages[group] = _plain(members[None], STAGE_CODE[group])
        else:
            stages[group] = _foreach(group, {str(key): stage for key, stage in members.items()}, STAGE_CODE[group])
    document: dict[str, object] = {"stages": stages}
    if pipeline.plots:
        document["plots"] = [_plot(plot) for plot in pipeline.plots]
    return HEADER + yaml.safe_dump(document, sort_keys=False, width=120, default_flow_style=False, allow_unicode=True)


def _plot(plot: Plot) -> dict[str, object]:
    """A top-level plot definition: ``y`` maps each file to its columns."""
    return {
        plot.id: {
            "template": PLOT_TEMPLATE,
            "x": plot.x,
            "y": {path: list(columns) for path, columns in plot.y},
            "title": plot.title,
            "x_label": plot.x_label,
            "y_label": plot.y_label,
        }
    }


def _outs(stage: Stage, path: Mapping[str, Sequence[str]] | None = None) -> dict[str, list[object]]:
    """outs / metrics entries of ``stage`` (or, with ``path``, of a template reading them from ``item``)."""
    out = path or {"outs": stage.outs, "uncached": stage.uncached, "metrics": stage.metrics}
    entries: dict[str, list[object]] = {}
    cached: list[object] = [*out["outs"], *({name: {"cache": False}} for name in out["uncached"])]
    if cached:
        entries["outs"] = cached
    if out["metrics"]:
        entries["metrics"] = [{name: {"cache": False}} for name in out["metrics"]]
    return entries


def _plain(stage: Stage, code: Sequence[str]) -> dict[str, object]:
    deps = _unique([*stage.deps, *code])
    return {"cmd": stage.cmd, "deps": deps, "params": _unique(stage.params), **_outs(stage)}


def _unique(values: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(values))


def _foreach(group: str, members: dict[str, Stage], code: Sequence[str]) -> dict[str, object]:
    """A ``foreach`` over the stages' own lists, the group's code listed once; data deps and params are padded to
    the group's longest (repeating the flow file and ``seed``, which change nothing); outputs have one shape."""
    first = next(iter(members.values()))
    shape = {name: len(getattr(first, name)) for name in ("outs", "uncached", "metrics")}
    for key, stage in members.items():
        for name, count in shape.items():
            if len(getattr(stage, name)) != count:
                raise AssertionError(f"{group}@{key}: {name} differ in number from its group's")
    flow_file = next(dep for dep in code if dep.startswith("flows/"))
    data = {key: [dep for dep in _unique(stage.deps) if dep not in code] for key, stage in members.items()}
    own_params = {key: _unique(stage.params) for key, stage in members.items()}
    deps_length = max(len(deps) for deps in data.values())
    params_length = max(len(values) for values in own_params.values())
    items = {
        key: {
            "cmd": stage.cmd,
            "deps": [*data[key], *[flow_file] * (deps_length - len(data[key]))],
            "params": [*own_params[key], *["seed"] * (params_length - len(own_params[key]))],
            **{
                name: list(values)
                for name, values in (
                    ("outs", stage.outs),
                    ("uncached", stage.uncached),
                    ("metrics", stage.metrics),
                )
                if values
            },
        }
        for key, stage in members.items()
    }
    template = {
        name: [f"${{item.{name}[{index}]}}" for index in range(count)]
        for name, count in (
            ("outs", len(first.outs)),
            ("uncached", len(first.uncached)),
            ("metrics", len(first.metrics)),
        )
    }
    do: dict[str, object] = {
        "cmd": "${item.cmd}",
        "deps": [*(f"${{item.deps[{index}]}}" for index in range(deps_length)), *code],
        "params": [f"${{item.params[{index}]}}" for index in range(params_length)],
        **_outs(first, template),
    }
    return {"foreach": items, "do": do}


def dvc_yaml_text(params: Params, params_file: str = "params.yaml", root: Path = Path()) -> str:
    return render(build_pipeline(params, params_file, root))


def stale_dvc_yaml(params: Params, dvc_yaml: Path, params_file: str = "params.yaml") -> bool:
    """Whether ``dvc_yaml`` is not the file params gives (missing, hand-edited, or params changed since)."""
    text = dvc_yaml_text(params, params_file, dvc_yaml.parent)
    return not dvc_yaml.is_file() or dvc_yaml.read_text(encoding="utf-8") != text


def stage_names(dvc_yaml_text: str) -> list[str]:
    """The stage names of a dvc.yaml's text (a ``foreach`` group of dict items: ``group@key``)."""
    stages = (yaml.safe_load(dvc_yaml_text) or {}).get("stages", {}) or {}
    names: list[str] = []
    for group, body in stages.items():
        items = body.get("foreach") if isinstance(body, dict) else None
        if isinstance(items, (dict, list)):
            names += [f"{group}@{key}" for key in items]
        else:
            names.append(group)
    return names


def describe_change(old: Iterable[str], new: Iterable[str], *, shown: int = 8) -> str:
    """ "+added -removed" stage names between two DAGs (the first ``shown`` of each, then a count)."""
    before, after = set(old), set(new)
    parts: list[str] = []
    for sign, names in (("+", sorted(after - before)), ("-", sorted(before - after))):
        parts += [f"{sign}{name}" for name in names[:shown]]
        if len(names) > shown:
            parts.append(f"and {len(names) - shown} more {'added' if sign == '+' else 'removed'}")
    return " ".join(parts) if parts else "the same stages"


def update_dvc_yaml(params_file: Path, *, check_only: bool = False) -> str:
    """Write dvc.yaml beside ``params_file`` from it (unless it is already that file); return what was done.

    Raises:
        ParamsError: bad params, or with ``check_only`` a dvc.yaml that is not the one they give.
    """
    params = load_params(params_file)
    out = params_file.parent / "dvc.yaml"
    pipeline = build_pipeline(params, os.path.relpath(params_file, out.parent), out.parent)
    text = render(pipeline)
    current = out.read_text(encoding="utf-8") if out.is_file() else None
    count = len(pipeline.names())
    if current == text:
        return f"{out}: up to date with {params_file} ({count} stages)"
    change = describe_change(stage_names(current) if current else [], pipeline.names())
    if check_only:
        raise ParamsError(f"{out} is not the DAG {params_file} gives ({change}): run `mmtr dag --params {params_file}`")
    write_text(out, text)
    return f"{out}: written from {params_file} ({count} stages; {change})"
