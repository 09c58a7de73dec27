"""The cross-lingual text ranking term of Huang, Chang, Hauptmann (EMNLP 2019), Eq. 4:

    l(V, E, G) = l(V, G) + l(V, E) + gamma * l(G, E),

trained in every step beside the image-text ranking terms (and the diversity term of Eq. 7), in the same loss and
the same backward pass. l(G, E) is Eq. 3 with captions on both sides: the German and the English caption of one
image form a positive pair, and each side is ranked against the hardest caption of the other language in the
batch, with the hinge margin alpha of the image-text terms:

    l(G, E) = sum_p [alpha - s(g_p, e_p) + s(g_p, e_hard)]_+ + sum_q [alpha - s(g_q, e_q) + s(g_hard, e_q)]_+.

The paper samples batches of (image, English caption, German caption) triplets. This project's batches are
captions, so few of them have a caption of the same image in another language beside them: each caption of the
batch is given a partner, a caption of its image in another language drawn at random (the language first, then the
caption), encoded in the same step. The image-text terms stay those of the batch's captions. Pairs are grouped by
their two languages, the lower language index on the G side; with more than two languages each pair of languages
adds its own term (the paper's footnote 1). Captions of the same image are never negatives of each other (the
project's convention, :mod:`retrieval.losses`); the paper's triplets have distinct images, where the two agree.
Captions whose image has no caption in another language get no partner. Deviation: the paper's diversity term
l^D(G, E) keeps the batch's own cross-lingual pairs (:mod:`retrieval.zoo.multihead`); the partners feed l(G, E) only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from common.distributed import share
from retrieval.data import CaptionSet, text_batch
from retrieval.losses import harder_negative_loss
from retrieval.model import Embedded, RetrievalModel


@dataclass(frozen=True)
class CaptionPartners:
    """Image row -> language index -> indices of its captions, for the images with captions in 2+ languages."""

    by_image: dict[int, dict[int, np.ndarray]]

    @classmethod
    def of(cls, captions: CaptionSet) -> CaptionPartners:
        """Raises: ValueError: no image has captions in two or more languages."""
        grouped: dict[int, dict[int, list[int]]] = {}
        for index, (row, lang) in enumerate(zip(captions.image_rows.tolist(), captions.langs.tolist(), strict=True)):
            grouped.setdefault(row, {}).setdefault(lang, []).append(index)
        by_image = {
            row: {lang: np.array(ids) for lang, ids in sorted(langs.items())}
            for row, langs in grouped.items()
            if len(langs) >= 2
        }
        if not by_image:
            raise ValueError(
                "the cross-lingual text ranking term needs images with captions in two or more languages; "
                "the training set has none"
            )
        return cls(by_image)

    def draw(
        self, anchors: np.ndarray, captions: CaptionSet, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        """Positions in ``anchors`` that got a partner, and their partners' caption indices: per anchor, one of its
        image's other languages, then one caption of it, at random."""
        kept, partners = [], []
        for position, index in enumerate(anchors.tolist()):
            langs = self.by_image.get(int(captions.image_rows[index]))
            if langs is None:
                continue
            others = [lang for lang in langs if lang != int(captions.langs[index])]
            lang = others[int(rng.integers(len(others)))]
            kept.append(position)
            partners.append(int(rng.choice(langs[lang])))
        return np.array(kept, dtype=np.int64), np.array(partners, dtype=np.int64)


def text_ranking_loss(sims: Tensor, images: Tensor, margin: float) -> Tensor:
    """l(G, E) of Eq. 3 on the (P, P) scores s(g_p, e_q) of P caption pairs; pair p shows image ``images[p]``, and
    captions of the same image are not negatives."""
    pairs = torch.arange(sims.shape[0], device=sims.device)
    same_image = images.unsqueeze(1) == images.unsqueeze(0)
    return harder_negative_loss(sims, same_image, pairs, torch.zeros_like(pairs), sims.new_ones(1), margin)


@dataclass(frozen=True)
class JointTextRanking:
    """gamma * l(G, E) of a training batch (see the module notes).

    Attributes:
        weight: gamma (Huang et al. 2019: 0.6).
        margin: alpha, the image-text terms' margin.
        partners: The training captions' cross-lingual partners.
        train: The training captions.
        rng: Draws the partners (the fit's generator, kept in its resumable state).
    """

    weight: float
    margin: float
    partners: CaptionPartners
    train: CaptionSet
    rng: np.random.Generator

    @classmethod
    def for_fit(
        cls, model: RetrievalModel, train: CaptionSet, margin: float, rng: np.random.Generator
    ) -> JointTextRanking | None:
        """The term ``model`` trains with (its :meth:`~retrieval.model.RetrievalModel.text_ranking_weight`); None at
        weight 0, where the fit is what it is without the term (no partner is drawn)."""
        weight = model.text_ranking_weight()
        if weight == 0:
            return None
        return cls(weight, margin, CaptionPartners.of(train), train, rng)

    def loss(self, model: RetrievalModel, indices: np.ndarray, texts: Embedded, device: torch.device) -> Tensor:
        """gamma * l(G, E) for the batch captions ``indices``, encoded as ``texts`` (all of them, in order)."""
        kept, partner_ids = self.partners.draw(indices, self.train, self.rng)
        if len(kept) == 0:
            return texts.vectors.sum() * 0.0
        # data-parallel: each rank encodes its share of the partners, as of the batch's captions
        partners = model.encode_texts(text_batch(self.train, partner_ids[share(len(partner_ids))]).to(device))
        partner_vectors = partners.gathered().vectors
        anchor_vectors = texts.vectors[torch.from_numpy(kept).to(device)]
        anchor_langs, partner_langs = self.train.langs[indices[kept]], self.train.langs[partner_ids]
        low, high = np.minimum(anchor_langs, partner_langs), np.maximum(anchor_langs, partner_langs)
        images = torch.from_numpy(self.train.image_rows[partner_ids]).to(device)
        total = texts.vectors.new_zeros(())
        for first_lang, second_lang in sorted(set(zip(low.tolist(), high.tolist(), strict=True))):
            rows = np.flatnonzero((low == first_lang) & (high == second_lang))
            picked = torch.from_numpy(rows).to(device)
            anchor_first = torch.from_numpy(anchor_langs[rows] == first_lang).to(device).unsqueeze(1)
            first = torch.where(anchor_first, anchor_vectors[picked], partner_vectors[picked])  # the G side
            second = torch.where(anchor_first, partner_vectors[picked], anchor_vectors[picked])  # the E side
            sims = model.text_similarity(Embedded(first), Embedded(second)).float()
            total = total + text_ranking_loss(sims, images[picked], self.margin)
        return self.weight * total
