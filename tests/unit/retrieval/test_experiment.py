"""One retrieval run from caption tables: the `retrieval` settings, caption selection, training, testing and
translate-search on tiny data; the objective's settings and language-type weights."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import torch
from safetensors.torch import load_file

import retrieval.experiment as experiment
from common.checks import SettingError
from common.config import build
from common.epoch_log import EpochLine, format_epoch
from common.errors import InputError
from common.runtime import Runtime
from corpora import tables
from features.regions import ImageRegions
from features.store import FeatureStore, FeatureStoreWriter
from retrieval.checkpoint import LoadedModel, load_retrieval
from retrieval.config import RetrievalConfig
from retrieval.data import Caption, CaptionSet, encode_captions
from retrieval.experiment import CAPTION_COLUMNS, evaluation_captions, read_captions, train_model, translate_search
from retrieval.experiment import test_model as score_test_split
from retrieval.inference import EvaluationConfig, evaluate
from retrieval.losses import RankingLoss
from retrieval.results import rounded
from retrieval.roles import ResolvedRole
from retrieval.significance import STATISTICS, QueryRanks, recalls
from retrieval.train import TrainConfig
from retrieval.vocab import VocabConfig
from retrieval.zoo.mule import MULEConfig
from retrieval.zoo.registry import MODELS
from retrieval.zoo.san import SANConfig
from retrieval.zoo.scan import SCANConfig

CPU = Runtime("cpu")
MODEL_NAMES = ", ".join(MODELS)


# --- settings ------------------------------------------------------------------------------------------------


def test_configs_become_each_models_config_dataclass() -> None:
    """Fields not set keep the paper's defaults; models without settings get the defaults on request."""
    config = RetrievalConfig(models=("san", "scan"), configs={"san": {"word_dim": 8, "hidden": 16}})
    assert config.configs == {"san": SANConfig(word_dim=8, hidden=16)}
    assert config.model_config("san") is config.configs["san"]
    assert config.model_config("scan") == SCANConfig()


def test_already_built_configs_are_accepted_again() -> None:
    """Prefect re-validates flow parameters by constructing the dataclasses again from their field values."""
    config = RetrievalConfig(models=("san", "mule"), configs={"san": {"hidden": 16}, "mule": {"topk": 3}})
    again = dataclasses.replace(config)
    assert again == config and again.configs["mule"] == MULEConfig(topk=3)
    assert build(RetrievalConfig, dataclasses.asdict(config)) == config  # and from its plain form


def test_configs_survive_a_json_round_trip_of_flow_parameters() -> None:
    """Parameters of a deployed flow run travel as JSON and are validated back into the dataclass by pydantic."""
    pydantic = pytest.importorskip("pydantic")
    config = RetrievalConfig(models=("san", "scan"), configs={"san": {"hidden": 16}, "scan": {"image_chunk": 4}})
    adapter = pydantic.TypeAdapter(RetrievalConfig)
    assert adapter.validate_python(config) == config
    again = adapter.validate_json(adapter.dump_json(config))
    assert again == config and isinstance(again.configs["scan"], SCANConfig)


@pytest.mark.parametrize(
    ("configs", "message"),
    [
        ({"san": {"hiden": 16}}, r"^configs\.san\.hiden: unknown key; did you mean 'hidden'\? allowed keys here: "),
        ({"san": {"rnn": "transformer"}}, r"^configs\.san\.rnn: got 'transformer', allowed: "),
        ({"san": {"hidden": "big"}}, r"^configs\.san\.hidden: expected an integer, got 'big'$"),
        ({"mule": {"topk": 0}}, r"^configs\.mule\.topk: got 0, allowed: topk > 0$"),
        ({"san": {"hidden": 0}}, r"^configs\.san\.hidden: got 0, allowed: hidden > 0$"),
        ({"vsepp": {"word_dim": -3}}, r"^configs\.vsepp\.word_dim: got -3, allowed: word_dim > 0$"),
        ({"dan": {"dropout": 1.0}}, r"^configs\.dan\.dropout: got 1\.0, allowed: 0 <= dropout < 1$"),
        ({"dan": {"steps": -1}}, r"^configs\.dan\.steps: got -1, allowed: steps >= 0$"),
        ({"multihead": {"heads": 0}}, r"^configs\.multihead\.heads: got 0, allowed: heads > 0$"),
        ({"multihead": {"diversity_weight": -1.0}}, r"^configs\.multihead\.diversity_weight: got -1\.0, allowed: "),
        ({"parallel_embn": {"margin": -0.1}}, r"^configs\.parallel_embn\.margin: got -0\.1, allowed: margin >= 0$"),
        ({"scan": {"lambda_lse": 0.0}}, r"^configs\.scan\.lambda_lse: got 0\.0, allowed: lambda_lse > 0$"),
        ({"clip": {}}, rf"^configs\.clip: unknown model; known: {MODEL_NAMES}$"),
        ({"san": 16}, r"^configs\.san: expected a mapping of settings, got 16$"),
        ({"san": MULEConfig()}, r"^configs\.san: expected a mapping of settings, got MULEConfig\("),
    ],
)
def test_bad_model_settings_name_their_key_path(configs: dict[str, Any], message: str) -> None:
    with pytest.raises(SettingError, match=message):
        RetrievalConfig(models=("san",), configs=configs)


