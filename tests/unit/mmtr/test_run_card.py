"""A stage run's card (command, settings, inputs, outputs) and the artifact keys that tell experiments apart."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from mmtr.run_card import resolve, run_card_markdown, stage_scope
from tasks import artifact_key

REPO = Path(__file__).resolve().parents[3]

DVC_YAML = """\
stages:
  train_mmt:
    foreach: ${mmt.targets}
    do:
      cmd: python -m flows.train_mmt --target ${item}
      deps:
        - ${paths.prepared}/${corpus_roles.mmt_finetune}
        - mmt
      params:
        - seed
        - mmt.model
      outs:
        - ${paths.models}/mmt/mmt-${languages.pivot}-${item}
  train_retrieval:
    matrix:
      model: [san, vsepp]
      variant: [none, mmt_f]
      role: [all]
    cmd: python -m flows.train_retrieval
    deps:
      - ${paths.augmented}/${item.variant}
    params:
      - retrieval.train
    outs:
      - ${paths.models}/retrieval/${item.model}-${item.variant}-${item.role}
    metrics:
      - ${paths.metrics}/retrieval/${item.model}-${item.variant}-${item.role}.json:
          cache: false
"""

PARAMS = {
    "seed": 7,
    "languages": {"pivot": "en"},
    "paths": {
        "prepared": "data/prepared",
        "models": "data/models",
        "augmented": "data/augmented",
        "metrics": "data/metrics",
    },
    "corpus_roles": {"mmt_finetune": "synthetic"},
    "mmt": {"targets": ["de"], "model": {"emb_dim": 128, "hidden": 256}, "beam": 5},
    "retrieval": {"train": {"epochs": 6, "lr": 0.0002}, "models": ["san"]},
}


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "dvc.yaml").write_text(DVC_YAML, encoding="utf-8")
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(PARAMS), encoding="utf-8")
    return tmp_path / "dvc.yaml", tmp_path / "params.yaml"


def test_a_foreach_run_card_shows_its_settings_inputs_and_outputs(
    files: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DVC_EXP_NAME", raising=False)
    dvc_yaml, params = files
    card = run_card_markdown(
        "train_mmt@de",
        params_file=params,
        dvc_yaml=dvc_yaml,
        command=["python", "-m", "flows.train_mmt", "--target", "de"],
        commit="abc1234+dirty",
        date="2026-11-25",
    )
    lines = card.splitlines()
    assert lines[0] == "# Run card: train_mmt@de"
    assert "| experiment | none (the workspace) |" in lines
    assert "| code | commit abc1234+dirty (2026-11-25) |" in lines
    assert "| command | `python -m flows.train_mmt --target de` |" in lines
    settings = card.split("```yaml\n", 1)[1].split("```", 1)[0]
    assert yaml.safe_load(settings) == {"seed": 7, "mmt.model": {"emb_dim": 128, "hidden": 256}}  # its keys alone
    assert "- `data/prepared/synthetic`" in lines and "- `mmt`" in lines  # inputs, resolved
    assert lines[lines.index("## Outputs") + 2] == "- `data/models/mmt/mmt-en-de`"


def test_a_matrix_run_card_resolves_its_item_and_names_the_experiment(
    files: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DVC_EXP_NAME", "table1")
    dvc_yaml, params = files
    scope = stage_scope(dvc_yaml, "train_retrieval@vsepp-mmt_f-all", PARAMS)
    assert scope == {"item": {"model": "vsepp", "variant": "mmt_f", "role": "all"}}
    assert stage_scope(dvc_yaml, "train_mmt@fr", PARAMS) == {"item": "fr"}
    assert stage_scope(dvc_yaml, "report", PARAMS) == {}
    card = run_card_markdown(
        "train_retrieval@vsepp-mmt_f-all",
        params_file=params,
        dvc_yaml=dvc_yaml,
        command=["python"],
        commit=None,
        date="unknown date",
    )
    assert "| experiment | table1 |" in card and "| code | commit unknown (not a git checkout) (unknown date) |" in card
    assert "- `data/augmented/mmt_f`" in card and "- `data/models/retrieval/vsepp-mmt_f-all`" in card
    assert "## Metrics\n\n- `data/metrics/retrieval/vsepp-mmt_f-all.json`" in card
    assert "retrieval.train:\n  epochs: 6\n  lr: 0.0002" in card


def test_unresolvable_references_stay_as_written() -> None:
    params = {"paths": {"models": "m"}}
    assert resolve("${paths.models}/${nowhere.key}/${item}", params, {"item": "de"}) == "m/${nowhere.key}/de"
    assert resolve("${paths}", params, {}) == "${paths}"  # a whole section is no path


def test_this_repos_stages_all_get_a_card(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text(encoding="utf-8"))["stages"]
    for name in stages:
        card = run_card_markdown(
            name, params_file=REPO / "params.yaml", dvc_yaml=REPO / "dvc.yaml", command=["x"], commit="c", date="d"
        )
        assert "## Settings this stage depends on" in card and "## Outputs" in card, name
        assert "${paths." not in card, name  # every path resolved
    corpus = run_card_markdown(
        "prepare@synthetic",
        params_file=REPO / "params.yaml",
        dvc_yaml=REPO / "dvc.yaml",
        command=["x"],
        commit="c",
        date="d",
    )
    assert "corpora.synthetic:\n  format: multi30k" in corpus  # foreach over a dict: ${key} is the corpus


def test_artifact_keys_carry_the_experiment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DVC_EXP_NAME", raising=False)
    assert artifact_key("retrieval-san-mmt_f-all") == "retrieval-san-mmt-f-all"  # Prefect: a-z, 0-9 and dashes
    monkeypatch.setenv("DVC_EXP_NAME", "Table1_Run")
    assert artifact_key("retrieval-san-mmt_f-all") == "retrieval-san-mmt-f-all-table1-run"
    assert artifact_key("run-card-train_mmt@de") == "run-card-train-mmt-de-table1-run"
