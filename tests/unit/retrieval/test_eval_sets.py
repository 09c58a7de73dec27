"""Extra evaluation sets: every set of a captions table scored in one call, recalls checked by hand, the protocol
per set, absent languages noted; and a trained tiny model scored on a set equals the direct evaluation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from common.metrics_files import read_metrics
from common.runtime import Runtime
from corpora import tables
from features.store import FeatureStore
from retrieval.checkpoint import LoadedModel, load_retrieval
from retrieval.data import Caption
from retrieval.eval_sets import eval_set_names, score_eval_set, score_eval_sets, set_protocol
from retrieval.evaluation import folded_metrics, rank_metrics
from retrieval.inference import EvaluationConfig
from retrieval.results import rounded
from retrieval.significance import ranks_path, read_ranks
from tasks.retrieval import RetrievalInputs, evaluate_retrieval_model, write_run_ranks
from tests.unit.retrieval.test_experiment import ALL, CONFIG, Data, _reference, _test_captions, _train, _write_data

# Hand-made similarity matrices (images x captions, each image's captions consecutive), keyed by the caption ids.
# Set "a", en: i2t ranks (0, 1): I1's best caption (0.6) has c1 (0.8) above it; t2i ranks (0, 1, 1, 0).
# Set "a", de: i2t ranks (1, 0); t2i ranks (0, 0).
SIMS = {
    ("a0#en#c1", "a0#en#c2", "a1#en#c1", "a1#en#c2"): [[0.9, 0.1, 0.5, 0.2], [0.3, 0.8, 0.4, 0.6]],
    ("a0#de#t", "a1#de#t"): [[0.2, 0.7], [0.1, 0.9]],
    ("b0#en#t", "b1#en#t", "b2#en#t"): [[0.9, 0.1, 0.1], [0.1, 0.9, 0.1], [0.1, 0.1, 0.9]],
}
RECALLS_A_EN = {"i2t": (50.0, 100.0, 100.0), "t2i": (50.0, 100.0, 100.0)}
RECALLS_A_DE = {"i2t": (50.0, 100.0, 100.0), "t2i": (100.0, 100.0, 100.0)}


def _row(caption_id: str, lang: str, kind: str) -> dict[str, Any]:
    image_id = caption_id.partition("#")[0]
    return {
        "caption_id": caption_id,
        "image_id": image_id,
        "lang": lang,
        "text": caption_id,
        "origin": "human",
        "kind": kind,
    }


SET_A = [_row(f"a{i}#en#c{n}", "en", "comparable") for i in (0, 1) for n in (1, 2)]
SET_A += [_row(f"a{i}#{lang}#t", lang, "translation") for i in (0, 1) for lang in ("en", "de")]
SET_B = [_row(f"b{i}#en#t", "en", "translation") for i in range(3)]  # English only


def _hand_scores(calls: list[tuple[str, int | None]]):
    def score(captions: list[Caption], fold_images: int | None) -> dict[str, Any]:
        ids = tuple(caption.caption_id for caption in captions)
        calls.append((captions[0].lang, fold_images))
        images = list(dict.fromkeys(caption.image_id for caption in captions))
        index = torch.tensor([images.index(caption.image_id) for caption in captions])
        sims = torch.tensor(SIMS[ids])
        metrics = rank_metrics(sims, index) if fold_images is None else folded_metrics(sims, index, fold_images)
        return rounded(metrics)

    return score


def _recalls(metrics: dict[str, Any]) -> dict[str, tuple[float, ...]]:
    return {direction: tuple(metrics[direction][f"r{k}"] for k in (1, 5, 10)) for direction in ("i2t", "t2i")}


def test_a_set_is_scored_per_language_on_its_comparable_captions_by_hand() -> None:
    calls: list[tuple[str, int | None]] = []
    metrics = score_eval_set(SET_A, ("en", "de"), EvaluationConfig(), _hand_scores(calls), name="a")
    assert list(metrics) == ["en", "de", "images", "protocol"]  # nothing absent: no "absent" key
    assert _recalls(metrics["en"]) == RECALLS_A_EN  # the comparable captions, not the translation ones
    assert metrics["en"]["rsum"] == 500.0
    assert _recalls(metrics["de"]) == RECALLS_A_DE and metrics["de"]["rsum"] == 550.0
    assert metrics["images"] == 2 and metrics["protocol"] == "full"
    assert calls == [("en", None), ("de", None)]


def test_languages_a_set_lacks_are_noted_not_scored() -> None:
    calls: list[tuple[str, int | None]] = []
    metrics = score_eval_set(SET_B, ("en", "de", "fr"), EvaluationConfig(), _hand_scores(calls), name="b")
    assert metrics["absent"] == ["de", "fr"] and "de" not in metrics
    assert _recalls(metrics["en"]) == {"i2t": (100.0, 100.0, 100.0), "t2i": (100.0, 100.0, 100.0)}
    assert calls == [("en", None)]


@pytest.mark.parametrize(
    ("protocol", "images", "applied"),
    [
        ("full", 1000, "full"),
        ("folds", 5000, "folds"),
        ("both", 5000, "both"),
        ("both", 1071, "full"),
        ("folds", 461, "full"),
    ],
)
def test_the_protocol_applies_where_the_images_divide_into_folds(protocol: Any, images: int, applied: str) -> None:
    assert set_protocol(protocol, 1000, images) == applied


def test_folds_on_a_set_that_divides_and_the_whole_set_on_one_that_does_not() -> None:
    evaluation = EvaluationConfig(protocol="both", fold_images=2)
    calls: list[tuple[str, int | None]] = []
    a = score_eval_set(SET_A, ("en",), evaluation, _hand_scores(calls), name="a")
    assert list(a) == ["en", "en-folds", "images", "protocol"] and a["protocol"] == "both"
    assert a["en-folds"]["folds"] == 1 and _recalls(a["en-folds"]) == RECALLS_A_EN  # one fold: the whole set
    b = score_eval_set(SET_B, ("en",), evaluation, _hand_scores(calls), name="b")  # 3 images: no folds of 2
    assert list(b) == ["en", "images", "protocol"] and b["protocol"] == "full"
    folds_only = score_eval_set(
        SET_A, ("en",), EvaluationConfig(protocol="folds", fold_images=2), _hand_scores(calls), name="a"
    )
    assert folds_only["en"]["folds"] == 1 and folds_only["protocol"] == "folds"
    assert calls == [("en", None), ("en", 2), ("en", None), ("en", 2)]


# --- a trained tiny model on a captions table with evaluation sets --------------------------------------------

CPU = Runtime("cpu")


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Data, LoadedModel, Path]:
    """The tiny data, the model trained on it and its folder."""
    data = _write_data(tmp_path_factory.mktemp("eval-sets-data"))
    with pytest.MonkeyPatch.context() as monkeypatch:
        run = _train(data, tmp_path_factory.mktemp("eval-sets-san"), monkeypatch)
    return data, load_retrieval(run.folder / "model", device=torch.device("cpu"), expect_model="san"), run.folder


def _with_eval_sets(data: Data, path: Path, *, keep_test: bool = False) -> Path:
    """The test split's first four images as the set ``early`` (without German), the last four as ``late``; with
    ``keep_test`` the first four stay the test split."""
    early = {f"s{n}" for n in range(4)}
    rows = []
    for row in pq.read_table(data.captions).to_pylist():
        if row["split"] == "test" and not (keep_test and row["image_id"] in early):
            if row["image_id"] in early and row["lang"] == "de":
                continue
            row["split"] = "eval:early" if row["image_id"] in early else "eval:late"
        rows.append(row)
    columns = {name: [row[name] for row in rows] for name in tables.CAPTIONS_SCHEMA.names}
    tables.write_captions(tables.captions_table(columns), path)
    return path


def test_every_set_of_the_table_is_scored_in_one_call(trained: tuple[Data, LoadedModel, Path], tmp_path: Path) -> None:
    data, loaded, _ = trained
    path = _with_eval_sets(data, tmp_path / "captions.parquet")
    assert eval_set_names(path) == ["early", "late"]
    assert eval_set_names(data.captions) == []  # the default: no sets, nothing scored
    store = FeatureStore.open(data.store)
    metrics = score_eval_sets(loaded, path, store, EvaluationConfig(), ("en", "de"), runtime=CPU)
    assert list(metrics) == ["early", "late"]
    assert metrics["early"]["absent"] == ["de"] and "de" not in metrics["early"]
    assert metrics["early"]["images"] == metrics["late"]["images"] == 4
    english = _test_captions("en")  # two per image, images s0..s7 in order
    assert metrics["early"]["en"] == _reference(loaded, store, english[:8])
    assert metrics["late"]["en"] == _reference(loaded, store, english[8:])
    assert metrics["late"]["de"] == _reference(loaded, store, _test_captions("de")[4:])


def test_the_run_task_writes_the_sets_beside_the_unchanged_test_metrics(
    trained: tuple[Data, LoadedModel, Path], tmp_path: Path
) -> None:
    data, loaded, model_dir = trained
    store = FeatureStore.open(data.store)
    written = {}
    for name, captions in (
        ("plain", data.captions),
        ("sets", _with_eval_sets(data, tmp_path / "c.parquet", keep_test=True)),
    ):
        inputs = RetrievalInputs(str(captions), str(data.store), str(tmp_path / "vectors"), str(tmp_path / "queries"))
        metrics_path = tmp_path / f"{name}.json"
        evaluate_retrieval_model.fn(
            CONFIG,
            ALL,
            inputs,
            run="san-all",
            seed=0,
            model_dir=str(model_dir),
            metrics_path=str(metrics_path),
            languages=("en", "de", "fr"),
            pivot="en",
            runtime=CPU,
        )
        written[name] = read_metrics(metrics_path)
    assert "eval_sets" not in written["plain"] and set(written["plain"]) == {"en", "de", "protocol"}
    sets = written["sets"]
    assert list(sets["eval_sets"]) == ["late"] and sets["eval_sets"]["late"]["images"] == 4
    assert sets["eval_sets"]["late"]["en"] == _reference(loaded, store, _test_captions("en")[8:])
    assert sets["en"] == _reference(loaded, store, _test_captions("en")[:8])  # the test split: s0..s3
    assert sets["protocol"] == "full" and sets["eval_sets"]["late"]["protocol"] == "full"


def test_the_run_task_keeps_each_seeds_ranks_and_the_run_stacks_them(
    trained: tuple[Data, LoadedModel, Path], tmp_path: Path
) -> None:
    """Beside each replicate's metrics its per-query ranks; the run's ranks file holds them a row per seed."""
    data, _, model_dir = trained
    inputs = RetrievalInputs(str(data.captions), str(data.store), str(tmp_path / "vectors"), str(tmp_path / "q"))
    seed_files = []
    for seed in (0, 1):
        metrics_path = tmp_path / f"seed-{seed}" / "test-metrics.json"
        evaluate_retrieval_model.fn(
            CONFIG,
            ALL,
            inputs,
            run="san-all",
            seed=seed,
            model_dir=str(model_dir),
            metrics_path=str(metrics_path),
            languages=("en", "de", "fr"),
            pivot="en",
            runtime=CPU,
        )
        seed_files.append(str(ranks_path(metrics_path)))
    write_run_ranks.fn(seed_files, str(tmp_path / "san-all.ranks.npz"))
    ranks = read_ranks(tmp_path / "san-all.ranks.npz")
    assert list(ranks) == ["en", "de"]
    assert ranks["en"].i2t.shape == (2, 8) and ranks["en"].t2i.shape == (2, 16)  # 8 test images, 2 captions each
    assert np.array_equal(ranks["en"].t2i[0], ranks["en"].t2i[1])  # the same model twice
    assert np.array_equal(ranks["de"].i2t[0], read_ranks(seed_files[0])["de"].i2t[0])
