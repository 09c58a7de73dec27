"""A fit stopped after an epoch (or after its pre-training) and resumed from its state ends with the weights and
history of the uninterrupted fit; a finished state returns at once; a state of another run (its fingerprint: what
the run depends on) is ignored."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from common.runtime import Runtime
from common.train_state import ResumePoint, fingerprint
from retrieval.config import RetrievalConfig
from retrieval.data import Caption, CaptionSet, encode_captions
from retrieval.experiment import training_fingerprint
from retrieval.losses import RankingLoss
from retrieval.model import RetrievalModel
from retrieval.roles import ResolvedRole
from retrieval.train import FitResult, TrainConfig, fit
from retrieval.vocab import Vocabulary
from retrieval.zoo.registry import build_model, make_config
from tests.unit.retrieval.test_data_train import toy_data

EPOCHS = 4


class Killed(Exception):
    """Stands for the kill: raised right after the state it was waiting for is on disk."""


@dataclass(frozen=True)
class KilledAfter(ResumePoint):
    """A resume point whose run is killed once the state after ``epoch`` (0: after the pre-training) is written."""

    epoch: int = 0

    def save(self, state: dict[str, Any]) -> None:
        super().save(state)
        if state["epoch"] == self.epoch:
            raise Killed


def toy_inputs(captions: list[Caption]) -> tuple[Vocabulary, CaptionSet, dict[str, CaptionSet]]:
    vocab = Vocabulary.build(((c.lang, c.text) for c in captions), ["en", "de"], min_count=1)
    encoded = encode_captions(captions, vocab, {f"i{i}": i for i in range(16)}, max_len=20, source="train")
    return vocab, encoded, {"en": encoded.subset(np.flatnonzero(encoded.langs == 0))}


def toy_model(name: str, vocab: Vocabulary, init_seed: int) -> RetrievalModel:
    sizes: dict[str, float] = {"word_dim": 16, "hidden": 16}
    if name == "mule":  # dropout: the same masks; a reversal strength that grows with the step: the same step count
        sizes |= {"mule_dim": 16, "embed_dim": 16, "image_hidden": 16, "pretrain_epochs": 1, "domain_adapt": 0.5}
    if name == "multihead":  # the joint objective: the numpy generator's partner draws go on
        sizes |= {"attention_dim": 16, "context_dim": 16, "text_ranking_weight": 0.6}
    torch.manual_seed(init_seed)
    return build_model(name, make_config(name, sizes), vocab_size=len(vocab), languages=2, region_dim=8)


def train(
    name: str, resume: ResumePoint | None = None, *, init_seed: int = 0, **options: object
) -> tuple[RetrievalModel, FitResult]:
    """Fit model ``name`` on the toy task for :data:`EPOCHS` epochs; ``init_seed`` seeds its initial weights."""
    captions, regions = toy_data()
    vocab, encoded, validation = toy_inputs(captions)
    model = toy_model(name, vocab, init_seed)
    config = TrainConfig(epochs=EPOCHS, batch_size=12, lr=0.01, lr_decay_epoch=2, **options)  # type: ignore[arg-type]
    result = fit(
        model,
        encoded,
        validation,
        regions,
        loss=RankingLoss(model.default_loss),
        type_weights=torch.full((len(encoded.type_names),), 0.5),
        config=config,
        seed=0,
        device=torch.device("cpu"),
        resume=resume,
    )
    return model, result


def timeless(result: FitResult) -> list[dict[str, object]]:
    """The history without its throughput, the one thing that differs between identical runs."""
    return [{key: value for key, value in entry.items() if key != "steps_per_s"} for entry in result.history]


def assert_same_fit(resumed: tuple[RetrievalModel, FitResult], whole: tuple[RetrievalModel, FitResult]) -> None:
    (model, result), (whole_model, whole_result) = resumed, whole
    assert (result.best_epoch, result.best_rsum) == (whole_result.best_epoch, whole_result.best_rsum)
    assert timeless(result) == timeless(whole_result) and len(result.history) == EPOCHS
    expected = whole_model.state_dict()
    for key, value in model.state_dict().items():
        assert torch.equal(value, expected[key]), key


def messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.name == "retrieval.train"]


@pytest.mark.parametrize(
    ("name", "options", "kill_after"),
    [
        ("vsepp", {}, 2),
        ("san", {"c2c_probability": 0.5, "warmup_epochs": 1}, 1),  # the numpy generator's c2c draws go on
        ("mule", {}, 3),  # its pre-training is not redone
        ("multihead", {"weight_decay": 0.01}, 2),  # Huang et al. 2019: partners drawn every step, Adam's L2 penalty
    ],
)
def test_a_fit_stopped_after_an_epoch_resumes_to_the_same_weights_and_history(
    name: str, options: dict[str, Any], kill_after: int, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    whole = train(name, **options)
    point = ResumePoint(tmp_path / "seed-0.state.safetensors", fingerprint(name, options))
    with pytest.raises(Killed):
        train(name, KilledAfter(point.path, point.fingerprint, epoch=kill_after), **options)
    caplog.clear()  # another test may have lowered the logger to INFO already: only the resumed fit's lines count
    with caplog.at_level(logging.INFO, logger="retrieval.train"):
        resumed = train(name, point, init_seed=7, **options)  # fresh weights: what it ends with comes from the state
    assert_same_fit(resumed, whole)
    logged = messages(caplog)
    assert logged[0] == f"retrieval: resuming after epoch {kill_after} of {EPOCHS} from {point.path}"
    epochs = [line.split(" · ")[1] for line in logged[1:]]
    assert epochs == [f"epoch {n}/{EPOCHS}" for n in range(kill_after + 1, EPOCHS + 1)]  # no pre-training line either
    if "c2c_probability" in options:
        assert any(entry["c2c_loss"] is not None for entry in resumed[1].history[kill_after:])


def test_a_fit_stopped_after_its_pre_training_does_not_redo_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    whole = train("mule")
    point = ResumePoint(tmp_path / "seed-0.state.safetensors", fingerprint("mule"))
    with pytest.raises(Killed):
        train("mule", KilledAfter(point.path, point.fingerprint, epoch=0))
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="retrieval.train"):
        resumed = train("mule", point, init_seed=7)
    assert_same_fit(resumed, whole)
    logged = messages(caplog)
    assert logged[0] == f"retrieval: resuming after pre-training of {EPOCHS} from {point.path}"
    assert not any("pre-training ·" in line for line in logged)


def test_a_finished_state_returns_its_result_at_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    point = ResumePoint(tmp_path / "seed-0.state.safetensors", fingerprint("san"))
    whole = train("san", point, patience=1)  # patience may stop it early: the state records where it stopped
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="retrieval.train"):
        again = train("san", point, init_seed=7, patience=1)
    assert (again[1].best_epoch, again[1].history) == (whole[1].best_epoch, whole[1].history)
    for key, value in again[0].state_dict().items():
        assert torch.equal(value, whole[0].state_dict()[key]), key
    stopped = len(whole[1].history)
    assert messages(caplog) == [
        f"retrieval: trained before (stopped after epoch {stopped} of {EPOCHS}); its kept weights and result "
        f"from {point.path}"
    ]


def test_a_state_of_another_run_is_ignored(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "seed-0.state.safetensors"
    with pytest.raises(Killed):
        train("vsepp", KilledAfter(path, fingerprint("vsepp", "lr 0.02"), epoch=2))
    with caplog.at_level(logging.INFO):
        fresh = train("vsepp", ResumePoint(path, fingerprint("vsepp", "lr 0.01")))
    assert len(fresh[1].history) == EPOCHS
    assert_same_fit(fresh, train("vsepp"))
    assert f"{path}: resume state of another configuration or data; starting from epoch 1" in caplog.messages


def test_the_fingerprint_follows_settings_data_and_initial_weights() -> None:
    """Another word in one caption, other initial weights, another seed or schedule: another run. A setting its
    stage does not track (the number of replicates) leaves it as it is."""
    captions, _ = toy_data()
    role = ResolvedRole((("en", None), ("de", None)), ("en",))

    def of(captions: list[Caption], *, init_seed: int = 0, seed: int = 0, config: RetrievalConfig | None = None) -> str:
        vocab, encoded, validation = toy_inputs(captions)
        model = toy_model("san", vocab, init_seed)
        config = config or RetrievalConfig()
        meta = {"extractor": "compact", "num_images": 16}
        return training_fingerprint(
            config, "san", model.config, role, seed, Runtime(), vocab, encoded, validation, meta, model
        )

    reference = of(captions)
    assert of(list(captions)) == reference
    assert of(captions, config=RetrievalConfig(replicates=3)) == reference
    first = captions[0]
    edited = [Caption(first.caption_id, first.image_id, first.lang, "a small blue thing", first.origin), *captions[1:]]
    assert first.text != "a small blue thing" and of(edited) != reference
    assert of(captions, init_seed=1) != reference
    assert of(captions, seed=1) != reference
    assert of(captions, config=RetrievalConfig(train=TrainConfig(epochs=5))) != reference