def test_model_names_kinds_and_fasttext_languages_are_checked() -> None:
    with pytest.raises(SettingError, match=rf"^models\[1\]: unknown name 'clip'; known: {MODEL_NAMES}$"):
        RetrievalConfig(models=("san", "clip"))
    with pytest.raises(SettingError, match=r"^models: at least one model is needed$"):
        RetrievalConfig(models=())
    with pytest.raises(SettingError, match=r"^languages: at least one language is needed$"):
        RetrievalConfig(languages=())
    with pytest.raises(SettingError, match=r"^train_kinds\[1\]: got 'mt', allowed: comparable, translation$"):
        RetrievalConfig(train_kinds=("comparable", "mt"))
    with pytest.raises(SettingError, match=r"^vocab\.fasttext\.de: not one of retrieval\.languages \['en'\]$"):
        RetrievalConfig(languages=("en",), vocab=VocabConfig(fasttext={"de": "cc.de.300.vec"}))
    RetrievalConfig(languages=("en", "de"), vocab=VocabConfig(fasttext={"de": "cc.de.300.vec"}))


def test_an_alias_runs_a_model_with_its_fields_over_the_models_config() -> None:
    config = RetrievalConfig(
        models=("multihead", "multihead_nodiv"),
        configs={"multihead": {"hidden": 8, "text_ranking_weight": 0.6}},
        aliases={"multihead_nodiv": {"model": "multihead", "diversity_weight": 0.0}},
    )
    assert config.run_names() == ["multihead-none-all", "multihead_nodiv-none-all"]
    assert config.registry_model("multihead_nodiv") == "multihead" and config.registry_model("san") == "san"
    own, alias = config.model_config("multihead"), config.model_config("multihead_nodiv")
    assert alias == dataclasses.replace(own, diversity_weight=0.0) and own.diversity_weight == 1.0
    assert alias.hidden == 8 and alias.text_ranking_weight == 0.6
    assert dataclasses.replace(config) == config  # Prefect's re-validation


@pytest.mark.parametrize(
    ("aliases", "message"),
    [
        ({"multihead-nodiv": {"model": "multihead"}}, r"^aliases\.multihead-nodiv: got 'multihead-nodiv', allowed: "),
        ({"san": {"model": "dan"}}, r"^aliases\.san: a registry model has this name$"),
        ({"clip2": {"model": "clip"}}, rf"^aliases\.clip2\.model: expected model: one of {MODEL_NAMES}, got 'clip'$"),
        ({"nodiv": {"diversity_weight": 0}}, r"^aliases\.nodiv\.model: expected model: one of .*, got None$"),
        ({"nodiv": {"model": "multihead", "diversity_weight": -1}}, r"^aliases\.nodiv\.diversity_weight: got -1"),
        ({"nodiv": {"model": "san", "diversity_weight": 0}}, r"^aliases\.nodiv\.diversity_weight: unknown key"),
    ],
)
def test_bad_aliases_name_their_key_path(aliases: dict[str, Any], message: str) -> None:
    with pytest.raises(SettingError, match=message):
        RetrievalConfig(models=("san",), aliases=aliases)


def test_an_unknown_model_lists_the_aliases_too() -> None:
    with pytest.raises(SettingError, match=r"^models\[0\]: unknown name 'nodiv'; known: san, .*, scan_fusion, twin$"):
        RetrievalConfig(models=("nodiv",), aliases={"twin": {"model": "san"}})


def test_settings_errors_from_params_carry_the_section_path() -> None:
    with pytest.raises(SettingError, match=r"^retrieval\.configs\.vsepp\.hiden: unknown key"):
        build(RetrievalConfig, {"models": ["vsepp"], "configs": {"vsepp": {"hiden": 3}}}, "retrieval")


# --- the objective -------------------------------------------------------------------------------------------


