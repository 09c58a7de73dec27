"""params.yaml is valid, every bad edit names its key path, and dvc.yaml agrees with the flows."""

from __future__ import annotations

import copy
import importlib
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from flows.params import ParamsError, load_params, parse_params

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tree() -> dict[str, Any]:
    return yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))


def edited(tree: dict[str, Any], key_path: str, value: Any) -> dict[str, Any]:
    changed = copy.deepcopy(tree)
    *parents, last = key_path.split(".")
    node = changed
    for key in parents:
        node = node[key]
    node[last] = value
    return changed


def test_repository_params_load() -> None:
    params = load_params(REPO / "params.yaml")
    assert params.languages.all == ("en", "de", "fr", "cs")
    assert params.generate.splits.train == 1000
    assert params.prepare.multi30k.splits["test"].task1 == "test"


def test_edit_is_applied(tree: dict[str, Any]) -> None:
    params = parse_params(edited(tree, "generate.image_size", 128))
    assert params.generate.image_size == 128


@pytest.mark.parametrize(
    ("key_path", "value", "expected"),
    [
        ("generate.image_size", "big", r"generate\.image_size: expected an integer, got 'big'"),
        ("generate.image_size", 16, r"generate\.image_size: got 16, allowed: 64 to 4096"),
        ("precision", "fp8", r"precision: got 'fp8', allowed: fp32, bf16, fp16"),
        ("device", "tpu", r"device: got 'tpu', allowed: auto, cpu, cuda, cuda:<index>"),
        ("prepare.format", "json", r"prepare\.format: got 'json', allowed: multi30k, karpathy, scan"),
        ("prepare.read_image_sizes", "yes", r"prepare\.read_image_sizes: expected true or false, got 'yes'"),
        ("languages.targets", ["de", "xx"], r"languages\.targets\[1\]: got 'xx', allowed: an ISO 639-1"),
        ("languages.targets", ["de", "en"], r"languages: a language is listed twice"),
        (
            "generate.objects_per_image",
            {"min": 3, "max": 2},
            r"generate\.objects_per_image\.max: got 2, allowed: 3 to 8",
        ),
        ("prepare.scan.splits", {"train": "train", "dev": "dev"}, r"prepare\.scan\.splits\.dev: unknown split"),
        ("seed", 1.5, r"seed: expected an integer, got 1\.5"),
    ],
)
def test_bad_value_names_key_value_and_allowed(tree: dict[str, Any], key_path: str, value: Any, expected: str) -> None:
    with pytest.raises(ParamsError, match=expected):
        parse_params(edited(tree, key_path, value))


def test_unknown_key_is_an_error(tree: dict[str, Any]) -> None:
    changed = edited(tree, "prepare.multi30k.tokenised", True)  # British spelling: not a key
    with pytest.raises(ParamsError, match=r"prepare\.multi30k\.tokenised: unknown key; allowed keys here: tasks"):
        parse_params(changed)


def test_missing_key_is_an_error(tree: dict[str, Any]) -> None:
    changed = copy.deepcopy(tree)
    del changed["paths"]["prepared"]
    with pytest.raises(ParamsError, match=r"paths\.prepared: missing key"):
        parse_params(changed)


def test_missing_file_and_bad_yaml(tmp_path: Path) -> None:
    with pytest.raises(ParamsError, match="file not found"):
        load_params(tmp_path / "params.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("seed: [1,\n", encoding="utf-8")
    with pytest.raises(ParamsError, match=rf"{re.escape(str(broken))}: not valid YAML"):
        load_params(broken)


def test_dvc_stages_run_their_flow_modules_and_use_declared_paths(tree: dict[str, Any]) -> None:
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text(encoding="utf-8"))["stages"]
    for name, stage in stages.items():
        if "foreach" in stage:  # one stage per item of a params list, e.g. train_mmt@de
            section, key = stage["foreach"].strip("${}").split(".")
            assert isinstance(tree[section][key], list), f"stage {name} fans out over {stage['foreach']}"
            stage = stage["do"]
        assert stage["cmd"].startswith(f"python -m flows.{name} "), name
        module = importlib.import_module(f"flows.{name}")
        assert callable(module.main)
        for entry in stage.get("params", []):
            node: Any = tree
            for part in entry.split("."):
                assert part in node, f"stage {name} lists params {entry!r} that params.yaml lacks"
                node = node[part]
        text = yaml.safe_dump(stage)
        for key in re.findall(r"\$\{paths\.(\w+)\}", text):
            assert key in tree["paths"], f"stage {name} uses ${{paths.{key}}} that params.yaml lacks"


def test_every_configured_retrieval_model_and_variant_resolves(tree: dict[str, Any]) -> None:
    from mmt.augment import VARIANTS
    from retrieval.registry import MODELS, make_config

    params = parse_params(tree)
    assert set(params.retrieval.models) <= set(MODELS)
    assert set(params.retrieval.variants) <= set(VARIANTS)
    for name, values in params.retrieval.configs.items():
        make_config(name, values)  # every configured setting is a field of the model's config


@pytest.mark.parametrize(
    ("key_path", "value", "expected"),
    [
        ("retrieval.models", ["san", "clip"], r"retrieval\.models\[1\]: unknown name 'clip'; known: san, dan, scan"),
        ("retrieval.variants", ["mmt_x"], r"retrieval\.variants\[0\]: unknown name 'mmt_x'; known: none, mt_f"),
        ("retrieval.configs.san", {"hiden": 4}, r"retrieval\.configs\.san: san: unknown settings \['hiden'\]"),
        ("retrieval.configs.clip", {}, r"retrieval\.configs\.clip: unknown model"),
        ("retrieval.languages", ["en", "ja"], r"retrieval\.languages\[1\]: got 'ja', allowed: one of"),
        ("retrieval.objective.loss", "triplet", r"retrieval\.objective\.loss: got 'triplet', allowed: auto"),
        ("retrieval.objective.beta", {"english": 1.0}, r"retrieval\.objective\.beta\.english: expected <lang>-"),
        ("retrieval.train.synthetic_fraction", 1.5, r"retrieval\.train\.synthetic_fraction: got 1\.5"),
        ("retrieval.vocab.fasttext", {"fr": "cc.fr.300.vec"}, r"retrieval\.vocab\.fasttext\.fr: not one of"),
    ],
)
def test_bad_retrieval_values(tree: dict[str, Any], key_path: str, value: Any, expected: str) -> None:
    with pytest.raises(ParamsError, match=expected):
        parse_params(edited(tree, key_path, value))
