"""The conventions every paired bootstrap of the project shares, and the two numbers drawn from its resamples.

The translation side tests BLEU with sacreBLEU's paired bootstrap (:func:`mmt.metrics.paired_bootstrap`): 1000
resamples, sacreBLEU's fixed seed 12345, significant at p < 0.05. The retrieval side
(:mod:`retrieval.significance`) resamples test images with the same numbers. The p-value counts the resamples
whose difference, centred on the resamples' mean (the null hypothesis of no difference), is at least as far from
zero as the observed one, plus one on both sides of the fraction: identical systems get p = 1, a system better by
the same margin in every resample p = 1 / (samples + 1), the smallest p a test of ``samples`` resamples can give.
(sacreBLEU's own p, on the translation side, centres the resamples' absolute differences and counts only those
strictly beyond the observed one, which gives identical systems that smallest p instead.)
"""

from __future__ import annotations

import functools

import numpy as np

SAMPLES = 1000  # resamples of a paired bootstrap
SEED = 12345  # sacreBLEU's default SACREBLEU_SEED: the same resamples on every run
ALPHA = 0.05  # the significance level


@functools.lru_cache(maxsize=8)
def resample_counts(items: int, *, samples: int = SAMPLES, seed: int = SEED) -> np.ndarray:
    """(samples, items): how often each item is drawn in each resample of ``items`` draws with replacement; the same
    (read-only) array for the same arguments, so the tests of one report share their resamples.

    Raises:
        ValueError: no items or no resamples.
    """
    if items < 1 or samples < 1:
        raise ValueError(f"a bootstrap needs items and resamples, got {items} items and {samples} resamples")
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, items, size=(samples, items))
    rows = np.arange(samples)[:, None] * items  # one bincount for all: resample r counts in [r*items, (r+1)*items)
    counts = np.bincount((draws + rows).ravel(), minlength=samples * items).reshape(samples, items)
    counts = counts.astype(np.float64)
    counts.flags.writeable = False
    return counts


def two_sided_p(resampled: np.ndarray, observed: np.ndarray) -> np.ndarray:
    """The p-value of each column of ``resampled`` (samples, statistics) differences against ``observed``
    (statistics,): the share of resamples (plus one, of samples plus one) whose centred difference is at least
    as large in size as the observed one."""
    centred = np.abs(resampled - resampled.mean(axis=0))
    # a tolerance for the float noise of a mean: a constant column's centred values are zero, not 1e-15
    extreme = centred >= np.abs(observed) - 1e-9
    return (extreme.sum(axis=0) + 1) / (len(resampled) + 1)


def half_width(resampled: np.ndarray) -> np.ndarray:
    """Half the width of each column's 95% percentile interval (sacreBLEU's ``ci``: the 2.5th to the 97.5th)."""
    ordered = np.sort(resampled, axis=0)
    lower = len(ordered) // 40
    return 0.5 * (ordered[len(ordered) - lower - 1] - ordered[lower])
