"""A stage run's card in the Prefect UI: which DVC stage, experiment and commit, the command, the settings the stage
depends on (its `params:` in dvc.yaml, with their values) and its inputs and outputs (`deps`, `outs`, `metrics`,
`plots`, resolved)."""

from __future__ import annotations

import os
import re
import shlex
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from tasks import artifact_key

_TEMPLATE = re.compile(r"\$\{([^}]+)\}")


def dvc_stage_definition(dvc_yaml: Path, stage: str) -> dict[str, Any]:
    """The raw definition of ``stage`` (``train_retrieval@san-mmt_f-all`` or ``report``) in ``dvc_yaml``: the
    ``do`` block of a foreach stage, the body of a matrix or plain one; empty when the file or the stage is absent."""
    if not dvc_yaml.is_file():
        return {}
    stages = (yaml.safe_load(dvc_yaml.read_text(encoding="utf-8")) or {}).get("stages", {})
    name, _, key = stage.partition("@")
    definition = stages.get(name, {})
    items = definition.get("foreach")
    if isinstance(items, dict) and isinstance(items.get(key), dict) and "cmd" in items[key]:
        return _generated_item(items[key], definition.get("do", {}))
    return dict(definition.get("do", definition))


def _generated_item(item: Mapping[str, Any], do: Mapping[str, Any]) -> dict[str, Any]:
    """A stage of a generated ``foreach`` group (mmtr/dag.py): its item holds its own values, ``do`` adds the
    group's code; the padding that repeats an entry to the group's length is dropped."""

    def literal(entries: Sequence[object]) -> list[object]:
        return [entry for entry in entries if not (isinstance(entry, str) and entry.startswith("${"))]

    def unique(entries: Sequence[object]) -> list[object]:
        return list(dict.fromkeys(entries))

    return {
        "cmd": item["cmd"],
        "deps": unique([*item.get("deps", []), *literal(do.get("deps", []))]),
        "params": unique(item.get("params", [])),
        "outs": [*item.get("outs", []), *item.get("uncached", [])],
        "metrics": list(item.get("metrics", [])),
        "plots": list(item.get("plots", [])),
    }


def stage_scope(dvc_yaml: Path, stage: str, params: Mapping[str, Any]) -> dict[str, object]:
    """The loop variables of a foreach or matrix stage run: ``train_mmt@de`` -> ``{"item": "de"}``;
    ``prepare@synthetic`` over the ``corpora`` dict -> ``{"key": "synthetic", "item": <its entry>}``;
    ``train_retrieval@san-none-all`` -> ``{"item": {"model": "san", "variant": "none", "role": "all"}}`` (matrix
    names join the values with ``-`` in the order of the matrix's keys); empty for a plain stage."""
    name, _, suffix = stage.partition("@")
    if not suffix or not dvc_yaml.is_file():
        return {}
    stages = (yaml.safe_load(dvc_yaml.read_text(encoding="utf-8")) or {}).get("stages", {})
    definition = stages.get(name, {})
    matrix = definition.get("matrix")
    if isinstance(matrix, dict):
        values = suffix.split("-")
        return {"item": dict(zip(matrix, values, strict=True))} if len(values) == len(matrix) else {}
    source = definition.get("foreach")
    if isinstance(source, Mapping) and isinstance(source.get(suffix), Mapping) and "cmd" in source[suffix]:
        return {}  # a generated stage: its item holds its values, nothing is left to resolve
    looped = section(params, source[2:-1]) if isinstance(source, str) and source.startswith("${") else source
    if isinstance(looped, Mapping):
        return {"key": suffix, "item": looped.get(suffix)}
    return {"item": suffix}


