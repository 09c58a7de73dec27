"""Does one retrieval run beat another on the same test queries? A paired bootstrap over the test images.

A run's test stage keeps each query's rank (:class:`QueryRanks`, one row per seed): for each image its i2t rank
(of its best caption), for each caption its t2i rank (of its image); :func:`write_ranks` puts them beside the run's
metrics file as ``<run>.ranks.npz``. :func:`paired_test` compares two runs on the same queries: a query's hit at K
(rank < K) is first averaged over the seeds of its run, then the test images are resampled with replacement, each
drawn image bringing its own image query and its caption queries, so that every resample is a test set of the
same shape whose R@K both ways and rsum are computed as the metrics compute them. The conventions (resamples, seed,
p-value, alpha) are those of the translation side's paired bootstrap (:mod:`common.bootstrap`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from common.bootstrap import SAMPLES, SEED, half_width, resample_counts, two_sided_p
from common.errors import InputError
from common.files import atomic_path

KS = (1, 5, 10)
STATISTICS = (*(f"{d}_r{k}" for d in ("i2t", "t2i") for k in KS), "rsum")  # what a test compares, in this order
RANKS_SUFFIX = ".ranks.npz"
_FIELDS = ("caption_ids", "image_ids", "caption_image", "i2t", "t2i")


@dataclass(frozen=True)
class QueryRanks:
    """The per-query ranks of one test set (0-based, as :mod:`retrieval.evaluation` counts them).

    Attributes:
        caption_ids: (n_txt,) each caption query's id.
        image_ids: (n_img,) each image query's id.
        caption_image: (n_txt,) the index in ``image_ids`` of each caption's image.
        i2t: (seeds, n_img) the i2t rank of each image, a row per seed.
        t2i: (seeds, n_txt) the t2i rank of each caption, a row per seed.
    """

    caption_ids: np.ndarray
    image_ids: np.ndarray
    caption_image: np.ndarray
    i2t: np.ndarray
    t2i: np.ndarray

    @staticmethod
    def of_seed(
        caption_ids: Sequence[str],
        caption_image_ids: Sequence[str],
        caption_image: np.ndarray,
        i2t: np.ndarray,
        t2i: np.ndarray,
    ) -> QueryRanks:
        """One seed's ranks; ``caption_image_ids`` the image id of each caption (an image's id is its first
        caption's)."""
        image_ids = np.empty(len(i2t), dtype=object)
        for caption in range(len(caption_image) - 1, -1, -1):  # backwards: the first caption of an image wins
            image_ids[caption_image[caption]] = caption_image_ids[caption]
        return QueryRanks(
            np.asarray(caption_ids, dtype=str),
            image_ids.astype(str),
            np.asarray(caption_image, dtype=np.int64),
            np.asarray(i2t, dtype=np.int64)[None],
            np.asarray(t2i, dtype=np.int64)[None],
        )

    @property
    def seeds(self) -> int:
        return int(self.i2t.shape[0])

    def same_queries(self, other: QueryRanks) -> bool:
        return (
            np.array_equal(self.caption_ids, other.caption_ids)
            and np.array_equal(self.image_ids, other.image_ids)
            and np.array_equal(self.caption_image, other.caption_image)
        )

    def hits(self) -> tuple[np.ndarray, np.ndarray]:
        """(n_img, 3) and (n_txt, 3): each image's and each caption's hit at 1, 5 and 10, averaged over the seeds."""
        ks = np.asarray(KS)
        return (self.i2t[:, :, None] < ks).mean(axis=0), (self.t2i[:, :, None] < ks).mean(axis=0)


def stack_seeds(per_seed: Sequence[QueryRanks]) -> QueryRanks:
    """The ranks of a run's seeds as one :class:`QueryRanks` (a row per seed, in the order given).

    Raises:
        ValueError: no seeds, or seeds ranked on different queries.
    """
    if not per_seed:
        raise ValueError("no seeds' ranks to stack")
    first = per_seed[0]
    if any(not first.same_queries(ranks) for ranks in per_seed[1:]):
        raise ValueError("the seeds' ranks are of different test queries")
    return QueryRanks(
        first.caption_ids,
        first.image_ids,
        first.caption_image,
        np.concatenate([ranks.i2t for ranks in per_seed]),
        np.concatenate([ranks.t2i for ranks in per_seed]),
    )


def ranks_path(metrics_path: str | os.PathLike[str]) -> Path:
    """``<folder>/<run>.ranks.npz`` beside ``<folder>/<run>.json``."""
    path = Path(metrics_path)
    return path.with_name(path.name.removesuffix(".json") + RANKS_SUFFIX)