def test_for_model_resolves_auto_only() -> None:
    auto = RankingLoss(kind="auto", margin=0.3, beta={"en-human": 1.0})
    assert auto.for_model("mule", "topk") == RankingLoss(kind="topk", margin=0.3, beta={"en-human": 1.0})
    harder = RankingLoss(kind="harder")
    assert harder.for_model("mule", "topk") == harder


def test_a_model_of_per_model_takes_its_own_kind() -> None:
    """Eq. 9 for SCAN while every other model keeps its own (auto)."""
    loss = RankingLoss(kind="auto", margin=0.3, per_model={"scan": "harder", "vsepp": "auto"})
    assert loss.for_model("scan", "max_violation") == RankingLoss(kind="harder", margin=0.3)
    assert loss.for_model("vsepp", "max_violation") == RankingLoss(kind="max_violation", margin=0.3)
    assert loss.for_model("san", "harder") == RankingLoss(kind="harder", margin=0.3)
    with pytest.raises(SettingError, match=r"^per_model\.scan: got 'hardest', allowed: harder, max_violation, sum, "):
        RankingLoss(per_model={"scan": "hardest"})  # type: ignore[dict-item]
    with pytest.raises(SettingError, match=r"^objective\.per_model\.clip: unknown model; known: san, "):
        RetrievalConfig(objective=RankingLoss(per_model={"clip": "sum"}))


def test_auto_refuses_to_be_called() -> None:
    sims, caption_image = torch.eye(2), torch.tensor([0, 1])
    with pytest.raises(ValueError, match=r"^a loss of kind auto must be resolved with for_model\(\) before use$"):
        RankingLoss(kind="auto")(sims, caption_image, torch.zeros(2, dtype=torch.long), torch.ones(1))


def test_type_weights_equal_without_beta() -> None:
    assert RankingLoss().type_weights(["de-mmt", "en-human", "fr-mt", "cs-mt"]) == [0.25] * 4


def test_type_weights_normalise_the_configured_ones() -> None:
    """beta {en-human: 3, de-mmt: 1, fr-mt: 2}; fr-mt is not a training type, de-human is not named: 0."""
    loss = RankingLoss(beta={"en-human": 3.0, "de-mmt": 1.0, "fr-mt": 2.0})
    assert loss.type_weights(["de-human", "de-mmt", "en-human"]) == [0.0, 0.25, 0.75]
    assert loss.type_weights(["fr-mt", "en-human"]) == [0.4, 0.6]


def test_type_weights_refuse_beta_without_a_training_type() -> None:
    loss = RankingLoss(beta={"fr-mt": 1.0, "de-mmt": 0.0})
    with pytest.raises(ValueError, match=r"gives no weight to the training types \['de-mmt', 'en-human'\]$"):
        loss.type_weights(["de-mmt", "en-human"])


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"beta": {"english-human": 1.0}}, r"^beta\.english-human: expected <lang>-<human\|mt\|mmt>: a weight >= 0$"),
        ({"beta": {"en-synthetic": 1.0}}, r"^beta\.en-synthetic: expected"),
        ({"beta": {"en-mt": -0.5}}, r"^beta\.en-mt: expected <lang>-<human\|mt\|mmt>: a weight >= 0$"),
        ({"margin": -0.1}, r"^margin: got -0.1, allowed: 0.0 to 10.0$"),
        ({"margin": 10.5}, r"^margin: got 10.5, allowed"),
        ({"topk": 0}, r"^topk: got 0, allowed: 1 to 100000$"),
        ({"topk_margin": 11.0}, r"^topk_margin: got 11.0, allowed: 0 to 10$"),
    ],
)
def test_objective_checks(values: dict[str, Any], message: str) -> None:
    with pytest.raises(SettingError, match=message):
        RankingLoss(**values)


def test_margin_bounds_are_allowed() -> None:
    assert RankingLoss(margin=0.0).margin == 0.0 and RankingLoss(margin=10.0, beta={"cs-mmt": 0.0}).margin == 10.0


# --- tiny captions, images and features ----------------------------------------------------------------------

COLOURS = ["red", "blue", "green", "yellow"]
FARBEN = ["rot", "blau", "grün", "gelb"]
SIZES = [("small", "klein"), ("big", "groß")]
SPLIT_IDS = {
    "train": [f"t{n:02d}" for n in range(12)],
    "val": [f"v{n}" for n in range(4)],
    "test": [f"s{n}" for n in range(8)],
}
K, D = 3, 8


