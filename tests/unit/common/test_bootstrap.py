"""The bootstrap's shared pieces: resamples that are the same on every run, the p-value and the interval on
hand-computed cases."""

from __future__ import annotations

import numpy as np
import pytest

from common.bootstrap import half_width, resample_counts, two_sided_p


def test_resamples_draw_every_item_count_and_repeat_for_a_seed() -> None:
    counts = resample_counts(7, samples=50, seed=3)
    assert counts.shape == (50, 7) and (counts.sum(axis=1) == 7).all()
    assert np.array_equal(counts, resample_counts(7, samples=50, seed=3))
    assert not np.array_equal(counts, resample_counts(7, samples=50, seed=4))
    with pytest.raises(ValueError, match="got 0 items and 50 resamples"):
        resample_counts(0, samples=50)


def test_p_counts_centred_resamples_as_extreme_as_the_observed_difference() -> None:
    # differences -1, 0, 1, 2: mean 0.5, centred sizes 1.5, 0.5, 0.5, 1.5; observed 1 -> 2 as extreme: (2 + 1) / 5
    resampled = np.array([[-1.0], [0.0], [1.0], [2.0]])
    assert two_sided_p(resampled, np.array([1.0])) == pytest.approx([0.6])
    assert two_sided_p(resampled, np.array([-1.0])) == pytest.approx([0.6])  # two-sided
    assert two_sided_p(resampled, np.array([2.0])) == pytest.approx([0.2])  # none as extreme: 1 / 5
    assert two_sided_p(np.zeros((4, 1)), np.zeros(1)) == pytest.approx([1.0])  # no difference at all


def test_the_interval_is_sacrebleus_percentile_half_width() -> None:
    resampled = np.arange(40.0)[:, None]  # 2.5th percentile: index 1, 97.5th: index 38
    assert half_width(resampled) == pytest.approx([18.5])


def test_the_counts_are_those_of_the_draws() -> None:
    draws = np.random.default_rng(5).integers(0, 6, size=(4, 6))
    expected = np.stack([np.bincount(row, minlength=6) for row in draws])
    assert np.array_equal(resample_counts(6, samples=4, seed=5), expected)
