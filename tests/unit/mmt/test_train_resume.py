"""fit with a resume state: stopped after an epoch (killed, or asked to stop) and run again with a fresh model, it
ends where the uninterrupted fit ends, bit for bit; a finished state returns at once; another run's state is not
resumed."""

from __future__ import annotations

import logging
import threading
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from common.stopping import Cancelled
from common.train_state import ResumePoint, fingerprint
from mmt.model import RegionalMMT
from mmt.pairs import Pairs
from mmt.systems import clear_states, pairs_sha256, state_path, weights_sha256
from mmt.train import Example, FitResult, TrainConfig, fit
from tests.unit.mmt.test_model import random_regions
from tests.unit.mmt.test_train import CONFIG, CPU, SHAPE, ArrayRegions, new_model, no_autocast, toy_pairs

# every generator the run draws from is in play: dropout (torch), batch order and mixed pairs (numpy)
TRAIN = [Example(example.src_ids, example.tgt_ids, image_row=row % 3) for row, example in enumerate(toy_pairs() * 2)]
MIXED = toy_pairs()
CONFIG_RESUMED = TrainConfig(epochs=5, batch_size=3, sort_chunk=2, lr=1e-2, patience=3, mixed_pairs=4)
DROPOUT = replace(CONFIG, dropout=0.3)
EPOCHS_BEFORE_THE_KILL = 2


class Killed(Exception):
    """Stands in for the kill: raised from a validation, after the previous epoch's state was saved."""


def score(model: RegionalMMT) -> float:
    """A validation score that moves up and down with the weights (so early-stopping bookkeeping is exercised)."""
    return float(torch.sin(model.state_dict()["output.weight"].sum() * 100))


def run(
    checkpoint: Path,
    *,
    resume: ResumePoint | None,
    init_seed: int = 0,
    kill_at_epoch: int | None = None,
    evaluate=score,
    stop_after_epoch: int | None = None,
) -> tuple[RegionalMMT, FitResult]:
    features, mask = random_regions([3, 1, 2], max_regions=3, dim=SHAPE.region_dim, seed=1)
    model = new_model(DROPOUT, seed=init_seed)
    stop = threading.Event()  # the stage's stop: set as a stop signal arrives, seen before the next batch

    def on_validation(line) -> None:  # type: ignore[no-untyped-def]
        if line.epoch == kill_at_epoch:
            raise Killed
        if line.epoch == stop_after_epoch:
            stop.set()

    result = fit(
        model,
        TRAIN,
        regions=ArrayRegions(features.numpy(), mask.numpy()),
        evaluate=evaluate,
        config=CONFIG_RESUMED,
        seed=5,
        device=CPU,
        autocast=no_autocast,
        checkpoint_path=checkpoint,
        mixed=MIXED,
        name="toy finetune",
        on_validation=on_validation,
        resume=resume,
        stop=stop,
    )
    return model, result


def assert_same_weights(model: RegionalMMT, reference: RegionalMMT) -> None:
    expected = reference.state_dict()
    assert all(torch.equal(tensor, expected[name]) for name, tensor in model.state_dict().items())


