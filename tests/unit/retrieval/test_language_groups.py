"""MULE's batches: images drawn from the language groups in turn, each with up to n captions per language."""

from __future__ import annotations

import numpy as np
import pytest

from common.checks import SettingError
from retrieval.language_groups import LanguageGroupSampler
from retrieval.train import TrainConfig

EN, DE = 0, 1
# Images 10 and 11 have English and German captions, 20-23 English ones only.
CAPTIONS = [  # (image row, language) of each caption, by index
    (10, EN), (10, EN), (10, EN), (10, DE),
    (11, EN), (11, EN), (11, DE), (11, DE),
    (20, EN), (21, EN), (22, EN), (23, EN),
]  # fmt: skip
IMAGE_ROWS = np.array([row for row, _ in CAPTIONS], dtype=np.int64)
LANGS = np.array([lang for _, lang in CAPTIONS], dtype=np.int64)
BILINGUAL, ENGLISH_ONLY = {10, 11}, {20, 21, 22, 23}


def sampler(batch_size: int = 4, per_language: int = 2, seed: int = 0) -> LanguageGroupSampler:
    return LanguageGroupSampler(IMAGE_ROWS, LANGS, batch_size, per_language, seed)


def blocks(batches: list[np.ndarray]) -> list[tuple[int, list[int]]]:
    """(image, its captions' languages) of each run of one image's captions, in batch order."""
    runs: list[tuple[int, list[int]]] = []
    for batch in batches:
        previous = None
        for index in batch.tolist():
            image = int(IMAGE_ROWS[index])
            if image != previous:
                runs.append((image, []))
            runs[-1][1].append(int(LANGS[index]))
            previous = image
    return runs


def test_an_images_language_group_is_the_set_of_its_captions_languages() -> None:
    assert [group.tolist() for group in sampler().groups()] == [[20, 21, 22, 23], [10, 11]]


def test_groups_take_turns_and_each_image_brings_up_to_n_captions_per_language() -> None:
    batches = sampler().batches(0)
    assert len(batches) == 3  # ceil(12 captions / 4)
    assert all(0 < len(batch) <= 4 for batch in batches)
    runs = blocks(batches)
    groups = ["bilingual" if image in BILINGUAL else "english" for image, _ in runs]
    assert groups == ["english", "bilingual"] * (len(runs) // 2) + ["english"] * (len(runs) % 2)
    expected = {10: [EN, EN, DE], 11: [EN, EN, DE, DE], **{image: [EN] for image in ENGLISH_ONLY}}
    assert all(sorted(langs) == expected[image] for image, langs in runs)
    for batch in batches:  # an image's captions are drawn without replacement
        assert len(set(batch.tolist())) == len(batch)


def test_a_groups_images_are_drawn_without_replacement_until_they_run_out() -> None:
    runs = blocks(sampler(batch_size=12, per_language=1).batches(0))
    english = [image for image, _ in runs if image in ENGLISH_ONLY]
    bilingual = [image for image, _ in runs if image in BILINGUAL]
    assert sorted(english[:4]) == sorted(ENGLISH_ONLY)
    assert sorted(bilingual[:2]) == sorted(BILINGUAL) and len(bilingual) >= 4  # the small group recurs
    assert sorted(bilingual[2:4]) == sorted(BILINGUAL)


def test_one_caption_per_language_and_a_block_larger_than_a_batch_is_cut() -> None:
    runs = blocks(sampler(batch_size=2, per_language=1).batches(0))
    assert all(sorted(langs) == ([EN, DE] if image in BILINGUAL else [EN]) for image, langs in runs)
    cut = blocks(sampler(batch_size=2, per_language=2).batches(0))
    assert all(len(langs) <= 2 for _, langs in cut)


def test_batches_are_seeded_by_seed_and_epoch() -> None:
    first = sampler(seed=3).batches(5)
    assert all(np.array_equal(a, b) for a, b in zip(first, sampler(seed=3).batches(5), strict=True))
    epochs = {tuple(np.concatenate(sampler(seed=3).batches(epoch)).tolist()) for epoch in range(6)}
    assert len(epochs) > 1


def test_the_setting_is_off_by_default_and_range_checked() -> None:
    assert TrainConfig().language_group_batches == 0
    with pytest.raises(SettingError, match=r"^language_group_batches: got 17, allowed: 0 to 16$"):
        TrainConfig(language_group_batches=17)


def test_fit_draws_the_language_group_batches_when_set() -> None:
    """48 toy captions in batches of 12: 4 group batches an epoch against the balanced sampler's 6, so a cap of 5
    steps ends in epoch 2 with the setting and in epoch 1 without it."""
    from tests.unit.retrieval.test_data_train import train_toy

    _, grouped, _, _ = train_toy("mule", epochs=3, max_steps=5, language_group_batches=1)
    _, balanced, _, _ = train_toy("mule", epochs=3, max_steps=5)
    assert [entry["epoch"] for entry in grouped.history] == [1, 2]  # type: ignore[attr-defined]
    assert [entry["epoch"] for entry in balanced.history] == [1]  # type: ignore[attr-defined]
