"""Pinned numbers of one short, seeded MMT fit (:func:`mmt.train.fit`).

A tiny two-layer :class:`~mmt.model.RegionalMMT` with dropout fine-tunes with region features on three dozen
synthetic pairs built here (the target is the source mapped and reversed, after a word that only the image
tells), for two epochs of length-sorted batches with gradient clipping, validating every five steps and after
the last one, then restoring the best weights from the checkpoint. These numbers pin today's numerics (CPU,
float32, one torch thread as tests/unit/conftest.py sets), so that refactors that must not change behaviour
(batching, the model, the loss, clipping, the optimiser, checkpointing) are checked against them to about 1e-5
relative. A deliberate numerical change updates them: the failure message prints the new values in the form to
paste here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import torch

from mmt.model import MMTConfig, MMTShape, RegionalMMT
from mmt.train import Example, FitResult, TrainConfig, collate, fit, mmt_loss

REL = 1e-5
CPU = torch.device("cpu")

# One entry per validation (steps 5, 10 and, after the last batch, 12): the mean training loss since the
# previous one, and the score (minus the teacher-forced validation cross-entropy).
EXPECTED_LOSSES = [3.3881874561309813, 3.2066454887390137, 2.960444450378418]
EXPECTED_SCORES = [-3.28613543510437, -3.1465163230895996, -3.101984977722168]
EXPECTED_BEST_STEP = 12
# The restored best weights: sum of every parameter, and of their absolute values.
EXPECTED_WEIGHT_SUM = 86.27766595600406
EXPECTED_WEIGHT_ABS_SUM = 3100.7013203984243

SHAPE = MMTShape(src_vocab=24, tgt_vocab=32, region_dim=6, max_len=12)
CONFIG = MMTConfig(emb_dim=12, hidden=16, dropout=0.2, layers=2)
IMAGES, SLOTS = 6, 4


class ArrayRegions:
    """A RegionLookup (FeatureStore.batch's contract) over in-memory arrays."""

    def __init__(self, features: np.ndarray, mask: np.ndarray) -> None:
        self.features, self.mask = features, mask

    def batch(self, rows: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        wanted = np.asarray(rows)
        boxes = np.zeros((len(wanted), SLOTS, 4), dtype=np.float32)
        return self.features[wanted].astype(np.float16), self.mask[wanted], boxes


def toy_data() -> tuple[list[Example], list[Example], ArrayRegions]:
    """36 training and 8 validation pairs over 6 images with 1-4 valid regions."""
    rng = np.random.default_rng(11)
    features = rng.normal(size=(IMAGES, SLOTS, SHAPE.region_dim)).astype(np.float32)
    mask = np.arange(SLOTS)[None, :] < np.array([4, 1, 3, 2, 4, 3])[:, None]

    def pair(row: int) -> Example:
        src = rng.integers(4, SHAPE.src_vocab, size=int(rng.integers(2, 8))).tolist()
        # the first target word names the image; the rest maps and reverses the source
        tgt = [4 + row, *(token + 8 for token in reversed(src)), SHAPE.eos_id]
        return Example(tuple(src), tuple(tgt), image_row=row)

    train = [pair(index % IMAGES) for index in range(36)]
    validation = [pair(index % IMAGES) for index in range(8)]
    return train, validation, ArrayRegions(features, mask)


def no_autocast() -> contextlib.AbstractContextManager[object]:
    return contextlib.nullcontext()


def pinned_fit(checkpoint: Path) -> tuple[FitResult, RegionalMMT]:
    train, validation, regions = toy_data()

    def score(model: RegionalMMT) -> float:
        batch, tgt_in, tgt_out = collate(
            validation, range(len(validation)), regions=regions, shape=model.shape, device=CPU
        )
        return -float(mmt_loss(model, batch, tgt_in, tgt_out))

    torch.manual_seed(0)
    model = RegionalMMT(CONFIG, SHAPE)
    config = TrainConfig(epochs=2, batch_size=6, lr=2e-2, clip=1.0, patience=10, eval_every=5, sort_chunk=2)
    result = fit(
        model,
        train,
        regions=regions,
        evaluate=score,
        config=config,
        seed=5,
        device=CPU,
        autocast=no_autocast,
        checkpoint_path=checkpoint,
    )
    return result, model


def test_pinned_fit_numbers(tmp_path: Path) -> None:
    result, model = pinned_fit(tmp_path / "mmt")
    with torch.no_grad():
        weights = [parameter.double() for parameter in model.parameters()]
        weight_sum = float(sum(weight.sum() for weight in weights))
        weight_abs_sum = float(sum(weight.abs().sum() for weight in weights))
    found = {
        "EXPECTED_LOSSES": [entry["loss"] for entry in result.history],
        "EXPECTED_SCORES": [entry["score"] for entry in result.history],
        "EXPECTED_BEST_STEP": result.best_step,
        "EXPECTED_WEIGHT_SUM": weight_sum,
        "EXPECTED_WEIGHT_ABS_SUM": weight_abs_sum,
    }
    expected = {
        "EXPECTED_LOSSES": pytest.approx(EXPECTED_LOSSES, rel=REL),
        "EXPECTED_SCORES": pytest.approx(EXPECTED_SCORES, rel=REL),
        "EXPECTED_BEST_STEP": EXPECTED_BEST_STEP,
        "EXPECTED_WEIGHT_SUM": pytest.approx(EXPECTED_WEIGHT_SUM, rel=REL),
        "EXPECTED_WEIGHT_ABS_SUM": pytest.approx(EXPECTED_WEIGHT_ABS_SUM, rel=REL),
    }
    assert [entry["step"] for entry in result.history] == [5, 10, 12]
    changed = [name for name in expected if found[name] != expected[name]]
    new_values = "\n".join(f"{name} = {value!r}" for name, value in found.items())
    assert not changed, f"the pinned MMT fit changed ({', '.join(changed)}); if intended, paste:\n{new_values}"
