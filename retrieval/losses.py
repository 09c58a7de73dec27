"""Ranking losses on a batch's (image x caption) similarity matrix.

A batch holds ``n_img`` distinct images and ``n_txt`` captions; ``caption_image[j]`` is the image of caption
``j``. Every caption forms one positive pair (v, t) with its image. Captions of the same image are never
negatives of each other's pair (the reference implementations take only the diagonal as positive, so a
second caption of the same image in a batch becomes a false negative; with several captions per image, and
more with synthesized ones, that collision is common).

Kinds:
- ``harder`` (Huang et al. 2020, Eq. 9-10): per pair, [alpha - s(v,t) + sum_l beta_l s(v, t_hard^(l))]_+ with
  t_hard^(l) the hardest negative caption of language type l for v, plus [alpha - s(v,t) + s(v_hard, t)]_+.
  The beta_l of types with no negative in the batch are dropped and the rest renormalised to sum to 1.
- ``max_violation`` (VSE++): the same with one type (the hardest negative caption of any type).
- ``sum`` (VSE0, Eq. 8): the hinge summed over every negative caption and every negative image.
- ``topk`` (EmbN, used by MULE): Euclidean distances of l2-normalised embeddings, d = sqrt(2 - 2s + 1e-4);
  the K most violated hinges per caption, caption->image weighted 1.5 and image->caption 1, means.
The first three are sums over the batch (as Eq. 9 and the reference code); ``topk`` is a mean like EmbN.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import Tensor

from common.checks import SettingError, check, check_choice, check_range
from retrieval.model import LossKind

NEG_INF = float("-inf")
DISTANCE_EPS = 1e-4  # EmbN's pdist: sqrt(|x - y|^2 + 1e-4)


@dataclass(frozen=True)
class RankingLoss:
    """The training objective (the `retrieval.objective` section of params.yaml).

    Attributes:
        kind: See the module docstring; ``auto`` stands for each model's own (:meth:`for_model`).
        margin: alpha of the hinge-based kinds (0.2 in VSE++/SCAN and ours).
        beta: Eq. 9's beta_l per language type (``<lang>-<origin>``); empty: equal weights (:meth:`type_weights`).
        topk: K of ``topk`` (EmbN: 10).
        topk_margin: Margin of ``topk`` on Euclidean distances (EmbN/MULE: 0.05).
        per_model: Model name -> its own kind, in place of ``kind`` (e.g. Eq. 9 for SCAN: ``{scan: harder}``);
            the names are checked against the model registry by the retrieval settings.
    """

    kind: LossKind | Literal["auto"] = "harder"
    margin: float = 0.2
    beta: dict[str, float] = field(default_factory=dict)
    topk: int = 10
    topk_margin: float = 0.05
    per_model: dict[str, LossKind | Literal["auto"]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_choice("kind", self.kind, LossKind | Literal["auto"])
        for name, kind in self.per_model.items():
            check_choice(f"per_model.{name}", kind, LossKind | Literal["auto"])
        check_range("margin", self.margin, 0.0, 10.0)
        for key, weight in self.beta.items():
            if not re.fullmatch(r"[a-z]{2}-(human|mt|mmt)", key) or weight < 0:
                raise SettingError(f"beta.{key}", "expected <lang>-<human|mt|mmt>: a weight >= 0")
        check_range("topk", self.topk, 1, 100_000)
        check(0.0 <= self.topk_margin <= 10.0, "topk_margin", self.topk_margin, "0 to 10")

    def for_model(self, name: str, default: LossKind) -> RankingLoss:
        """The loss model ``name`` trains with: its ``per_model`` kind or ``kind``, ``auto`` replaced by
        ``default`` (the model's own)."""
        kind = self.per_model.get(name, self.kind)
        return dataclasses.replace(self, kind=default if kind == "auto" else kind, per_model={})

    def type_weights(self, type_names: Sequence[str]) -> list[float]:
        """beta_l per language type: the configured ones (types not named get 0), normalised; or equal weights.

        Raises:
            ValueError: ``beta`` gives no weight to any of ``type_names``.
        """
        if not self.beta:
            return [1.0 / len(type_names)] * len(type_names)
        weights = [self.beta.get(name, 0.0) for name in type_names]
        if sum(weights) <= 0:
            raise ValueError(
                f"retrieval.objective.beta {self.beta} gives no weight to the training types {list(type_names)}"
            )
        return [weight / sum(weights) for weight in weights]

    def __call__(self, sims: Tensor, caption_image: Tensor, caption_types: Tensor, type_weights: Tensor) -> Tensor:
        """Loss of one batch.

        Args:
            sims: (n_img, n_txt) similarities.
            caption_image: (n_txt,) image index of each caption.
            caption_types: (n_txt,) language-type index of each caption (used by ``harder``).
            type_weights: (T,) beta_l per language type (used by ``harder``).
        """
        if self.kind == "auto":
            raise ValueError("a loss of kind auto must be resolved with for_model() before use")
        positive = caption_image.unsqueeze(0) == torch.arange(sims.shape[0], device=sims.device).unsqueeze(1)
        if self.kind == "topk":
            return embn_topk_loss(sims, positive, caption_image, k=self.topk, margin=self.topk_margin)
        if self.kind == "sum":
            return sum_of_hinges(sims, positive, caption_image, self.margin)
        if self.kind == "max_violation":
            caption_types = torch.zeros_like(caption_types)
            type_weights = type_weights.new_ones(1)
        return harder_negative_loss(sims, positive, caption_image, caption_types, type_weights, self.margin)


def harder_negative_loss(
    sims: Tensor, positive: Tensor, caption_image: Tensor, caption_types: Tensor, type_weights: Tensor, margin: float
) -> Tensor:
    """Eq. 9-10; ``positive`` is the (n_img, n_txt) bool mask of pairs that are not negatives."""
    cols = torch.arange(sims.shape[1], device=sims.device)
    positive_scores = sims[caption_image, cols]  # (n_txt,) s(v, t)

    hardest_image = sims.masked_fill(positive, NEG_INF).amax(dim=0)  # (n_txt,) s(v_hard, t)
    image_term = _hinge(margin - positive_scores + hardest_image)

    n_types = type_weights.shape[0]
    of_type = caption_types.unsqueeze(0) == torch.arange(n_types, device=sims.device).unsqueeze(1)  # (T, n_txt)
    candidates = (~positive).unsqueeze(1) & of_type.unsqueeze(0)  # (n_img, T, n_txt)
    hardest_of_type = sims.unsqueeze(1).masked_fill(~candidates, NEG_INF).amax(dim=2)  # (n_img, T)
    present = torch.isfinite(hardest_of_type)
    weights = type_weights.to(sims.dtype).unsqueeze(0) * present  # betas of absent types dropped
    total_weight = weights.sum(dim=1)  # (n_img,)
    has_negative = total_weight > 0
    weighted = (weights * hardest_of_type.masked_fill(~present, 0.0)).sum(dim=1)
    weighted = weighted / torch.where(has_negative, total_weight, torch.ones_like(total_weight))
    caption_term = _hinge(margin - positive_scores + weighted[caption_image])
    caption_term = caption_term * has_negative[caption_image]
    return image_term.sum() + caption_term.sum()


def sum_of_hinges(sims: Tensor, positive: Tensor, caption_image: Tensor, margin: float) -> Tensor:
    """Eq. 8: every negative caption of v and every negative image of t, per positive pair (v, t)."""
    cols = torch.arange(sims.shape[1], device=sims.device)
    positive_scores = sims[caption_image, cols]  # (n_txt,)
    negative = ~positive
    image_terms = _hinge(margin - positive_scores.unsqueeze(0) + sims) * negative  # (n_img, n_txt) over images i
    caption_rows = sims[caption_image]  # (n_txt, n_txt): row j = s(v_j, every caption)
    caption_terms = _hinge(margin - positive_scores.unsqueeze(1) + caption_rows) * negative[caption_image]
    return image_terms.sum() + caption_terms.sum()


def embn_topk_loss(sims: Tensor, positive: Tensor, caption_image: Tensor, *, k: int, margin: float) -> Tensor:
    """EmbN's loss (Wang et al.; MULE): top-K violated triplets in both directions on Euclidean distances."""
    distances = torch.sqrt((2.0 - 2.0 * sims).clamp(min=0.0) + DISTANCE_EPS)  # (n_img, n_txt)
    cols = torch.arange(sims.shape[1], device=sims.device)
    positive_distance = distances[caption_image, cols]  # (n_txt,)
    negative = ~positive
    # caption -> image: the caption's other images
    to_images = _hinge(margin + positive_distance.unsqueeze(0) - distances) * negative
    # image -> caption: the caption's image against captions of other images
    to_captions = _hinge(margin + positive_distance.unsqueeze(1) - distances[caption_image]) * negative[caption_image]
    image_loss = topk_mean(to_images.t(), negative.t(), k)
    caption_loss = topk_mean(to_captions, negative[caption_image], k)
    zero = sims.sum() * 0.0  # a batch without negatives contributes nothing, but keeps the graph
    return 1.5 * (zero if image_loss is None else image_loss) + (zero if caption_loss is None else caption_loss)


def _hinge(x: Tensor) -> Tensor:
    return x.clamp(min=0.0)


# --- EmbN's neighbourhood constraints (MULE, PARALLEL-EmbN) --------------------------------------------


def euclidean_distances(x: Tensor, y: Tensor) -> Tensor:
    """(n, d) and (m, d) -> (n, m) sqrt(|x|^2 - 2 x.y + |y|^2 + 1e-4), EmbN's ``pdist``."""
    squared = x.pow(2).sum(1, keepdim=True) - 2.0 * x @ y.t() + y.pow(2).sum(1).unsqueeze(0)
    return torch.sqrt(squared.clamp(min=0.0) + DISTANCE_EPS)


def topk_mean(violations: Tensor, valid: Tensor, k: int) -> Tensor | None:
    """Mean of the K largest valid entries of each row of (n, m) ``violations``, over all entries kept.

    Rows with fewer than K valid entries keep the ones they have; None when no entry is valid.
    """
    if not bool(valid.any()):
        return None
    k = min(k, violations.shape[1])
    top = violations.masked_fill(~valid, float("-inf")).topk(k, dim=1).values
    kept = torch.isfinite(top)
    return top.masked_fill(~kept, 0.0).sum() / kept.sum()


def neighbourhood_loss(
    anchors: Tensor, anchor_image: Tensor, others: Tensor, other_image: Tensor, *, k: int, margin: float
) -> Tensor | None:
    """EmbN's neighbourhood hinge of ``anchors`` against ``others``.

    Each anchor's positive is the farthest ``other`` of the same image, its negatives the ``others`` of other
    images; the K largest [margin + d_pos - d_neg]_+ per anchor are averaged (:func:`topk_mean`). Anchors
    without a positive are skipped.

    Args:
        anchors: (n, d) embeddings.
        anchor_image: (n,) image index of each anchor.
        others: (m, d) embeddings (may be ``anchors`` itself: then each anchor is its own positive too).
        other_image: (m,) image index of each other.

    Returns:
        The scalar loss, or None when no anchor has both a positive and a negative.
    """
    distances = euclidean_distances(anchors, others)  # (n, m)
    same_image = anchor_image.unsqueeze(1) == other_image.unsqueeze(0)  # (n, m)
    has_positive = same_image.any(dim=1)
    hardest_positive = distances.masked_fill(~same_image, float("-inf")).amax(dim=1)
    hardest_positive = torch.where(has_positive, hardest_positive, torch.zeros_like(hardest_positive))
    violations = (margin + hardest_positive.unsqueeze(1) - distances).clamp(min=0.0)
    return topk_mean(violations, ~same_image & has_positive.unsqueeze(1), k)


def mean_of(losses: list[Tensor | None]) -> Tensor | None:
    """Mean of the losses that exist; None when none does."""
    present = [loss for loss in losses if loss is not None]
    return torch.stack(present).mean() if present else None


def within_language_loss(
    embeddings: Tensor, caption_image: Tensor, langs: Tensor, *, k: int, margin: float
) -> Tensor | None:
    """EmbN's sentence-only neighbourhood constraint in each language, averaged over languages.

    Args:
        embeddings: (B, d) l2-normalised caption embeddings.
        caption_image: (B,) image index of each caption.
        langs: (B,) language index of each caption.
    """
    losses = []
    for lang in torch.unique(langs).tolist():
        rows = langs == lang
        vectors, images = embeddings[rows], caption_image[rows]
        losses.append(neighbourhood_loss(vectors, images, vectors, images, k=k, margin=margin))
    return mean_of(losses)