def test_a_fit_stopped_after_an_epoch_resumes_to_the_uninterrupted_weights(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    reference, expected = run(tmp_path / "a" / "best", resume=None)
    assert len(expected.history) == 5  # no early stop within the 5 epochs: every epoch is compared

    point = ResumePoint(tmp_path / "work" / "finetune.state.safetensors", fingerprint("toy"))
    with pytest.raises(Killed):
        run(tmp_path / "b" / "best", resume=point, kill_at_epoch=EPOCHS_BEFORE_THE_KILL + 1)
    saved = point.load()
    assert saved is not None and saved["epoch"] == EPOCHS_BEFORE_THE_KILL and not saved["finished"]

    # a fresh model with other initial weights, and a fresh checkpoint folder: both come from the state
    with caplog.at_level(logging.INFO, logger="mmt.train"):
        model, result = run(tmp_path / "c" / "best", resume=point, init_seed=9)
    assert f"toy finetune: resuming after epoch 2 of 5 from {point.path}" in caplog.messages
    assert_same_weights(model, reference)
    assert result == expected
    for suffix in (".safetensors", ".json"):  # the checkpoint of the best weights: the same bytes
        assert (tmp_path / "c" / f"best{suffix}").read_bytes() == (tmp_path / "a" / f"best{suffix}").read_bytes()
    finished = point.load()
    assert finished is not None and finished["finished"]


def test_a_fit_asked_to_stop_gives_up_before_its_next_batch_and_resumes_from_its_last_epoch(tmp_path: Path) -> None:
    reference, expected = run(tmp_path / "a" / "best", resume=None)
    point = ResumePoint(tmp_path / "work" / "finetune.state.safetensors", fingerprint("toy"))
    with pytest.raises(Cancelled, match=r"^toy finetune epoch 4: given up, the process is stopping$"):
        run(tmp_path / "b" / "best", resume=point, stop_after_epoch=3)
    saved = point.load()
    assert saved is not None and saved["epoch"] == 3 and not saved["finished"]  # epoch 4 was not trained
    model, result = run(tmp_path / "c" / "best", resume=point, init_seed=9)
    assert_same_weights(model, reference)
    assert result == expected


def test_a_finished_state_returns_its_result_without_training(tmp_path: Path) -> None:
    point = ResumePoint(tmp_path / "work" / "finetune.state.safetensors", fingerprint("toy"))
    reference, expected = run(tmp_path / "a" / "best", resume=point)
    after_reference = torch.rand(3)  # the global generator as the fit left it

    def never(model: RegionalMMT) -> float:
        raise AssertionError("a finished fit must not validate again")

    torch.manual_seed(123)
    model, result = run(tmp_path / "b" / "best", resume=point, init_seed=9, evaluate=never)
    assert torch.equal(torch.rand(3), after_reference)  # what follows the fit draws what it would have drawn
    assert_same_weights(model, reference)
    assert result == expected
    assert (tmp_path / "b" / "best.safetensors").read_bytes() == (tmp_path / "a" / "best.safetensors").read_bytes()


def test_a_state_of_another_fingerprint_is_not_resumed(tmp_path: Path) -> None:
    reference, expected = run(tmp_path / "a" / "best", resume=None)
    path = tmp_path / "work" / "finetune.state.safetensors"
    with pytest.raises(Killed):
        run(tmp_path / "b" / "best", resume=ResumePoint(path, fingerprint("other data")), kill_at_epoch=3)
    validations: list[float] = []

    def counted(model: RegionalMMT) -> float:
        validations.append(score(model))
        return validations[-1]

    model, result = run(tmp_path / "c" / "best", resume=ResumePoint(path, fingerprint("toy")), evaluate=counted)
    assert len(validations) == 5  # trained from epoch 1
    assert_same_weights(model, reference)
    assert result == expected


def test_the_data_hash_changes_with_any_sentence_image_or_column() -> None:
    base = Pairs(["a b", "c"], ["x y", "z"], ["img1", "img2"])
    others = [
        Pairs(["a b", "c"], ["x y", "z!"], ["img1", "img2"]),  # one target
        Pairs(["a", "b c"], ["x y", "z"], ["img1", "img2"]),  # a word moved between sentences
        Pairs(["x y", "z"], ["a b", "c"], ["img1", "img2"]),  # the columns swapped
        Pairs(["a b", "c"], ["x y", "z"], ["img2", "img1"]),  # the images swapped
        Pairs(["a b", "c"], ["x y", "z"]),  # no images
    ]
    hashes = {pairs_sha256(pairs) for pairs in [base, *others]}
    assert len(hashes) == 6 and pairs_sha256(Pairs(["a b", "c"], ["x y", "z"], ["img1", "img2"])) in hashes
    assert weights_sha256(new_model(seed=0)) == weights_sha256(new_model(seed=0)) != weights_sha256(new_model(seed=1))


def test_states_are_named_after_the_system_folder_and_cleared_with_it(tmp_path: Path) -> None:
    work = tmp_path / "work"
    path = state_path(work, tmp_path / ".staged.x.tmp" / "mmt-en-de" / "finetune")
    assert path == work / "mmt-en-de" / "finetune.state.safetensors"
    for name in (
        "mmt-en-de/pretrain.state.safetensors",
        "mmt-en-de/finetune.pt",
        "mmt-en-fr/finetune.state.safetensors",
    ):
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_bytes(b"state")
    clear_states(work, ["mmt-en-de", "mt-en-de"])  # mt-en-de has none: nothing to do
    assert sorted(str(p.relative_to(work)) for p in work.rglob("*")) == [
        "mmt-en-fr",
        "mmt-en-fr/finetune.state.safetensors",
    ]
