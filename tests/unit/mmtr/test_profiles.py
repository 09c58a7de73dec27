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
from mmtr.dag import build_pipeline
from mmtr.params import ParamsError, load_params
from mmtr.profiles import (
    PROFILES,
    REPLACED_WHOLE,
    apply_profile,
    experiment_names,
    load_profile,
    merge,
    profile_names,
    profile_summary,
)

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
    if name in experiment_names():
        assert written["retrieval"]["models"] == overlay["retrieval"]["models"]
        assert written["retrieval"]["roles"] == overlay["retrieval"]["roles"]
    else:  # a sizes profile: each of its settings lands as it is
        for path in _key_paths(overlay):
            value, expected = written, overlay
            for key in path.split("."):
                value, expected = value[key], expected[key]
            assert value == expected, path
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


def test_a_small_float_of_a_profile_is_written_as_a_float(params_file: Path, tmp_path: Path) -> None:
    """ruamel writes 1e-06, a string to YAML 1.1 readers such as PyYAML; the params file gets 1.0e-06."""
    folder = tmp_path / "profiles"
    folder.mkdir()
    (folder / "decay.yaml").write_text("# decay\nretrieval:\n  train: {weight_decay: 1.0e-6}\n", encoding="utf-8")
    params = apply_profile("decay", params_file, params_file, folder)
    assert params.retrieval.train.weight_decay == 1e-6
    assert "weight_decay: 1.0e-06" in params_file.read_text(encoding="utf-8")


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
        whole = f"{prefix}{key}" in REPLACED_WHOLE or f"{prefix.rstrip('.')}.*" in REPLACED_WHOLE
        if isinstance(value, dict) and not whole:
            paths |= _key_paths(value, f"{prefix}{key}.")
        else:
            paths.add(f"{prefix}{key}")
    return paths


def test_profiles_set_the_same_keys_so_none_leaks_into_the_next() -> None:
    names = experiment_names()
    keys = {name: _key_paths(load_profile(name)) for name in names}
    for name in names:
        assert keys[name] == keys[names[0]], f"profiles/{name}.yaml sets other keys than profiles/{names[0]}.yaml"
    for name in sorted(set(profile_names()) - set(names)):  # a sizes profile: none of an experiment's keys
        assert not _key_paths(load_profile(name)) & keys[names[0]], f"profiles/{name}.yaml sets an experiment's keys"
    assert {"table1", "table3", "real_flickr30k", "real_coco"} <= set(names) and "paper_sizes" not in names


def test_the_paper_sizes_are_the_papers() -> None:
    """Huang et al. 2020 section 4.2: 512-d states, 300-d words, Adam 5e-4 then 5e-5 after epoch 15, batch 128, 24
    epochs, captions cut at 100 tokens, words seen under 4 times unknown."""
    sizes = load_profile("paper_sizes")["retrieval"]
    assert all(config["word_dim"] == 300 and config["hidden"] == 512 for config in sizes["configs"].values())
    assert sizes["train"] == {
        "epochs": 24,
        "batch_size": 128,
        "lr": 0.0005,
        "lr_decay_epoch": 15,
        "lr_decay": 0.1,
        "warmup_epochs": 0,
        "patience": 0,
    }
    assert sizes["vocab"] == {"min_count": 4, "max_len": 100}
    for name in ("real_flickr30k", "real_coco"):
        features = load_profile(name)["features"]
        assert features["extractor"] == "butd" and features["regions"] == {"mode": "fixed", "count": 36}


@pytest.mark.parametrize("name", ["real_flickr30k", "real_coco"])
def test_a_real_data_profile_gives_a_dag_without_the_built_in_world(name: str, params_file: Path) -> None:
    params = apply_profile(name, params_file, params_file)
    assert not params.builtin_world_in_use()
    stages = build_pipeline(params).names()
    assert "generate" not in stages
    features = sorted(stage for stage in stages if stage.startswith("features@"))
    # Multi30K and Flickr30K read one image folder: one store; COCO has its own images
    assert features == (["features@flickr30k"] if name == "real_flickr30k" else ["features@coco", "features@multi30k"])