def resolve(template: str, params: Mapping[str, Any], scope: Mapping[str, object]) -> str:
    """``template`` with each ``${a.b}`` replaced by that params value (``${item}``, ``${item.x}``, ``${key}`` by the
    stage run's :func:`stage_scope`); a reference it cannot resolve, or that names a whole section, stays as written."""

    def value(match: re.Match[str]) -> str:
        current: object = {**params, **scope}
        for part in match[1].split("."):
            if not isinstance(current, Mapping) or part not in current:
                return match[0]
            current = current[part]
        return match[0] if isinstance(current, Mapping | list) else str(current)

    return _TEMPLATE.sub(value, template)


def section(params: Mapping[str, Any], dotted: str) -> object:
    """The value at ``a.b.c`` of the params tree (None where it is absent)."""
    current: object = params
    for part in dotted.split("."):
        if not isinstance(current, Mapping):
            return None
        current = current.get(part)
    return current


def run_card_markdown(
    stage: str, *, params_file: Path, dvc_yaml: Path, command: Sequence[str], commit: str | None, date: str
) -> str:
    """The run card of one stage run: where it comes from, the params keys the stage declares (with their values,
    as YAML) and its inputs and outputs (``deps``/``outs``/``metrics``/``plots`` of dvc.yaml, resolved)."""
    params = yaml.safe_load(params_file.read_text(encoding="utf-8")) if params_file.is_file() else {}
    params = params if isinstance(params, dict) else {}
    definition = dvc_stage_definition(dvc_yaml, stage)
    scope = stage_scope(dvc_yaml, stage, params)
    experiment = os.environ.get("DVC_EXP_NAME") or "none (the workspace)"
    lines = [
        f"# Run card: {stage}",
        "",
        "| | |",
        "|---|---|",
        f"| DVC stage | `{stage}` |",
        f"| experiment | {experiment} |",
        f"| code | commit {commit or 'unknown (not a git checkout)'} ({date}) |",
        f"| command | `{shlex.join(command)}` |",
        "",
    ]
    keys = [key for key in definition.get("params", []) if isinstance(key, str)]
    if keys:
        chosen = {resolve(key, params, scope): section(params, resolve(key, params, scope)) for key in keys}
        lines += [
            "## Settings this stage depends on",
            "",
            "```yaml",
            yaml.safe_dump(chosen, sort_keys=False, allow_unicode=True).rstrip(),
            "```",
            "",
        ]
    for title, field in (("Inputs", "deps"), ("Outputs", "outs"), ("Metrics", "metrics"), ("Plots", "plots")):
        entries = [next(iter(entry)) if isinstance(entry, dict) else entry for entry in definition.get(field, [])]
        if entries:
            lines += [f"## {title}", "", *(f"- `{resolve(str(entry), params, scope)}`" for entry in entries), ""]
    return "\n".join(lines)


def run_card_hook(stage: str, params_file: str, commit: str | None, date: str) -> Callable[[Any, Any, Any], None]:
    """A Prefect ``on_running`` hook that attaches the run card (:func:`run_card_markdown`) to the flow run as the
    markdown artifact ``run-card-<stage>[-<experiment>]``."""

    def publish(flow: Any, flow_run: Any, state: Any) -> None:
        from prefect.client.orchestration import get_client
        from prefect.client.schemas.actions import ArtifactCreate

        command = ["python", "-m", *_module_command()]
        markdown = run_card_markdown(
            stage, params_file=Path(params_file), dvc_yaml=Path("dvc.yaml"), command=command, commit=commit, date=date
        )
        # hooks run outside the flow run's context, so the run is named explicitly
        artifact = ArtifactCreate(
            key=artifact_key(f"run-card-{stage}"),
            type="markdown",
            data=markdown,
            description=f"{stage}: command, settings, inputs and outputs",
            flow_run_id=flow_run.id,
        )
        with get_client(sync_client=True) as client:
            client.create_artifact(artifact=artifact)

    return publish


def _module_command() -> list[str]:
    """``flows.<stage> --params ...`` of ``python -m flows.<stage> ...`` (argv[0] is the module's file)."""
    module = Path(sys.argv[0])
    name = f"{module.parent.name}.{module.stem}" if module.suffix == ".py" else module.name
    return [name, *sys.argv[1:]]
