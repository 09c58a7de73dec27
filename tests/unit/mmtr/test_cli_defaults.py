"""`mmtr search` and `mmtr translate` take the folders they leave out from the params file: the ones dvc.yaml names
from its `paths` group and corpus roles (relative to the params file's folder), and its device; flags override."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from common.errors import InputError
from mmtr import cli
from mmtr.defaults import Defaults
from mmtr.errors import ParamsError
from tests.command_line import flags

REPO = Path(__file__).resolve().parents[3]


def params_elsewhere(folder: Path, **edits: Any) -> Path:
    """The repository's params with every folder under ``elsewhere/`` and dan as the first retrieval model, in
    ``folder/params.yaml``."""
    tree = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
    tree["paths"] = {key: f"elsewhere/{key}" for key in tree["paths"]}
    tree["corpora"]["synthetic"]["images"] = "elsewhere/images"
    tree["retrieval"]["models"] = ["dan", "san"]
    tree["device"] = "cpu"
    tree.update(edits)
    path = folder / "params.yaml"
    path.write_text(yaml.safe_dump(tree), encoding="utf-8")
    return path


def one_line_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as stopped:
        cli.main(argv)
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err.removeprefix("mmtr: error: ").rstrip("\n")


def test_folders_come_from_the_params_paths_and_corpus_roles(tmp_path: Path) -> None:
    defaults = Defaults(params_elsewhere(tmp_path))
    root = tmp_path / "elsewhere"
    expected = {
        "retrieval_model": root / "models" / "retrieval" / "dan-none-all",
        "feature_store": root / "features" / "synthetic" / "compact",
        "prepared": root / "prepared" / "synthetic",
    }
    for folder in expected.values():
        folder.mkdir(parents=True)
    assert {name: getattr(defaults, name)() for name in expected} == expected
    assert defaults.images() == root / "images"
    assert defaults.mmt_models() == root / "models" / "mmt"
    assert defaults.mmt_stage("en", "de") == defaults.mmt_stage("de", "en") == "train_mmt@de"
    assert defaults.device(None) == torch.device("cpu")


def test_the_device_flag_overrides_and_needs_no_params_file(tmp_path: Path) -> None:
    absent = Defaults(tmp_path / "absent.yaml")
    assert absent.device("cpu") == torch.device("cpu")
    with pytest.raises(InputError, match=r"^--device: got 'gpu', allowed: auto, cpu"):
        absent.device("gpu")
    with pytest.raises(ParamsError, match=r"absent\.yaml: file not found; the folders and the device left out"):
        absent.device(None)
    assert Defaults(params_elsewhere(tmp_path, device="auto")).device(None).type in ("cpu", "cuda")


def test_a_missing_default_folder_names_it_and_the_stage_that_makes_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    params = str(params_elsewhere(tmp_path))
    model = tmp_path / "elsewhere" / "models" / "retrieval" / "dan-none-all"
    assert one_line_error(["search", "a dog", *flags(lang="en", params=params)], capsys) == (
        f"{model}: no retrieval model here; the stage train_retrieval@dan-none-all makes it "
        f"(dvc repro train_retrieval@dan-none-all), or pass --model"
    )
    system = tmp_path / "elsewhere" / "models" / "mmt" / "mmt-de-en"
    assert one_line_error(["translate", *flags(src="de", tgt="en", params=params)], capsys) == (
        f"{system}: no trained model for de->en (train it: dvc repro train_mmt@de)"
    )
    system = system.with_name("mmt-en-de")  # a multimodal system; `--store` alone: the params' FeatureStore
    system.mkdir(parents=True)
    (system / "system.json").write_text('{"backend": "mmt", "src": "en", "tgt": "de"}', encoding="utf-8")
    store = tmp_path / "elsewhere" / "features" / "synthetic" / "compact"
    assert one_line_error(["translate", "--src", "en", "--tgt", "de", "--params", params, "--store"], capsys) == (
        f"{store}: no FeatureStore here; the stage features@synthetic makes it (dvc repro features@synthetic), "
        f"or pass --store"
    )


def test_flags_override_the_params_defaults(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Given the folder and the device, a command reads no params file: the error is about the folder given."""
    given = tmp_path / "given"
    given.mkdir()
    absent = str(tmp_path / "absent.yaml")
    err = one_line_error(["search", "q", *flags(lang="en", model=given, device="cpu", params=absent)], capsys)
    assert re.fullmatch(rf"{re.escape(str(given))}/model\.safetensors: retrieval checkpoint not found.*", err)
    models = tmp_path / "models"
    err = one_line_error(["translate", *flags(src="en", tgt="de", models=models, params=absent)], capsys)
    assert err.startswith(f"{models / 'mmt-en-de'}: no trained model for en->de")
    params = str(params_elsewhere(tmp_path))
    err = one_line_error(["search", "q", *flags(lang="en", model=given, params=params)], capsys)
    assert err.startswith(f"{given}/model.safetensors")  # the params file gives the device, --model the folder
