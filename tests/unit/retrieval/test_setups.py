"""Kádár et al.'s training setups: the captions each keeps (counted), one-language batches, and their settings."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from common.checks import SettingError
from common.config import build
from common.errors import InputError
from retrieval.config import RetrievalConfig
from retrieval.data import encode_captions
from retrieval.experiment import training_rows
from retrieval.losses import RankingLoss
from retrieval.roles import LanguageRole
from retrieval.setups import OneLanguageSampler, TrainingSetup, select_training_rows
from retrieval.train import TrainConfig, fit
from retrieval.vocab import Vocabulary
from retrieval.zoo.registry import build_model, make_config
from tests.unit.retrieval.test_data_train import toy_data
from tests.unit.retrieval.test_experiment import Data, _write_data

IMAGES = 10
PER_LANGUAGE = 5  # comparable captions per image and language, as Multi30K task 2


def comparable_rows() -> list[dict[str, Any]]:
    return [
        {"caption_id": f"i{image}#{lang}#{n}", "image_id": f"i{image}", "lang": lang}
        for image in range(IMAGES)
        for lang in ("en", "de")
        for n in range(PER_LANGUAGE)
    ]


def images_of(rows: list[dict[str, Any]], lang: str) -> set[str]:
    return {row["image_id"] for row in rows if row["lang"] == lang}


def test_the_default_setup_keeps_every_caption_in_order() -> None:
    rows = comparable_rows()
    assert not TrainingSetup().selects
    assert select_training_rows(rows, TrainingSetup(), ("en", "de")) == rows


def test_disjoint_images_give_each_language_its_own_half() -> None:
    rows = comparable_rows()
    kept = select_training_rows(rows, TrainingSetup(disjoint=True), ("en", "de"))
    english, german = images_of(kept, "en"), images_of(kept, "de")
    assert not english & german, "no image has captions of two languages"
    assert english | german == images_of(rows, "en") and len(english) == len(german) == IMAGES // 2
    assert Counter(row["lang"] for row in kept) == {"en": 25, "de": 25}  # all captions of each kept image
    assert kept == [row for row in rows if row in kept], "the rows keep their order"


def test_disjoint_split_is_seeded_and_independent_of_the_row_order() -> None:
    rows = comparable_rows()
    setup = TrainingSetup(disjoint=True)
    first = select_training_rows(rows, setup, ("en", "de"))
    shuffled = random.Random(1).sample(rows, len(rows))
    again = select_training_rows(shuffled, setup, ("en", "de"))
    assert sorted(row["caption_id"] for row in again) == sorted(row["caption_id"] for row in first)
    other = select_training_rows(rows, TrainingSetup(disjoint=True, seed=1), ("en", "de"))
    assert images_of(other, "en") != images_of(first, "en")
    # the role's language order decides who gets the first share
    swapped = select_training_rows(rows, setup, ("de", "en"))
    assert images_of(swapped, "de") == images_of(first, "en")


def test_half_of_the_images_keeps_both_languages_on_each() -> None:
    kept = select_training_rows(comparable_rows(), TrainingSetup(images=0.5), ("en", "de"))
    assert images_of(kept, "en") == images_of(kept, "de") and len(images_of(kept, "en")) == 5
    assert len(kept) == 5 * 2 * PER_LANGUAGE
    quarter = select_training_rows(comparable_rows(), TrainingSetup(images=0.5, disjoint=True), ("en", "de"))
    assert images_of(quarter, "en") | images_of(quarter, "de") == images_of(kept, "en")
    assert (len(images_of(quarter, "en")), len(images_of(quarter, "de"))) == (3, 2)


def test_one_caption_per_image_and_language() -> None:
    kept = select_training_rows(comparable_rows(), TrainingSetup(captions_per_image=1), ("en", "de"))
    assert Counter((row["image_id"], row["lang"]) for row in kept) == {
        (f"i{image}", lang): 1 for image in range(IMAGES) for lang in ("en", "de")
    }
    again = select_training_rows(comparable_rows(), TrainingSetup(captions_per_image=1), ("en", "de"))
    assert again == kept
    numbers = Counter(row["caption_id"][-1] for row in kept)
    assert len(numbers) > 1, "a random caption of each image, not always the first"


def test_a_low_resource_language_keeps_its_share_of_captions() -> None:
    kept = select_training_rows(comparable_rows(), TrainingSetup(low_resource={"de": 0.2}), ("en", "de"))
    assert Counter(row["lang"] for row in kept) == {"en": 50, "de": 10}
    assert select_training_rows(comparable_rows(), TrainingSetup(low_resource={"de": 0.2}), ("en", "de")) == kept
    tiny = select_training_rows(comparable_rows(), TrainingSetup(low_resource={"de": 0.001}), ("en", "de"))
    assert Counter(row["lang"] for row in tiny)["de"] == 1, "at least one caption stays"


def test_a_setup_describes_what_it_changes() -> None:
    assert TrainingSetup().describe() == ""
    setup = TrainingSetup(kinds=("translation",), images=0.5, low_resource={"de": 0.1}, c2c_probability=0.5)
    assert setup.describe() == "kinds translation, images 0.5, low_resource de 0.1, c2c_probability 0.5"


def test_disjoint_needs_an_image_per_language() -> None:
    rows = [row for row in comparable_rows() if row["image_id"] == "i0"]
    with pytest.raises(InputError, match=r"^1 training images cannot be split among 2 languages$"):
        select_training_rows(rows, TrainingSetup(disjoint=True), ("en", "de"))


def test_one_language_batches() -> None:
    langs = np.array([0] * 30 + [1] * 10)
    sampler = OneLanguageSampler(langs, batch_size=4, seed=3)
    batches = sampler.batches(0)
    assert len(batches) == 8 + 3, "as many steps as one pass over each language"
    assert all(len(set(langs[batch])) == 1 for batch in batches), "every batch holds one language"
    assert {int(langs[batch[0]]) for batch in batches} == {0, 1}
    # each language's stream is a shuffle of its captions: none repeats before all of them were drawn
    german = np.concatenate([batch for batch in batches if langs[batch[0]] == 1])
    assert sorted(german[:10]) == list(range(30, 40))
    assert [b.tolist() for b in sampler.batches(0)] == [b.tolist() for b in batches]
    assert [b.tolist() for b in sampler.batches(1)] != [b.tolist() for b in batches]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"images": 0.0}, r"^images: got 0\.0, allowed: 0 < images <= 1$"),
        ({"kinds": ["comparable", "captions"]}, r"^kinds\[1\]: got 'captions', allowed: comparable, translation$"),
        ({"low_resource": {"german": 0.5}}, r"^low_resource\.german: got 'german', allowed: an ISO 639-1 code$"),
        ({"low_resource": {"de": 1.5}}, r"^low_resource\.de: got 1\.5, allowed: 0 < share <= 1$"),
        ({"captions_per_image": -1}, r"^captions_per_image: got -1, allowed: 0 to 1000$"),
        ({"disjoint": True, "c2c_probability": 0.5}, r"^c2c_probability: caption-caption steps need captions of one"),
        ({"batches": "per_image"}, r"^batches: got 'per_image', allowed: mixed, one_language$"),
    ],
)
def test_bad_setups_name_their_key(values: dict[str, Any], message: str) -> None:
    with pytest.raises(SettingError, match=message):
        build(TrainingSetup, values)


def test_a_role_of_ones_own_carries_a_setup_checked_against_the_languages() -> None:
    role = build(LanguageRole, {"train": ["en", "de"], "test": ["en"], "setup": {"disjoint": True}})
    config = RetrievalConfig(languages=("en", "de"), roles=("split",), custom_roles={"split": role})
    assert config.role("split", "en").setup == TrainingSetup(disjoint=True)
    assert config.role("all", "en").setup == TrainingSetup()
    low = LanguageRole(("en", "de"), ("de",), TrainingSetup(low_resource={"fr": 0.1}))
    with pytest.raises(SettingError, match=r"^custom_roles\.low\.setup\.low_resource\.fr: 'fr' is not one of"):
        RetrievalConfig(languages=("en", "de"), custom_roles={"low": low})
    with pytest.raises(SettingError, match=r"^custom_roles\.split\.setup\.disjoint: disjoint images have no caption"):
        RetrievalConfig(languages=("en", "de"), custom_roles={"split": role}, train=TrainConfig(c2c_probability=0.5))
    # the role's own c2c probability replaces the train section's
    off = LanguageRole(("en", "de"), ("en",), TrainingSetup(disjoint=True, c2c_probability=0.0))
    RetrievalConfig(languages=("en", "de"), custom_roles={"split": off}, train=TrainConfig(c2c_probability=0.5))


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Data:
    return _write_data(tmp_path_factory.mktemp("setup-data"))


def test_training_rows_apply_the_role_kinds_and_selection(data: Data) -> None:
    """The toy table: per train image two en comparable captions, one de comparable, one en translation, one de mmt."""
    languages = ("en", "de")

    def rows(setup: TrainingSetup) -> list[dict[str, Any]]:
        role = LanguageRole(("en:human", "de:human"), ("en",), setup)
        config = RetrievalConfig(languages=languages, roles=("own",), custom_roles={"own": role})
        return training_rows(config, config.role("own", "en"), Path(data.captions))

    default = rows(TrainingSetup())
    assert Counter((row["lang"], row["kind"]) for row in default) == {
        ("en", "comparable"): 24,
        ("de", "comparable"): 12,
    }
    translation = rows(TrainingSetup(kinds=("translation",)))
    assert Counter((row["lang"], row["kind"]) for row in translation) == {("en", "translation"): 12}
    one_each = rows(TrainingSetup(captions_per_image=1))
    assert Counter(row["lang"] for row in one_each) == {"en": 12, "de": 12}
    disjoint = rows(TrainingSetup(disjoint=True))
    assert not images_of(disjoint, "en") & images_of(disjoint, "de")
    assert Counter(row["lang"] for row in disjoint) == {"en": 12, "de": 6}


def test_fit_draws_its_ranking_batches_from_the_given_sampler() -> None:
    captions, regions = toy_data(images=8)
    vocab = Vocabulary.build(((c.lang, c.text) for c in captions), ["en", "de"], min_count=1)
    train = encode_captions(captions, vocab, {f"i{i}": i for i in range(8)}, max_len=20, source="train")
    one_language = OneLanguageSampler(train.langs, batch_size=4, seed=0)
    asked: list[int] = []

    class Recording:
        def batches(self, epoch: int) -> list[np.ndarray]:
            asked.append(epoch)
            return one_language.batches(epoch)

    torch.manual_seed(0)
    model = build_model(
        "vsepp", make_config("vsepp", {"word_dim": 8, "hidden": 8}), vocab_size=len(vocab), languages=2, region_dim=8
    )
    fit(
        model,
        train,
        {"en": train.subset(np.flatnonzero(train.langs == 0))},
        regions,
        loss=RankingLoss("max_violation"),
        type_weights=torch.full((len(train.type_names),), 0.5),
        config=TrainConfig(epochs=2, batch_size=4, lr=0.01),
        seed=0,
        device=torch.device("cpu"),
        sampler=Recording(),
    )
    assert asked == [0, 0, 1], "the step count from epoch 0's batches, then each epoch's own"
