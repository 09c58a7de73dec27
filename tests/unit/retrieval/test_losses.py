"""The ranking losses against straightforward loop implementations written from Eq. 8-10 and EmbN."""

from __future__ import annotations

import math

import pytest
import torch

from retrieval.losses import RankingLoss


def reference_harder(sims, caption_image, caption_types, betas, margin):
    """Eq. 9-10 pair by pair; captions of the pair's image are never negatives; betas renormalised."""
    n_img, n_txt = sims.shape
    total = 0.0
    for t in range(n_txt):
        v = int(caption_image[t])
        positive = float(sims[v, t])
        negative_images = [float(sims[i, t]) for i in range(n_img) if i != v]
        if negative_images:
            total += max(0.0, margin - positive + max(negative_images))
        hardest, weights = [], []
        for kind, beta in enumerate(betas):
            scores = [float(sims[v, c]) for c in range(n_txt) if caption_image[c] != v and caption_types[c] == kind]
            if scores:
                hardest.append(max(scores))
                weights.append(beta)
        if hardest:
            weighted = sum(w * h for w, h in zip(weights, hardest, strict=True)) / sum(weights)
            total += max(0.0, margin - positive + weighted)
    return total


def reference_sum(sims, caption_image, margin):
    n_img, n_txt = sims.shape
    total = 0.0
    for t in range(n_txt):
        v = int(caption_image[t])
        positive = float(sims[v, t])
        total += sum(max(0.0, margin - positive + float(sims[i, t])) for i in range(n_img) if i != v)
        total += sum(max(0.0, margin - positive + float(sims[v, c])) for c in range(n_txt) if caption_image[c] != v)
    return total


def reference_topk(sims, caption_image, k, margin):
    n_img, n_txt = sims.shape
    dist = [[math.sqrt(max(2 - 2 * float(sims[i, t]), 0.0) + 1e-4) for t in range(n_txt)] for i in range(n_img)]
    image_kept, caption_kept = [], []
    for t in range(n_txt):
        v = int(caption_image[t])
        positive = dist[v][t]
        to_images = sorted((max(0.0, margin + positive - dist[i][t]) for i in range(n_img) if i != v), reverse=True)
        image_kept += to_images[:k]
        to_caps = sorted(
            (max(0.0, margin + positive - dist[v][c]) for c in range(n_txt) if caption_image[c] != v), reverse=True
        )
        caption_kept += to_caps[:k]
    return 1.5 * sum(image_kept) / len(image_kept) + sum(caption_kept) / len(caption_kept)


def random_batch(seed: int, n_img: int = 5, per_image: int = 3, n_types: int = 3):
    generator = torch.Generator().manual_seed(seed)
    caption_image = torch.arange(n_img).repeat_interleave(per_image)
    caption_image = caption_image[torch.randperm(len(caption_image), generator=generator)]
    sims = torch.rand(n_img, len(caption_image), generator=generator, dtype=torch.float64) * 2 - 1
    types = torch.randint(0, n_types, (len(caption_image),), generator=generator)
    return sims, caption_image, types


@pytest.mark.parametrize("seed", range(5))
def test_harder_matches_reference(seed: int) -> None:
    sims, caption_image, types = random_batch(seed)
    betas = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    got = RankingLoss("harder", margin=0.2)(sims, caption_image, types, betas)
    assert float(got) == pytest.approx(reference_harder(sims, caption_image, types, betas.tolist(), 0.2), abs=1e-10)


def test_harder_renormalises_missing_types() -> None:
    # type 2 occurs only among the captions of image 0: image 0 has no type-2 negative.
    sims, caption_image, _ = random_batch(7, n_img=3, per_image=2)
    types = torch.where(caption_image == 0, 2, caption_image % 2)
    betas = torch.tensor([0.2, 0.2, 0.6], dtype=torch.float64)
    got = RankingLoss("harder", margin=0.3)(sims, caption_image, types, betas)
    assert float(got) == pytest.approx(reference_harder(sims, caption_image, types, betas.tolist(), 0.3), abs=1e-10)


def test_max_violation_is_harder_with_one_type() -> None:
    sims, caption_image, types = random_batch(3)
    ones = torch.ones(1, dtype=torch.float64)
    got = RankingLoss("max_violation")(sims, caption_image, types, torch.tensor([0.1, 0.1, 0.8]))
    want = reference_harder(sims, caption_image, torch.zeros_like(types), ones.tolist(), 0.2)
    assert float(got) == pytest.approx(want, abs=1e-10)


@pytest.mark.parametrize("seed", range(3))
def test_sum_of_hinges_matches_reference(seed: int) -> None:
    sims, caption_image, types = random_batch(seed)
    got = RankingLoss("sum", margin=0.2)(sims, caption_image, types, torch.ones(3))
    assert float(got) == pytest.approx(reference_sum(sims, caption_image, 0.2), abs=1e-10)


@pytest.mark.parametrize(("seed", "k"), [(0, 10), (1, 2), (2, 1)])
def test_topk_matches_reference(seed: int, k: int) -> None:
    sims, caption_image, types = random_batch(seed)
    got = RankingLoss("topk", topk=k, topk_margin=0.05)(sims, caption_image, types, torch.ones(3))
    assert float(got) == pytest.approx(reference_topk(sims, caption_image, k, 0.05), abs=1e-10)


def test_hand_computed_two_images_two_types() -> None:
    # captions 0,1 of image 0 (types 0,1); captions 2,3 of image 1 (types 0,1)
    sims = torch.tensor([[0.9, 0.8, 0.7, 0.1], [0.2, 0.6, 0.5, 0.4]], dtype=torch.float64)
    caption_image = torch.tensor([0, 0, 1, 1])
    types = torch.tensor([0, 1, 0, 1])
    betas = torch.tensor([0.75, 0.25], dtype=torch.float64)
    # image terms: [0.2-0.9+0.2]=0, [0.2-0.8+0.6]=0, [0.2-0.5+0.7]=0.4, [0.2-0.4+0.1]=0
    # caption terms for image 0 (negatives: caption 2 type 0 -> 0.7, caption 3 type 1 -> 0.1): 0.55
    #   [0.2-0.9+0.55]=0, [0.2-0.8+0.55]=0
    # for image 1 (negatives: caption 0 type 0 -> 0.2, caption 1 type 1 -> 0.6): 0.3
    #   [0.2-0.5+0.3]=0, [0.2-0.4+0.3]=0.1
    got = RankingLoss("harder", margin=0.2)(sims, caption_image, types, betas)
    assert float(got) == pytest.approx(0.5, abs=1e-12)


def test_same_image_captions_are_not_negatives() -> None:
    # Two captions of one image scoring higher than each other's pair: no loss from each other.
    sims = torch.tensor([[0.9, 0.95], [0.0, 0.0]], dtype=torch.float64)
    caption_image = torch.tensor([0, 0])
    got = RankingLoss("max_violation", margin=0.2)(sims, caption_image, torch.zeros(2, dtype=torch.long), torch.ones(1))
    assert float(got) == 0.0


def test_gradient_is_finite_with_one_image() -> None:
    sims = torch.tensor([[0.5, 0.4]], requires_grad=True)
    loss = RankingLoss("harder")(sims, torch.tensor([0, 0]), torch.tensor([0, 1]), torch.tensor([0.5, 0.5]))
    loss.backward()
    assert float(loss) == 0.0
    assert sims.grad is not None and torch.isfinite(sims.grad).all()
