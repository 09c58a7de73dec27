"""Pinned numbers of one short, seeded retrieval fit (:func:`retrieval.train.fit`).

A tiny SAN trains for four epochs on a synthetic caption/region set built here: one warm-up epoch with the
sum of hinges, then the ``harder`` loss over three language types (batches mix human captions and machine
translations), caption-caption (c2c) steps drawn at random, a learning-rate decay, validation in two
languages and the best epoch kept. These numbers pin today's numerics (CPU, float32, one torch thread as
tests/unit/conftest.py sets), so that refactors that must not change behaviour (the trainer, the sampler, the
losses, the evaluation, SAN and its encoders) are checked against them to about 1e-4 relative. A deliberate
numerical change updates them: the failure message prints the new values in the form to paste here.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
import torch

from retrieval.data import Caption, CaptionSet, encode_captions
from retrieval.losses import RankingLoss
from retrieval.train import FitResult, TrainConfig, fit
from retrieval.vocab import Vocabulary
from retrieval.zoo.registry import build_model, make_config

REL = 1e-4

# Mean training loss per epoch: the first epoch is the warm-up (sum of hinges over every negative, hence larger),
# then the harder-negative loss; ranking steps and caption-caption (c2c) steps are averaged apart.
EXPECTED_LOSSES = [20.251480484008788, 3.789665778477987, 3.6932261288166046, 3.5440266609191893]
EXPECTED_C2C_LOSSES = [3.2476183772087097, 3.2206108570098877, 3.186298370361328, 3.1779226660728455]
# Validation rsum summed over en and de (12 images: recalls move in steps of 100/12 or 100/24).
EXPECTED_VAL_RSUMS = [758.3333333333334, 795.8333333333334, 841.6666666666666, 879.1666666666666]
EXPECTED_BEST_EPOCH = 4  # the 4th of 4 epochs (counted from 1)
EXPECTED_BEST_RSUM = 879.1666666666666

SHAPES = ["circle", "square", "star"]
COLOURS = ["red", "blue", "green", "white"]
FORMEN = ["kreis", "quadrat", "stern"]
FARBEN = ["rot", "blau", "grün", "weiß"]
IMAGES = 12
SLOTS, DIM = 3, 10


class ArrayRegions:
    """A RegionLookup (FeatureStore.batch's contract) over in-memory arrays."""

    def __init__(self, features: np.ndarray, valid: np.ndarray) -> None:
        self.features, self.valid = features, valid

    def batch(self, rows: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        wanted = np.asarray(rows)
        boxes = np.zeros((len(wanted), SLOTS, 4), dtype=np.float32)
        return self.features[wanted].astype(np.float16), self.valid[wanted], boxes


def toy_set() -> tuple[list[Caption], ArrayRegions]:
    """Image i shows shape i % 3 in colour i % 4 (one-hot features in slots 0 and 1, noise elsewhere); two
    English and one German human caption and one German machine translation per image."""
    rng = np.random.default_rng(7)
    features = rng.normal(scale=0.2, size=(IMAGES, SLOTS, DIM)).astype(np.float32)
    valid = np.ones((IMAGES, SLOTS), dtype=bool)
    valid[1::4, 2] = False  # some images have only two regions
    captions = []
    for i in range(IMAGES):
        shape, colour = i % 3, i % 4
        features[i, 0, shape] += 1.0
        features[i, 1, 3 + colour] += 1.0
        english = [f"a {COLOURS[colour]} {SHAPES[shape]}", f"the {SHAPES[shape]} is {COLOURS[colour]}"]
        captions += [Caption(f"i{i}#en#{n}", f"i{i}", "en", text, "human") for n, text in enumerate(english)]
        captions.append(Caption(f"i{i}#de#0", f"i{i}", "de", f"ein {FARBEN[colour]}er {FORMEN[shape]}", "human"))
        captions.append(Caption(f"i{i}#de#mt", f"i{i}", "de", f"der {FORMEN[shape]} ist {FARBEN[colour]}", "mt"))
    return captions, ArrayRegions(features, valid)


def pinned_fit() -> FitResult:
    captions, regions = toy_set()
    vocab = Vocabulary.build(((c.lang, c.text) for c in captions), ["en", "de"], min_count=1)
    encoded = encode_captions(captions, vocab, {f"i{i}": i for i in range(IMAGES)}, max_len=12, source="toy")
    human = ~encoded.synthetic
    validation: dict[str, CaptionSet] = {
        lang: encoded.subset(np.flatnonzero(human & (encoded.langs == index)))
        for index, lang in enumerate(vocab.languages)
    }
    torch.manual_seed(0)
    config = make_config("san", {"word_dim": 8, "hidden": 12})
    model = build_model("san", config, vocab_size=len(vocab), languages=2, region_dim=DIM)
    assert encoded.type_names == ("de-human", "de-mt", "en-human")  # the order of type_weights below
    train_config = TrainConfig(epochs=4, batch_size=8, lr=0.01, lr_decay_epoch=2, warmup_epochs=1, c2c_probability=0.3)
    return fit(
        model,
        encoded,
        validation,
        regions,
        loss=RankingLoss("harder"),
        type_weights=torch.tensor([0.25, 0.25, 0.5]),
        config=train_config,
        seed=3,
        device=torch.device("cpu"),
    )


def test_pinned_fit_numbers() -> None:
    result = pinned_fit()
    history = {key: [entry[key] for entry in result.history] for key in ("loss", "c2c_loss", "val_rsum")}
    found = {
        "EXPECTED_LOSSES": history["loss"],
        "EXPECTED_C2C_LOSSES": history["c2c_loss"],
        "EXPECTED_VAL_RSUMS": history["val_rsum"],
        "EXPECTED_BEST_EPOCH": result.best_epoch,
        "EXPECTED_BEST_RSUM": result.best_rsum,
    }
    expected = {
        "EXPECTED_LOSSES": pytest.approx(EXPECTED_LOSSES, rel=REL),
        "EXPECTED_C2C_LOSSES": pytest.approx(EXPECTED_C2C_LOSSES, rel=REL),
        "EXPECTED_VAL_RSUMS": pytest.approx(EXPECTED_VAL_RSUMS, rel=REL),
        "EXPECTED_BEST_EPOCH": EXPECTED_BEST_EPOCH,
        "EXPECTED_BEST_RSUM": pytest.approx(EXPECTED_BEST_RSUM, rel=REL),
    }
    changed = [name for name in expected if found[name] != expected[name]]
    new_values = "\n".join(f"{name} = {value!r}" for name, value in found.items())
    assert not changed, f"the pinned retrieval fit changed ({', '.join(changed)}); if intended, paste:\n{new_values}"