def write_ranks(path: str | os.PathLike[str], ranks: Mapping[str, QueryRanks]) -> None:
    """Every test set's ranks (key: its metrics key, ``en``, ``en-folds``, ``translate_search.de``) -> one ``.npz``
    (compressed, no pickled objects), written atomically."""
    arrays = {f"{key}/{name}": getattr(test, name) for key, test in ranks.items() for name in _FIELDS}
    with atomic_path(path) as staged, open(staged, "wb") as file:  # a file object: savez would add .npz to a path
        np.savez_compressed(file, **arrays)


def read_ranks(path: str | os.PathLike[str]) -> dict[str, QueryRanks]:
    """The test sets' ranks :func:`write_ranks` wrote.

    Raises:
        InputError: not a ranks file, or a test set without all of its arrays.
    """
    try:
        with np.load(path, allow_pickle=False) as archive:
            arrays = {name: archive[name] for name in archive.files}
    except (OSError, ValueError) as error:
        raise InputError(f"{path}: not a ranks file ({error})") from None
    keys = dict.fromkeys(name.rpartition("/")[0] for name in arrays)
    ranks = {}
    for key in keys:
        missing = [name for name in _FIELDS if f"{key}/{name}" not in arrays]
        if missing:
            raise InputError(f"{path}: test set {key!r} has no {', '.join(missing)}")
        ranks[key] = QueryRanks(*(arrays[f"{key}/{name}"] for name in _FIELDS))
    return ranks


def recalls(ranks: QueryRanks, counts: np.ndarray | None = None) -> np.ndarray:
    """(resamples, 7) or (7,): R@1/5/10 i2t, R@1/5/10 t2i and rsum (:data:`STATISTICS`), in percent, of the hits
    averaged over seeds, with each image weighted by ``counts`` (resamples, n_img) (None: every image once)."""
    image_hits, caption_hits = ranks.hits()
    n_img = len(ranks.image_ids)
    per_image = np.zeros((n_img, len(KS)))
    np.add.at(per_image, ranks.caption_image, caption_hits)  # the caption hits of each image, summed
    captions = np.bincount(ranks.caption_image, minlength=n_img).astype(np.float64)
    weights = np.ones((1, n_img)) if counts is None else counts
    i2t = 100.0 * (weights @ image_hits) / weights.sum(axis=1, keepdims=True)
    t2i = 100.0 * (weights @ per_image) / (weights @ captions)[:, None]
    values = np.concatenate([i2t, t2i, (i2t + t2i).sum(axis=1, keepdims=True)], axis=1)
    return values[0] if counts is None else values


def paired_test(
    baseline: QueryRanks, system: QueryRanks, *, samples: int = SAMPLES, seed: int = SEED
) -> dict[str, Any]:
    """Paired bootstrap of ``system`` against ``baseline`` on the same test queries.

    Returns:
        Per statistic (:data:`STATISTICS`: ``i2t_r1`` .. ``t2i_r10``, ``rsum``): ``baseline`` and ``system`` (from
        the hits averaged over each run's seeds), ``delta`` (system - baseline), ``p_value`` (two-sided:
        :func:`common.bootstrap.two_sided_p`) and ``ci`` (the 95% half-width of the resampled differences); then
        ``samples``, ``seed``, ``images``, ``captions`` and each run's ``seeds``.

    Raises:
        ValueError: the runs were tested on different queries.
    """
    if not baseline.same_queries(system):
        raise ValueError(
            f"the runs were tested on different queries ({len(baseline.caption_ids)} and {len(system.caption_ids)} "
            "captions, or other ids): a paired test needs the same test set"
        )
    counts = resample_counts(len(baseline.image_ids), samples=samples, seed=seed)
    before, after = recalls(baseline), recalls(system)
    differences = recalls(system, counts) - recalls(baseline, counts)
    observed = after - before
    p_values, widths = two_sided_p(differences, observed), half_width(differences)
    result: dict[str, Any] = {
        name: {  # rounded as the metrics files are: no float noise such as 4.8999999999999995
            "baseline": round(float(before[index]), 4),
            "system": round(float(after[index]), 4),
            "delta": round(float(observed[index]), 4),
            "p_value": round(float(p_values[index]), 6),
            "ci": round(float(widths[index]), 4),
        }
        for index, name in enumerate(STATISTICS)
    }
    return result | {
        "samples": samples,
        "seed": seed,
        "images": len(baseline.image_ids),
        "captions": len(baseline.caption_ids),
        "seeds": {"baseline": baseline.seeds, "system": system.seeds},
    }
