"""The JSON schema of params.yaml: generated from the config dataclasses, committed as params.schema.json (it cannot
drift from the code), and the repository's params file (alone, and with every profile merged in) valid under it."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pytest
import yaml

from mmtr import cli
from mmtr.profiles import apply_profile, profile_names
from mmtr.schema import SCHEMA_FILE, params_schema, schema_text, type_schema

REPO = Path(__file__).resolve().parents[3]
jsonschema = pytest.importorskip("jsonschema")


def errors(tree: Any) -> list[tuple[str, str]]:
    """(key path, message) of every place where ``tree`` breaks the schema."""
    validator = jsonschema.Draft7Validator(params_schema())
    return sorted((".".join(map(str, error.path)), error.message) for error in validator.iter_errors(tree))


def test_the_committed_schema_is_the_generated_one() -> None:
    committed = (REPO / SCHEMA_FILE).read_text(encoding="utf-8")
    assert committed == schema_text(), f"{SCHEMA_FILE} is stale: run `mmtr schema --out {SCHEMA_FILE}`"
    jsonschema.Draft7Validator.check_schema(json.loads(committed))


def test_the_params_file_names_its_schema_and_is_valid_under_it() -> None:
    text = (REPO / "params.yaml").read_text(encoding="utf-8")
    assert text.splitlines()[0] == f"# yaml-language-server: $schema={SCHEMA_FILE}"
    assert errors(yaml.safe_load(text)) == []


@pytest.mark.parametrize("name", profile_names())
def test_every_profile_merged_in_is_valid_and_keeps_the_schema_line(name: str, tmp_path: Path) -> None:
    params = tmp_path / "params.yaml"
    shutil.copy(REPO / "params.yaml", params)
    apply_profile(name, params, params)
    text = params.read_text(encoding="utf-8")
    assert text.splitlines()[0] == f"# yaml-language-server: $schema={SCHEMA_FILE}"
    assert errors(yaml.safe_load(text)) == []


def test_typos_wrong_types_and_unknown_choices_break_the_schema() -> None:
    tree = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
    tree["mmt"]["pretrian"] = {"epochs": 1}
    tree["seed"] = "zero"
    tree["retrieval"]["objective"]["kind"] = "hard"
    del tree["paths"]["models"]
    assert errors(tree) == [
        ("mmt", "Additional properties are not allowed ('pretrian' was unexpected)"),
        ("paths", "'models' is a required property"),
        ("retrieval.objective.kind", "'hard' is not one of ['harder', 'max_violation', 'sum', 'topk', 'auto']"),
        ("seed", "'zero' is not of type 'integer'"),
    ]


@dataclass(frozen=True)
class Leaf:
    """A leaf.

    Attributes:
        size: How big, in
            units.
    """

    size: int = 3


@dataclass(frozen=True)
class Tree:
    name: str  # what it is called
    # where it grows:
    # one of two places
    place: Literal["park", "wood"]
    height: float | None = None
    leaves: tuple[Leaf, ...] = ()
    by_name: dict[str, Leaf] = field(default_factory=lambda: {"a": Leaf()})
    anything: dict[str, Any] = field(default_factory=dict)
    mode: Literal["x"] | Literal["y"] | None = None


def test_the_walk_follows_every_supported_annotation() -> None:
    leaf = {
        "description": "A leaf.",
        "type": "object",
        "properties": {"size": {"description": "How big, in units.", "type": "integer", "default": 3}},
        "additionalProperties": False,
    }
    assert type_schema(Tree) == {
        "type": "object",
        "properties": {
            "name": {"description": "what it is called", "type": "string"},
            "place": {"description": "where it grows: one of two places", "enum": ["park", "wood"]},
            "height": {"type": ["number", "null"], "default": None},
            "leaves": {"type": "array", "items": leaf, "default": []},
            "by_name": {"type": "object", "additionalProperties": leaf, "default": {"a": {"size": 3}}},
            "anything": {"type": "object", "default": {}},
            "mode": {"enum": ["x", "y", None], "default": None},
        },
        "required": ["name", "place"],
        "additionalProperties": False,
    }


def test_the_schema_command_prints_or_writes_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cli.main(["schema"])
    assert json.loads(capsys.readouterr().out) == params_schema()
    out = tmp_path / "sub" / SCHEMA_FILE
    cli.main(["schema", "--out", str(out)])
    assert out.read_text(encoding="utf-8") == schema_text()
    assert capsys.readouterr().out == f"{out}: the JSON schema of params.yaml\n"