def _describe(index: int) -> tuple[str, str]:
    colour, size = index % 4, (index // 4) % 2
    return f"a {SIZES[size][0]} {COLOURS[colour]} thing", f"ein {SIZES[size][1]} {FARBEN[colour]} ding"


def _caption_rows() -> list[dict[str, Any]]:
    """Per image: en comparable captions (two; one in val), a de comparable one and an en translation caption with a
    word found nowhere else ("zebra"). Train images also get an mmt de caption made from their first en one (with
    the word "objekt"), test images a fr translation caption."""
    rows: list[dict[str, Any]] = []

    def add(
        caption_id: str, image_id: str, split: str, lang: str, text: str, kind: str, parent: str | None = None
    ) -> None:
        rows.append(
            {
                "caption_id": caption_id,
                "image_id": image_id,
                "split": split,
                "lang": lang,
                "text": text,
                "origin": "mmt" if parent else "human",
                "system": "mmt-en-de" if parent else None,
                "hop": 1 if parent else 0,
                "parent_id": parent,
                "kind": kind,
            }
        )

    for split, ids in SPLIT_IDS.items():
        for index, image_id in enumerate(ids):
            en, de = _describe(index)
            for number in range(1 if split == "val" else 2):
                add(f"{image_id}#en#c{number}", image_id, split, "en", en if number == 0 else f"one {en}", "comparable")
            add(f"{image_id}#de#c0", image_id, split, "de", de, "comparable")
            add(f"{image_id}#en#t", image_id, split, "en", f"the zebra {COLOURS[index % 4]}", "translation")
            if split == "train":
                add(
                    f"{image_id}#de#mmt",
                    image_id,
                    split,
                    "de",
                    de.replace("ding", "objekt"),
                    "comparable",
                    parent=f"{image_id}#en#c0",
                )
            if split == "test":
                add(f"{image_id}#fr#t", image_id, split, "fr", f"une chose {index}", "translation")
    return rows


@dataclasses.dataclass(frozen=True)
class Data:
    captions: Path
    store: Path


def _write_data(root: Path) -> Data:
    ids = [image_id for split_ids in SPLIT_IDS.values() for image_id in split_ids]
    splits = [split for split, split_ids in SPLIT_IDS.items() for _ in split_ids]
    images = tables.images_table(
        {
            "image_id": ids,
            "split": splits,
            "path": [f"{i}.png" for i in ids],
            "width": [None] * len(ids),
            "height": [None] * len(ids),
            "dataset": ["toy"] * len(ids),
        }
    )
    rows = _caption_rows()
    captions = tables.captions_table(
        {name: [row[name] for row in rows] for name in tables.CAPTIONS_SCHEMA.names}, images=images
    )
    tables.write_captions(captions, root / "captions.parquet", images=images)
    rng = np.random.default_rng(0)
    with FeatureStoreWriter(
        root / "store", image_ids=ids, max_regions=K, dim=D, extractor="test", checkpoint_sha256=None, config={}
    ) as writer:
        for split_ids in SPLIT_IDS.values():
            for index, image_id in enumerate(split_ids):
                features = rng.normal(scale=0.1, size=(K, D)).astype(np.float32)
                features[0, index % 4] += 1.0
                features[1, 4 + (index // 4) % 2] += 1.0
                writer.write(image_id, ImageRegions(features, np.zeros((K, 4), np.float32)), width=8, height=8)
    return Data(root / "captions.parquet", root / "store")


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Data:
    return _write_data(tmp_path_factory.mktemp("retrieval-data"))


# --- reading captions ----------------------------------------------------------------------------------------


def test_read_captions_filters_split_languages_kinds_and_origin(data: Data) -> None:
    every = read_captions(data.captions, split="train", languages=["en", "de"], kinds=None, human_only=False)
    assert len(every) == 12 * 5 and set(every[0]) == set(CAPTION_COLUMNS)
    human = read_captions(data.captions, split="train", languages=["en", "de"], kinds=None, human_only=True)
    assert len(human) == 12 * 4 and {row["origin"] for row in human} == {"human"}
    comparable_de = read_captions(
        data.captions, split="train", languages=["de"], kinds=["comparable"], human_only=False
    )
    assert [row["caption_id"] for row in comparable_de[:2]] == ["t00#de#c0", "t00#de#mmt"]
    assert len(comparable_de) == 24
    test_fr = read_captions(data.captions, split="test", languages=["fr", "cs"], kinds=None, human_only=True)
    assert [row["caption_id"] for row in test_fr] == [f"s{n}#fr#t" for n in range(8)]
    assert read_captions(data.captions, split="val", languages=["fr"], kinds=None, human_only=True) == []


def test_read_captions_missing_table(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"nothing\.parquet: captions table not found$"):
        read_captions(tmp_path / "nothing.parquet", split="test", languages=["en"], kinds=None, human_only=True)


def test_evaluation_captions_prefer_comparable_ones(data: Data) -> None:
    rows = read_captions(data.captions, split="test", languages=["en", "de", "fr"], kinds=None, human_only=True)
    english = evaluation_captions(rows, "en", source="t")
    assert [c.caption_id for c in english[:3]] == ["s0#en#c0", "s0#en#c1", "s1#en#c0"] and len(english) == 16
    assert english[0] == Caption("s0#en#c0", "s0", "en", "a small red thing", "human")
    french = evaluation_captions(rows, "fr", source="t")  # Multi30K fr/cs: translation captions only
    assert [c.caption_id for c in french] == [f"s{n}#fr#t" for n in range(8)]
    with pytest.raises(InputError, match=r"^test table: no 'cs' captions; drop cs from retrieval\.languages or add"):
        evaluation_captions(rows, "cs", source="test table")


# --- training, testing and translate-search ------------------------------------------------------------------

CONFIG = RetrievalConfig(
    models=("san",),
    languages=("en", "de"),
    configs={"san": {"word_dim": 16, "hidden": 16}},
    vocab=VocabConfig(min_count=1, max_len=20),
    objective=RankingLoss(kind="auto"),
    train=TrainConfig(epochs=3, batch_size=8, lr=0.01, lr_decay_epoch=2),
    evaluation=EvaluationConfig(val_images=3, batch_size=16),
)


@dataclasses.dataclass
class Run:
    folder: Path
    result: Any
    fit_calls: list[dict[str, Any]]
    epochs: list[EpochLine]


ALL = CONFIG.role("all", "en")


def _train(
    data: Data,
    folder: Path,
    monkeypatch: pytest.MonkeyPatch,
    config: RetrievalConfig = CONFIG,
    role: ResolvedRole = ALL,
) -> Run:
    """train_model with retrieval.experiment.fit wrapped to record what it was given."""
    calls: list[dict[str, Any]] = []
    real_fit = experiment.fit

    def recording_fit(model: Any, train: CaptionSet, validation: dict[str, CaptionSet], *args: Any, **kwargs: Any):
        calls.append({"train": train, "validation": validation, **kwargs})
        return real_fit(model, train, validation, *args, **kwargs)

    monkeypatch.setattr(experiment, "fit", recording_fit)
    epochs: list[EpochLine] = []
    result = train_model(
        config,
        "san",
        role,
        data.captions,
        data.store,
        folder / "vectors",
        folder,
        seed=0,
        runtime=CPU,
        on_epoch=epochs.append,
    )
    return Run(folder, result, calls, epochs)


@pytest.fixture(scope="module")
def run(data: Data, tmp_path_factory: pytest.TempPathFactory) -> Run:
    with pytest.MonkeyPatch.context() as monkeypatch:
        return _train(data, tmp_path_factory.mktemp("san"), monkeypatch)


@pytest.fixture(scope="module")
def loaded(run: Run) -> LoadedModel:
    return load_retrieval(run.folder / "model", device=torch.device("cpu"), expect_model="san")


def test_training_captions_are_human_of_train_kinds_plus_synthesized(run: Run) -> None:
    """Human translation captions are left out (train_kinds: comparable); synthesized ones always stay."""
    (call,) = run.fit_calls
    train: CaptionSet = call["train"]
    expected = {
        f"{image_id}#{suffix}" for image_id in SPLIT_IDS["train"] for suffix in ("en#c0", "en#c1", "de#c0", "de#mmt")
    }
    assert set(train.caption_ids) == expected and len(train) == 48
    assert train.type_names == ("de-human", "de-mmt", "en-human")
    assert int(train.synthetic.sum()) == 12
    assert call["loss"] == RankingLoss(kind="harder")  # auto -> SAN's own
    assert call["type_weights"].tolist() == pytest.approx([1 / 3] * 3)


def test_validation_takes_the_first_val_images_per_language(run: Run) -> None:
    (call,) = run.fit_calls
    validation: dict[str, CaptionSet] = call["validation"]
    assert list(validation) == ["en", "de"]
    assert validation["en"].caption_ids == ("v0#en#c0", "v1#en#c0", "v2#en#c0")  # val_images 3; comparable only
    assert validation["de"].caption_ids == ("v0#de#c0", "v1#de#c0", "v2#de#c0")
    assert validation["de"].type_names == ("de-human",)  # scored only: its own types, as the test split


def test_model_file_holds_vocabulary_types_and_history(run: Run, loaded: LoadedModel, data: Data) -> None:
    assert loaded.vocab.languages == ("en", "de") and loaded.max_len == 20
    assert "zebra" not in loaded.vocab.words_of("en")  # only in human translation captions
    assert {"objekt", "ding", "groß"} <= set(loaded.vocab.words_of("de"))  # synthesized words are learnt
    assert loaded.type_names == ("de-human", "de-mmt", "en-human")
    assert loaded.extra["loss"] == "harder" and loaded.extra["store"] == str(data.store)
    assert loaded.extra["best_epoch"] == run.result.best_epoch and len(run.epochs) == len(run.result.history) == 3
    assert [line.epoch for line in run.epochs] == [entry["epoch"] for entry in loaded.extra["history"]] == [1, 2, 3]
    assert 1 <= loaded.extra["best_epoch"] <= 3  # counted from 1, as the history
    assert format_epoch(run.epochs[0]).startswith("san seed 0 · epoch 1/3 · loss ")
    stored = json.loads((run.folder / "model.json").read_text())
    assert stored["type_weights"] == pytest.approx([1 / 3] * 3)
    assert stored["config"] == dataclasses.asdict(SANConfig(word_dim=16, hidden=16))


def test_training_is_reproducible_for_a_seed(
    run: Run, data: Data, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _train(data, tmp_path, monkeypatch)
    first, second = load_file(run.folder / "model.safetensors"), load_file(tmp_path / "model.safetensors")
    assert first.keys() == second.keys()
    assert all(torch.equal(tensor, second[name]) for name, tensor in first.items())
    # the same weights and fields: the same bytes (the stored history leaves out each epoch's steps per second)
    for name in ("model.safetensors", "model.json"):
        assert (run.folder / name).read_bytes() == (tmp_path / name).read_bytes(), name


def test_configured_beta_weights_reach_the_loss(data: Data, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = dataclasses.replace(
        CONFIG,
        objective=RankingLoss(kind="sum", beta={"en-human": 3.0, "de-mmt": 1.0}),
        train=TrainConfig(epochs=1, batch_size=8),
    )
    (call,) = _train(data, tmp_path, monkeypatch, config).fit_calls
    assert call["loss"].kind == "sum" and call["type_weights"].tolist() == [0.0, 0.25, 0.75]


@pytest.mark.parametrize(
    ("role", "kept", "validated"),
    [
        ("discard_human_targets", ("en#c0", "en#c1", "de#mmt"), ["en", "de"]),  # Table 4
        ("pivot_test", ("en#c0", "en#c1", "de#mmt"), ["en"]),  # Tables 1-3
        ("pivot_only", ("en#c0", "en#c1"), ["en"]),  # Table 5's English-only model
    ],
)
def test_a_role_chooses_training_captions_and_validation_languages(
    data: Data, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, role: str, kept: tuple[str, ...], validated: list[str]
) -> None:
    config = dataclasses.replace(CONFIG, train=TrainConfig(epochs=1, batch_size=8))
    (call,) = _train(data, tmp_path, monkeypatch, config, CONFIG.role(role, "en")).fit_calls
    train: CaptionSet = call["train"]
    assert set(train.caption_ids) == {f"{image_id}#{suffix}" for image_id in SPLIT_IDS["train"] for suffix in kept}
    assert list(call["validation"]) == validated
    loaded = load_retrieval(tmp_path / "model", device=torch.device("cpu"), expect_model="san")
    assert loaded.extra["test_languages"] == validated
    languages = ("en",) if role == "pivot_only" else ("en", "de")  # de: only its synthesized captions
    assert loaded.vocab.languages == languages


def test_a_role_tested_on_a_language_it_never_trains_on_stops_before_training(data: Data, tmp_path: Path) -> None:
    """A `none` variant has no synthesized de captions, so Table 4's role has nothing to learn de from."""
    human_only = tmp_path / "none.parquet"
    table = pq.read_table(data.captions)
    pq.write_table(table.filter(pc.equal(table["origin"], "human")), human_only)
    role = CONFIG.role("discard_human_targets", "en")
    with pytest.raises(
        InputError,
        match=r"none\.parquet: no training captions of de that the role keeps "
        r"\(en, de:synthetic\), but it is tested on en, de$",
    ):
        train_model(CONFIG, "san", role, human_only, data.store, tmp_path, tmp_path, seed=0, runtime=CPU)
    assert not (tmp_path / "model.safetensors").exists() and not (tmp_path / "model.json").exists()


def test_an_alias_trains_its_registry_model_with_its_own_config(data: Data, tmp_path: Path) -> None:
    """The Huang et al. 2019 profile's runs: multihead under another name, its loss, the joint objective on."""
    config = dataclasses.replace(
        CONFIG,
        models=("huang2019_nodiv",),
        configs={"multihead": {"word_dim": 8, "hidden": 8, "attention_dim": 8, "context_dim": 8}},
        aliases={"huang2019_nodiv": {"model": "multihead", "text_ranking_weight": 0.6, "diversity_weight": 0.0}},
        train=dataclasses.replace(CONFIG.train, epochs=1, weight_decay=1e-6),
    )
    train_model(config, "huang2019_nodiv", ALL, data.captions, data.store, tmp_path, tmp_path, seed=0, runtime=CPU)
    loaded = load_retrieval(tmp_path / "model", device=torch.device("cpu"), expect_model="multihead")
    assert loaded.model.config == config.model_config("huang2019_nodiv")  # type: ignore[attr-defined]
    assert loaded.model.text_ranking_weight() == 0.6 and loaded.extra["loss"] == "max_violation"


def test_beta_without_a_training_type_stops_before_training(data: Data, tmp_path: Path) -> None:
    config = dataclasses.replace(CONFIG, objective=RankingLoss(beta={"fr-mt": 1.0}))
    with pytest.raises(InputError, match=r"gives no weight to the training types \['de-human', 'de-mmt', 'en-human'\]"):
        train_model(config, "san", ALL, data.captions, data.store, tmp_path, tmp_path, seed=0, runtime=CPU)
    assert not (tmp_path / "model.safetensors").exists() and not (tmp_path / "model.json").exists()


def _test_rows(data: Data) -> list[dict[str, Any]]:
    return read_captions(data.captions, split="test", languages=["en", "de", "fr"], kinds=None, human_only=True)


def _reference(loaded: LoadedModel, store: FeatureStore, captions: list[Caption], **options: Any) -> dict[str, Any]:
    encoded = encode_captions(captions, loaded.vocab, store.row_index, max_len=loaded.max_len, source="reference")
    return rounded(evaluate(loaded.model, encoded, store, device=torch.device("cpu"), **options))


def _test_captions(lang: str) -> list[Caption]:
    """The comparable test captions of ``lang``, built from the data description (not from the table)."""
    captions = []
    for index, image_id in enumerate(SPLIT_IDS["test"]):
        en, de = _describe(index)
        if lang == "en":
            captions += [
                Caption(f"{image_id}#en#c0", image_id, "en", en, "human"),
                Caption(f"{image_id}#en#c1", image_id, "en", f"one {en}", "human"),
            ]
        else:
            captions.append(Caption(f"{image_id}#de#c0", image_id, "de", de, "human"))
    return captions


def test_test_model_scores_each_language_of_the_model(loaded: LoadedModel, data: Data) -> None:
    store = FeatureStore.open(data.store)
    metrics = score_test_split(
        loaded, _test_rows(data), store, EvaluationConfig(), ("en", "de"), source="test", runtime=CPU
    )
    assert list(metrics) == ["en", "de"]
    for lang in ("en", "de"):
        assert metrics[lang] == _reference(loaded, store, _test_captions(lang))
    folded = score_test_split(
        loaded,
        _test_rows(data),
        store,
        EvaluationConfig(protocol="folds", fold_images=4),
        ("en",),
        source="t",
        runtime=CPU,
    )
    assert list(folded) == ["en"]
    assert folded["en"]["folds"] == 2
    assert folded["en"] == _reference(loaded, store, _test_captions("en"), fold_images=4)
    both = score_test_split(
        loaded,
        _test_rows(data),
        store,
        EvaluationConfig(protocol="both", fold_images=4),
        ("en", "de"),
        source="t",
        runtime=CPU,
    )
    assert list(both) == ["en", "en-folds", "de", "de-folds"]  # Table 3: COCO 5K and 5-fold 1K from one run
    assert both["en"] == metrics["en"] and both["en-folds"] == folded["en"]
    assert both["de-folds"] == _reference(loaded, store, _test_captions("de"), fold_images=4)


def test_test_model_names_a_missing_language(loaded: LoadedModel, data: Data) -> None:
    rows = [row for row in _test_rows(data) if row["lang"] != "de"]
    with pytest.raises(InputError, match=r"^test split: no 'de' captions"):
        score_test_split(
            loaded,
            rows,
            FeatureStore.open(data.store),
            EvaluationConfig(),
            ("en", "de"),
            source="test split",
            runtime=CPU,
        )


def _recording(translate: Callable[[list[str]], list[str]], calls: list[list[str]]) -> Callable[[list[str]], list[str]]:
    def wrapped(texts: list[str]) -> list[str]:
        calls.append(list(texts))
        return translate(texts)

    return wrapped


def test_translate_search_with_identity_is_the_direct_search(loaded: LoadedModel, data: Data) -> None:
    """Pivot-language queries "translated" unchanged score exactly as the direct test of the pivot."""
    store, rows, calls = FeatureStore.open(data.store), _test_rows(data), []  # type: ignore[var-annotated]
    searched = translate_search(
        loaded,
        rows,
        "en",
        "en",
        store,
        _recording(lambda texts: texts, calls),
        EvaluationConfig(),
        source="test",
        runtime=CPU,
    )
    direct = score_test_split(loaded, rows, store, EvaluationConfig(), ("en",), source="test", runtime=CPU)["en"]
    assert searched == direct
    assert calls == [[caption.text for caption in _test_captions("en")]]


def test_translate_search_uses_the_translations_as_pivot_queries(loaded: LoadedModel, data: Data) -> None:
    """German queries translated into their images' English captions score as those English captions."""
    store, rows = FeatureStore.open(data.store), _test_rows(data)
    to_english = {de: en for en, de in (_describe(index) for index in range(8))}
    searched = translate_search(
        loaded,
        rows,
        "de",
        "en",
        store,
        lambda texts: [to_english[t] for t in texts],
        EvaluationConfig(),
        source="test",
        runtime=CPU,
    )
    as_english = [Caption(c.caption_id, c.image_id, "en", to_english[c.text], "mt") for c in _test_captions("de")]
    assert searched == _reference(loaded, store, as_english)


@pytest.mark.parametrize("blank", ["", "  ", "\t\n"])
def test_empty_translations_still_count_as_queries(loaded: LoadedModel, data: Data, blank: str) -> None:
    """8 images, one query each, every query the same text: each image's 7 other queries tie with its own (ranked
    above it): i2t rank 7 for all; t2i ranks are 0..7 once each (distinct image scores against one query)."""
    store = FeatureStore.open(data.store)
    searched = translate_search(
        loaded,
        _test_rows(data),
        "de",
        "en",
        store,
        lambda texts: [blank] * len(texts),
        EvaluationConfig(),
        source="test",
        runtime=CPU,
    )
    assert searched["i2t"] == {"r1": 0.0, "r5": 0.0, "r10": 100.0, "medr": 8.0, "meanr": 8.0}
    assert searched["t2i"] == {"r1": 12.5, "r5": 62.5, "r10": 100.0, "medr": 4.0, "meanr": 4.5}
    assert searched["rsum"] == 275.0


def test_a_translation_that_loses_sentences_is_an_error(loaded: LoadedModel, data: Data) -> None:
    store = FeatureStore.open(data.store)
    with pytest.raises(ValueError, match=r"^translation to en returned 7 sentences for 8 queries$"):
        translate_search(
            loaded,
            _test_rows(data),
            "de",
            "en",
            store,
            lambda texts: texts[1:],
            EvaluationConfig(),
            source="test",
            runtime=CPU,
        )


def test_run_names_are_every_model_variant_and_role_in_the_settings_order() -> None:
    config = RetrievalConfig(models=("san", "scan"), variants=("none", "mmt_f"), roles=("all", "pivot_only"))
    assert config.run_names() == [
        "san-none-all",
        "san-none-pivot_only",
        "san-mmt_f-all",
        "san-mmt_f-pivot_only",
        "scan-none-all",
        "scan-none-pivot_only",
        "scan-mmt_f-all",
        "scan-mmt_f-pivot_only",
    ]


def test_test_model_and_translate_search_give_the_ranks_their_metrics_come_from(
    loaded: LoadedModel, data: Data
) -> None:
    """Each test set's per-query ranks, under its metrics key, give back its recalls (the fold means too); the
    translated queries keep the ids of the queries they translate."""
    store, rows = FeatureStore.open(data.store), _test_rows(data)
    ranks: dict[str, QueryRanks] = {}
    evaluation = EvaluationConfig(protocol="both", fold_images=4)
    metrics = score_test_split(loaded, rows, store, evaluation, ("en", "de"), source="t", runtime=CPU, ranks=ranks)
    translate_search(
        loaded, rows, "de", "en", store, lambda texts: texts, evaluation, source="t", runtime=CPU, ranks=ranks
    )
    assert list(ranks) == ["en", "en-folds", "de", "de-folds", "translate_search.de"]
    for key in ("en", "en-folds", "de-folds"):
        values = dict(zip(STATISTICS, recalls(ranks[key]), strict=True))
        for direction in ("i2t", "t2i"):
            for k in (1, 5, 10):
                assert values[f"{direction}_r{k}"] == pytest.approx(metrics[key][direction][f"r{k}"], abs=1e-4), key
    assert ranks["en"].caption_ids.tolist() == [caption.caption_id for caption in _test_captions("en")]
    assert ranks["en"].image_ids.tolist() == list(SPLIT_IDS["test"]) and ranks["en"].seeds == 1
    assert ranks["translate_search.de"].same_queries(ranks["de"])
