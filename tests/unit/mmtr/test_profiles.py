"""Profiles: the papers' experiments as params overlays, merged into a params file with its comments kept."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from common.errors import InputError
from mmtr import cli
from mmtr.params import ParamsError, load_params
from mmtr.profiles import PROFILES, REPLACED_WHOLE, apply_profile, load_profile, merge, profile_names, profile_summary

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def params_file(tmp_path: Path) -> Path:
    path = tmp_path / "params.yaml"
    shutil.copy(REPO / "params.yaml", path)
    return path


def test_merge_replaces_leaves_and_merges_mappings_key_by_key() -> None:
    base: dict[str, Any] = {"a": {"b": 1, "c": [1, 2]}, "d": 4}
    merge(base, {"a": {"c": [3], "e": {"f": 5}}, "d": {"g": 6}})
    assert base == {"a": {"b": 1, "c": [3], "e": {"f": 5}}, "d": {"g": 6}}


@pytest.mark.parametrize("name", profile_names())
def test_every_shipped_profile_applies_to_the_repository_params(name: str, params_file: Path) -> None:
    params = apply_profile(name, params_file, params_file)
    assert params == load_params(params_file)
    overlay = load_profile(name)
    written = yaml.safe_load(params_file.read_text(encoding="utf-8"))
    assert written["retrieval"]["models"] == overlay["retrieval"]["models"]
    assert written["retrieval"]["roles"] == overlay["retrieval"]["roles"]
    assert profile_summary(name), f"profiles/{name}.yaml: first comment line says what it reproduces"


def test_apply_keeps_comments_and_untouched_keys(params_file: Path, tmp_path: Path) -> None:
    before = params_file.read_text(encoding="utf-8")
    out = tmp_path / "merged.yaml"
    apply_profile("table4", params_file, out)
    after = out.read_text(encoding="utf-8")
    comments = [line.strip() for line in before.splitlines() if line.strip().startswith("#")]
    assert comments and all(comment in after for comment in comments)
    assert params_file.read_text(encoding="utf-8") == before, "--out leaves the source params file alone"
    original, merged = yaml.safe_load(before), yaml.safe_load(after)
    assert merged["mmt"]["finetune"] == original["mmt"]["finetune"]
    assert merged["retrieval"]["objective"]["per_model"] == {"scan": "harder"}


def test_an_invalid_profile_is_a_params_error_and_writes_nothing(params_file: Path, tmp_path: Path) -> None:
    folder = tmp_path / "profiles"
    folder.mkdir()
    (folder / "broken.yaml").write_text("# a broken one\nretrieval:\n  models: [san, clip]\n", encoding="utf-8")
    before = params_file.read_text(encoding="utf-8")
    with pytest.raises(ParamsError, match=r"retrieval\.models\[1\]: unknown name 'clip'"):
        apply_profile("broken", params_file, params_file, folder)
    assert params_file.read_text(encoding="utf-8") == before


def test_unknown_profile_lists_the_known_ones(params_file: Path) -> None:
    with pytest.raises(InputError, match=r"unknown profile 'table9'; known: .*table4"):
        apply_profile("table9", params_file, params_file)
    with pytest.raises(InputError, match="unknown profile"):
        load_profile("../params")


def test_cli_lists_profiles_with_what_they_reproduce(capsys: pytest.CaptureFixture[str]) -> None:
    cli.main(["profile"])
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == profile_names()
    assert len(profile_names()) == len(list(PROFILES.glob("*.yaml")))


def test_cli_applies_without_running_unless_asked(
    params_file: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    commands: list[list[str]] = []
    monkeypatch.setattr(subprocess, "run", lambda command, check: commands.append(command) or _Done())
    cli.main(["profile", "table4", "--params", str(params_file)])
    assert commands == []
    assert "profile table4 applied" in capsys.readouterr().out
    cli.main(["profile", "table5", "--params", str(params_file), "--run"])
    assert commands == [["dvc", "exp", "run", "-n", "table5"]]


def test_cli_run_refuses_a_separate_output_file(params_file: Path, tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["profile", "table4", "--params", str(params_file), "--out", str(tmp_path / "x.yaml"), "--run"])
    assert exit_info.value.code == 2
    assert not (tmp_path / "x.yaml").exists()


class _Done:
    returncode = 0


def _key_paths(tree: dict[str, Any], prefix: str = "") -> set[str]:
    """Every leaf key path of a profile, the sections replaced whole counted as one."""
    paths = set()
    for key, value in tree.items():
        if isinstance(value, dict) and f"{prefix}{key}" not in REPLACED_WHOLE:
            paths |= _key_paths(value, f"{prefix}{key}.")
        else:
            paths.add(f"{prefix}{key}")
    return paths


def test_profiles_set_the_same_keys_so_none_leaks_into_the_next() -> None:
    names = profile_names()
    keys = {name: _key_paths(load_profile(name)) for name in names}
    for name in names:
        assert keys[name] == keys[names[0]], f"profiles/{name}.yaml sets other keys than profiles/{names[0]}.yaml"


@pytest.mark.parametrize("first", profile_names())
def test_a_profile_applied_after_another_gives_what_it_gives_alone(
    first: str, params_file: Path, tmp_path: Path
) -> None:
    """Profiles do not accumulate: corpora, roles and retrieval settings of an earlier profile are all replaced."""
    for second in profile_names():
        alone, after = tmp_path / f"{second}-alone.yaml", tmp_path / f"{first}-{second}.yaml"
        apply_profile(second, params_file, alone)
        apply_profile(first, params_file, after)
        apply_profile(second, after, after)
        assert yaml.safe_load(after.read_text(encoding="utf-8")) == yaml.safe_load(alone.read_text(encoding="utf-8"))
