"""Recall@K, median/mean rank, rsum and mR from a similarity matrix; the 1K/5K/5-fold protocols.

Conventions of VSE++/SCAN/VSE∞ (``i2t``/``t2i`` in their evaluation code), generalised to any number of
captions per image: the i2t rank of an image is the 0-based position of its best-ranked caption among all
captions, the t2i rank of a caption is the position of its image among all images. R@K = 100 * fraction of
ranks < K; medr = floor(median rank) + 1; meanr = mean rank + 1; rsum = the six recalls summed; mR = their mean.

Ties are counted against the query (a negative scoring equal to the positive ranks above it), so a model
that gives every pair the same score gets chance-level recall, not a perfect one. The reference code breaks
ties by the order of ``np.argsort``, which is arbitrary.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NotRequired, TypedDict

import numpy as np
import torch
from torch import Tensor


class Metrics(TypedDict):
    """R@K, medr and meanr per direction, rsum and mR (recalls in percent)."""

    i2t: dict[str, float]
    t2i: dict[str, float]
    rsum: float
    mr: float
    folds: NotRequired[int]


KS = (1, 5, 10)
CHUNK = 1024


def i2t_ranks(sims: Tensor, caption_image: Tensor, *, chunk: int = CHUNK) -> Tensor:
    """(n_img,) rank of each image's best caption: negatives scoring >= that caption, counted.

    Raises:
        ValueError: an image without captions (its rank is undefined).
    """
    n_img = sims.shape[0]
    counts = torch.bincount(caption_image, minlength=n_img)
    if bool((counts == 0).any()):
        missing = torch.nonzero(counts == 0).flatten().tolist()
        raise ValueError(f"images {missing[:10]} (of {len(missing)}) have no caption to retrieve")
    ranks = []
    for start in range(0, n_img, chunk):
        block = sims[start : start + chunk]
        rows = torch.arange(start, start + block.shape[0], device=sims.device)
        positive = caption_image.unsqueeze(0) == rows.unsqueeze(1)
        best = block.masked_fill(~positive, float("-inf")).amax(dim=1, keepdim=True)
        ranks.append(((block >= best) & ~positive).sum(dim=1))
    return torch.cat(ranks)


def t2i_ranks(sims: Tensor, caption_image: Tensor, *, chunk: int = CHUNK) -> Tensor:
    """(n_txt,) rank of each caption's image: other images scoring >= it, counted."""
    ranks = []
    for start in range(0, sims.shape[1], chunk):
        block = sims[:, start : start + chunk]
        images = caption_image[start : start + chunk]
        positive_scores = block.gather(0, images.unsqueeze(0))
        ranks.append((block >= positive_scores).sum(dim=0) - 1)
    return torch.cat(ranks)


def direction_metrics(ranks: Tensor, ks: Sequence[int] = KS) -> dict[str, float]:
    """R@K in percent, medr and meanr of 0-based ``ranks``."""
    values = ranks.double().cpu().numpy()
    metrics = {f"r{k}": float(100.0 * np.mean(values < k)) for k in ks}
    metrics["medr"] = float(math.floor(np.median(values)) + 1)
    metrics["meanr"] = float(values.mean() + 1)
    return metrics


def rank_metrics(sims: Tensor, caption_image: Tensor, ks: Sequence[int] = KS) -> Metrics:
    """``{"i2t": {...}, "t2i": {...}, "rsum", "mr"}`` of one (n_img, n_txt) similarity matrix."""
    i2t = direction_metrics(i2t_ranks(sims, caption_image), ks)
    t2i = direction_metrics(t2i_ranks(sims, caption_image), ks)
    return with_summary({"i2t": i2t, "t2i": t2i}, ks)


def with_summary(directions: dict[str, dict[str, float]], ks: Sequence[int] = KS) -> Metrics:
    recalls = [directions[name][f"r{k}"] for name in ("i2t", "t2i") for k in ks]
    total = float(sum(recalls))
    return {"i2t": directions["i2t"], "t2i": directions["t2i"], "rsum": total, "mr": total / len(recalls)}


def query_ranks(sims: Tensor, caption_image: Tensor, fold_images: int | None = None) -> tuple[Tensor, Tensor]:
    """(i2t ranks of the images, t2i ranks of the captions), in the order of ``sims``' rows and columns; with
    ``fold_images``, each query ranked within its fold (what :func:`folded_metrics` averages)."""
    if fold_images is None:
        return i2t_ranks(sims, caption_image), t2i_ranks(sims, caption_image)
    i2t = torch.empty(sims.shape[0], dtype=torch.long)
    t2i = torch.empty(sims.shape[1], dtype=torch.long)
    for fold in fold_slices(sims.shape[0], fold_images):
        captions = torch.nonzero((caption_image >= fold.start) & (caption_image < fold.stop)).flatten()
        block, images = sims[fold][:, captions], caption_image[captions] - fold.start
        i2t[fold] = i2t_ranks(block, images).cpu()
        t2i[captions] = t2i_ranks(block, images).cpu()
    return i2t, t2i


def fold_slices(n_images: int, fold_images: int) -> list[slice]:
    """Consecutive folds of ``fold_images`` images (COCO 5-fold 1K: 5 x 1,000 of the 5,000 test images).

    Raises:
        ValueError: a split that does not divide into whole folds.
    """
    if n_images < fold_images or n_images % fold_images:
        raise ValueError(f"{n_images} test images do not split into folds of {fold_images}")
    return [slice(start, start + fold_images) for start in range(0, n_images, fold_images)]


def folded_metrics(sims: Tensor, caption_image: Tensor, fold_images: int, ks: Sequence[int] = KS) -> Metrics:
    """Mean of the per-fold metrics; rsum and mR come from the mean R@K (the reference prints them wrong).

    Each fold keeps its images and the captions of those images, in their order.
    """
    per_fold: list[Metrics] = []
    for fold in fold_slices(sims.shape[0], fold_images):
        captions = torch.nonzero((caption_image >= fold.start) & (caption_image < fold.stop)).flatten()
        per_fold.append(rank_metrics(sims[fold][:, captions], caption_image[captions] - fold.start, ks))
    directions = {
        name: {key: float(np.mean([fold[name][key] for fold in per_fold])) for key in per_fold[0][name]}
        for name in ("i2t", "t2i")
    }
    summary = with_summary(directions, ks)
    summary["folds"] = len(per_fold)
    return summary