@pytest.mark.parametrize("first", experiment_names())
def test_a_profile_applied_after_another_gives_what_it_gives_alone(
    first: str, params_file: Path, tmp_path: Path
) -> None:
    """Profiles do not accumulate: corpora, roles and retrieval settings of an earlier profile are all replaced."""
    for second in experiment_names():
        alone, after = tmp_path / f"{second}-alone.yaml", tmp_path / f"{first}-{second}.yaml"
        apply_profile(second, params_file, alone)
        apply_profile(first, params_file, after)
        apply_profile(second, after, after)
        assert yaml.safe_load(after.read_text(encoding="utf-8")) == yaml.safe_load(alone.read_text(encoding="utf-8"))


def test_kadar2018_sets_the_papers_conditions(params_file: Path) -> None:
    """Kádár et al. 2018: VSE++, batches of one language, c2c at 0.5 exactly on the roles named so, the halves and
    the disjoint split of Table 5, one caption per image for Bi-comparable, translation captions for Table 4."""
    params = apply_profile("kadar2018", params_file, params_file)
    retrieval = params.retrieval
    assert retrieval.models == ("vsepp",) and retrieval.variants == ("none",) and retrieval.replicates == 3
    setups = {name: retrieval.role(name, "en").setup for name in retrieval.roles}
    assert all(setup.batches == "one_language" for setup in setups.values())
    assert {name for name, setup in setups.items() if setup.c2c_probability == 0.5} == {
        name for name in retrieval.roles if name.endswith("_c2c")
    }
    assert all(setup.c2c_probability in (0.0, 0.5) for setup in setups.values())
    assert {name for name, setup in setups.items() if setup.images == 0.5} == {
        "half_en",
        "half_de",
        "bi_overlap",
        "bi_overlap_c2c",
    }
    assert [name for name, setup in setups.items() if setup.disjoint] == ["bi_disjoint"]
    assert {name for name, setup in setups.items() if setup.kinds == ("translation",)} == {
        "mono_en_translation",
        "mono_de_translation",
        "bi_translation",
        "bi_translation_c2c",
    }
    assert {name for name, setup in setups.items() if setup.captions_per_image == 1} == {
        "bi_comparable",
        "bi_comparable_c2c",
    }
    assert {name for name, setup in setups.items() if setup.low_resource} == {"low_de", "low_de_bi", "low_de_bi_c2c"}
    assert retrieval.role("low_de_bi", "en").train_languages == ("en", "de")


def test_check_params_shows_each_roles_setup(params_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    apply_profile("kadar2018", params_file, params_file)
    cli.main(["check-params", "--params", str(params_file)])
    out = capsys.readouterr().out
    assert "retrieval: 16 runs = models vsepp x variants none x roles mono_en_translation, " in out
    expected = "kinds comparable, disjoint true, batches one_language, c2c_probability 0"
    assert f"    bi_disjoint: trains on en, de; tested on en, de; setup: {expected}\n" in out
    expected = "kinds comparable, low_resource de 0.1, batches one_language, c2c_probability 0.5"
    assert f"    low_de_bi_c2c: trains on en, de; tested on en, de; setup: {expected}\n" in out


@pytest.mark.parametrize("name", profile_names())
def test_every_stage_input_of_a_profile_is_raw_data_or_another_stages_output(name: str, params_file: Path) -> None:
    """What `dvc repro` needs of the DAG a profile gives: an input that no stage writes and that is not raw data would
    stop the run with `No such file or directory` (as MULE's, which trains no MT system, once did)."""
    params = apply_profile(name, params_file, params_file)
    stages = [stage for group in build_pipeline(params, root=REPO).groups.values() for stage in group.values()]
    outputs = {out for stage in stages for out in (*stage.outs, *stage.metrics, *stage.uncached)}
    # an output itself, a file inside an output folder, or a folder of outputs (the report reads data/metrics/mmt)
    orphans = {
        dep
        for stage in stages
        for dep in stage.deps
        if not dep.startswith("data/raw/")
        and not any(dep == out or dep.startswith(f"{out}/") or out.startswith(f"{dep}/") for out in outputs)
    }
    assert orphans == set()
