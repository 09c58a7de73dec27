"""R@K, ranks and protocols against definitions computed by sorting, and hand-computed tiny cases."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from retrieval.evaluation import fold_slices, folded_metrics, i2t_ranks, rank_metrics, t2i_ranks


def reference_ranks(sims: np.ndarray, caption_image: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sort every query's candidates (ties broken against the query) and read off the positions."""
    n_img, n_txt = sims.shape
    i2t = np.zeros(n_img, dtype=int)
    for i in range(n_img):
        # negatives first among equal scores: sort by (-score, is_positive)
        order = sorted(range(n_txt), key=lambda c: (-sims[i, c], caption_image[c] == i))
        i2t[i] = min(position for position, c in enumerate(order) if caption_image[c] == i)
    t2i = np.zeros(n_txt, dtype=int)
    for c in range(n_txt):
        order = sorted(range(n_img), key=lambda i: (-sims[i, c], i == caption_image[c]))
        t2i[c] = order.index(caption_image[c])
    return i2t, t2i


def reference_metrics(sims: np.ndarray, caption_image: np.ndarray) -> dict:
    i2t, t2i = reference_ranks(sims, caption_image)
    out = {}
    for name, ranks in (("i2t", i2t), ("t2i", t2i)):
        out[name] = {f"r{k}": 100.0 * np.mean(ranks < k) for k in (1, 5, 10)}
        out[name]["medr"] = math.floor(np.median(ranks)) + 1
        out[name]["meanr"] = ranks.mean() + 1
    recalls = [out[d][f"r{k}"] for d in ("i2t", "t2i") for k in (1, 5, 10)]
    out["rsum"], out["mr"] = sum(recalls), sum(recalls) / 6
    return out


@pytest.mark.parametrize("seed", range(4))
def test_metrics_match_sorting_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n_img = 30
    caption_image = np.repeat(np.arange(n_img), 5)
    # coarse scores make many ties
    sims = np.round(
        rng.normal(size=(n_img, 5 * n_img)) + 2.0 * (caption_image[None, :] == np.arange(n_img)[:, None]), 1
    )
    got = rank_metrics(torch.from_numpy(sims), torch.from_numpy(caption_image))
    want = reference_metrics(sims, caption_image)
    for direction in ("i2t", "t2i"):
        for key, value in want[direction].items():
            assert got[direction][key] == pytest.approx(value), (direction, key)
    assert got["rsum"] == pytest.approx(want["rsum"])
    assert got["mr"] == pytest.approx(want["mr"])


def test_uneven_captions_per_image_and_small_chunks() -> None:
    rng = np.random.default_rng(1)
    caption_image = np.array([0, 0, 1, 2, 2, 2, 3, 1, 0])
    sims = rng.normal(size=(4, len(caption_image)))
    i2t, t2i = reference_ranks(sims, caption_image)
    tensor, images = torch.from_numpy(sims), torch.from_numpy(caption_image)
    assert i2t_ranks(tensor, images, chunk=3).tolist() == i2t.tolist()
    assert t2i_ranks(tensor, images, chunk=2).tolist() == t2i.tolist()


def test_hand_computed_ties_count_against_the_query() -> None:
    sims = torch.tensor([[0.5, 0.5, 0.1], [0.5, 0.2, 0.5]])
    caption_image = torch.tensor([0, 1, 1])
    # image 0: its caption 0 scores 0.5, negative caption 1 ties at 0.5 -> rank 1
    # image 1: best positive 0.5 (caption 2); negative caption 0 ties -> rank 1
    assert i2t_ranks(sims, caption_image).tolist() == [1, 1]
    # caption 0: image 0 0.5, image 1 ties -> rank 1; caption 1: image 1 0.2 < image 0 0.5 -> 1; caption 2: 0
    assert t2i_ranks(sims, caption_image).tolist() == [1, 1, 0]


def test_constant_scores_give_chance_not_perfect_recall() -> None:
    metrics = rank_metrics(torch.zeros(20, 100), torch.arange(20).repeat_interleave(5))
    assert metrics["t2i"]["r1"] == 0.0
    assert metrics["i2t"]["r10"] == 0.0


def test_perfect_scores() -> None:
    caption_image = torch.arange(10).repeat_interleave(5)
    sims = (caption_image.unsqueeze(0) == torch.arange(10).unsqueeze(1)).double()
    metrics = rank_metrics(sims, caption_image)
    assert metrics["rsum"] == 600.0
    assert metrics["i2t"]["medr"] == 1.0 and metrics["t2i"]["meanr"] == 1.0


def test_image_without_captions_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"images \[2\]"):
        i2t_ranks(torch.zeros(3, 2), torch.tensor([0, 1]))


def test_folds_are_consecutive_and_rsum_comes_from_mean_recalls() -> None:
    rng = np.random.default_rng(0)
    n_img, fold = 40, 10
    caption_image = np.repeat(np.arange(n_img), 5)
    sims = rng.normal(size=(n_img, 5 * n_img)) + 1.5 * (caption_image[None, :] == np.arange(n_img)[:, None])
    got = folded_metrics(torch.from_numpy(sims), torch.from_numpy(caption_image), fold)
    folds = [
        reference_metrics(
            sims[f * fold : (f + 1) * fold, f * fold * 5 : (f + 1) * fold * 5], np.repeat(np.arange(fold), 5)
        )
        for f in range(4)
    ]
    for direction in ("i2t", "t2i"):
        for key in ("r1", "r5", "r10", "medr", "meanr"):
            assert got[direction][key] == pytest.approx(np.mean([f[direction][key] for f in folds]))
    mean_recalls = [np.mean([f[d][f"r{k}"] for f in folds]) for d in ("i2t", "t2i") for k in (1, 5, 10)]
    assert got["rsum"] == pytest.approx(sum(mean_recalls))
    assert got["folds"] == 4


def test_fold_slices_reject_partial_folds() -> None:
    assert fold_slices(5000, 1000)[-1] == slice(4000, 5000)
    with pytest.raises(ValueError, match="do not split"):
        fold_slices(1500, 1000)
