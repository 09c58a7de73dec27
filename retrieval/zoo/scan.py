"""SCAN, stacked cross attention (Lee et al. 2018), the reference's ``func_attention`` batched over pairs.

Images are sets of l2-normalised region vectors (a linear projection of the region features), captions sets of
l2-normalised word vectors (a GRU whose two directions are averaged). An (image, caption) score attends from
each query item to the other modality's items (the context):

1. raw scores A[q, s] = <query_q, context_s> (cosines of unit vectors);
2. ``raw_feature_norm`` over the QUERY axis, per context item (default: LeakyReLU(0.1), then l2-normalise;
   the paper writes max(x, 0), the reference code uses slope 0.1);
3. attention weights w[q, s] = softmax over the CONTEXT axis of ``lambda_softmax`` * A[q, s];
4. attended vector a_q = sum_s w[q, s] context_s, relevance R_q = cosine(query_q, a_q);
5. score = LogSumExp_q(R_q) with ``lambda_lse`` (or the mean of R_q).

``t2i`` queries with the words of the caption (context: the regions), ``i2t`` with the regions (context: the
words). Each score depends only on its pair, so the matrix is computed in blocks of (image chunk x caption
chunk) with batched products; padded words and regions never contribute.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from common.checks import check_choice, check_positive
from retrieval.encoders import EPS, ImageEncoderKind, RegionEncoder, RNNKind, TextEncoder, l2norm
from retrieval.model import Embedded, ImageBatch, RetrievalModel, TextBatch

Direction = Literal["t2i", "i2t"]
Aggregation = Literal["lse", "mean"]
RawFeatureNorm = Literal["clipped_l2norm", "l2norm", "clipped", "softmax", "no_norm"]

# Slope of the reference's clipping (nn.LeakyReLU(0.1)); ReLU would zero every negative raw score.
LEAKY_SLOPE = 0.1


@dataclass(frozen=True)
class SCANConfig:
    """Defaults: the reference's Flickr30K text-to-image LogSumExp model, with the project's 512-d joint space.

    Attributes:
        word_dim: Word vector size.
        hidden: Size of the GRU states, region projections and joint space (Huang et al. 2020 use 512 for
            every model; the SCAN paper used 1024).
        rnn: Text encoder cell (the reference: a GRU, bidirectional with the two halves averaged).
        bidirectional: Run a backward RNN too (the reference's ``--bi_gru``).
        image_encoder: ``linear`` (the reference) or ``mlp`` region projection.
        direction: ``t2i`` (words attend to regions) or ``i2t`` (regions attend to words).
        aggregation: ``lse`` (LogSumExp) or ``mean`` over the query items.
        lambda_lse: Inverse temperature of the LogSumExp aggregation (SCAN's README: 6 for t2i, 5 for i2t on F30K).
        lambda_softmax: Inverse temperature of the attention softmax (SCAN's README: 9 for t2i, 4 for i2t).
        raw_feature_norm: Normalisation of the raw scores over the query axis.
        image_chunk: Images per block when scoring (memory grows with image_chunk * caption_chunk).
        caption_chunk: Captions per block when scoring.
    """

    word_dim: int = 300
    hidden: int = 512
    rnn: RNNKind = "gru"
    bidirectional: bool = True
    image_encoder: ImageEncoderKind = "linear"
    direction: Direction = "t2i"
    aggregation: Aggregation = "lse"
    lambda_lse: float = 6.0
    lambda_softmax: float = 9.0
    raw_feature_norm: RawFeatureNorm = "clipped_l2norm"
    image_chunk: int = 64
    caption_chunk: int = 64

    def __post_init__(self) -> None:
        choices = {
            "rnn": RNNKind,
            "image_encoder": ImageEncoderKind,
            "direction": Direction,
            "aggregation": Aggregation,
            "raw_feature_norm": RawFeatureNorm,
        }
        for name, kind in choices.items():
            check_choice(name, getattr(self, name), kind)
        for name in ("word_dim", "hidden", "lambda_lse", "lambda_softmax", "image_chunk", "caption_chunk"):
            check_positive(name, getattr(self, name))


class SCAN(RetrievalModel):
    """Region and word vectors per item; scores by stacked cross attention in ``config.direction``."""

    name = "scan"
    # Every (image, caption) score needs both sets of vectors: no per-image embedding to cache.
    gallery_cacheable = False
    default_loss = "max_violation"

    def __init__(self, config: SCANConfig, *, vocab_size: int, languages: int, region_dim: int) -> None:
        super().__init__()
        self.config = config
        self.text_encoder = TextEncoder(
            vocab_size,
            config.word_dim,
            config.hidden,
            rnn=config.rnn,
            bidirectional=config.bidirectional,
            combine="mean",
        )
        self.region_encoder = RegionEncoder(region_dim, config.hidden, kind=config.image_encoder)

    def encode_images(self, images: ImageBatch) -> Embedded:
        """(N, K, D) regions -> (N, K, hidden) unit region vectors (zero where padded), mask (N, K)."""
        return Embedded(l2norm(self.region_encoder(images.regions, images.mask)), images.mask)

    def encode_texts(self, texts: TextBatch) -> Embedded:
        """(N, L) tokens -> (N, L, hidden) unit word vectors (zero where padded), mask (N, L)."""
        states, mask = self.text_encoder(texts.tokens, texts.lengths, texts.host_lengths)
        return Embedded(l2norm(states), mask)

    def similarity(self, images: Embedded, texts: Embedded) -> Tensor:
        """(n_img, n_txt) SCAN scores of every pair of (n_img, K, d) region sets and (n_txt, L, d) word sets.

        Every image needs at least one real region and every caption at least one real word.
        """
        if images.mask is None or texts.mask is None:
            raise ValueError("SCAN scores sets of region and word vectors; got an embedding without a mask")
        n_img, n_txt = len(images), len(texts)
        if n_img == 0 or n_txt == 0:
            return images.vectors.new_zeros(n_img, n_txt)
        t2i = self.config.direction == "t2i"
        image_chunk, caption_chunk = self.config.image_chunk, self.config.caption_chunk
        region_sets = [
            ItemSets.of(images.vectors[first : first + image_chunk], images.mask[first : first + image_chunk], t2i)
            for first in range(0, n_img, image_chunk)
        ]
        # Captions of similar length share a block, so each block is cut to its own longest caption.
        order = torch.argsort(texts.mask.sum(1), stable=True)
        columns = []
        for start in range(0, n_txt, caption_chunk):
            index = order[start : start + caption_chunk]
            words = ItemSets.of(texts.vectors[index], texts.mask[index], not t2i)
            if t2i:
                blocks = [self.cross_attention(words, regions) for regions in region_sets]
            else:
                blocks = [self.cross_attention(regions, words).t() for regions in region_sets]
            columns.append(torch.cat(blocks))
        return torch.cat(columns, dim=1)[:, torch.argsort(order)]

    def text_similarity(self, queries: Embedded, texts: Embedded) -> Tensor:
        raise ValueError("SCAN only scores image-caption pairs (cross attention); it has no caption-caption score")

    def cross_attention(self, query: ItemSets, context: ItemSets) -> Tensor:
        """Steps 1-5 for every pair of a block of nq query sets (Q items) and ns context sets (S items) ->
        (ns, nq) scores.

        Every large intermediate has the layout (ns, S, nq, Q) of the one matrix product that scores all
        context-query item pairs of the block: the normalisation over Q runs along contiguous memory and the
        reductions over S are vectorised across the nq * Q columns.
        """
        assert context.gram is not None
        ns, s, d = context.vectors.shape
        nq, q, _ = query.vectors.shape
        raw = (context.vectors.view(ns * s, d) @ query.vectors.view(nq * q, d).t()).view(ns, s, nq, q)
        exps = self.attention_exps(raw, query.mask[None, None], context.mask[:, :, None, None])
        # With unnormalised weights e and their sum z over S, the attended vector is a = sum_s e_s c_s / z, so
        # <query, a> = sum_s e_s raw_s / z and |a|^2 = e^T G e / z^2 with the context's Gram matrix G: no
        # (ns, S, nq, Q, d) or (ns, nq, Q, d) tensor is ever built.
        total = exps.sum(1)  # (ns, nq, Q)
        dot = multiply_into(raw, exps).sum(1) / total  # last use of raw: its memory is free from here on
        flat = exps.view(ns, s, nq * q)
        spread = (
            context.gram @ flat if torch.is_grad_enabled() else torch.bmm(context.gram, flat, out=raw.view_as(flat))
        )
        spread = spread.view_as(exps)
        attended_norm = multiply_into(spread, exps).sum(1).clamp(min=EPS**2).sqrt() / total
        query_norm = query.vectors.norm(dim=-1)  # (nq, Q)
        relevance = dot / (query_norm * attended_norm).clamp(min=EPS)  # the reference's cosine
        return self.aggregate(relevance, query.mask.expand_as(relevance))

    def attention_exps(self, raw: Tensor, query_mask: Tensor, context_mask: Tensor) -> Tensor:
        """Steps 2-3 up to the softmax's normaliser: (ns, S, nq, Q) raw scores -> exp(scores - max over S).

        Padded query items have zero vectors (see :meth:`ItemSets.of`), hence zero raw scores, so they add
        nothing to an l2 norm over Q; padded context items get weight exactly 0.
        """
        kind = self.config.raw_feature_norm
        scores = raw
        if kind in ("clipped_l2norm", "clipped"):
            scores = F.leaky_relu(scores, LEAKY_SLOPE)
        elif kind == "softmax":
            scores = softmax(scores, query_mask, dim=-1)
        factor: Tensor | float = self.config.lambda_softmax
        if kind in ("clipped_l2norm", "l2norm"):
            # l2norm over Q and the softmax temperature in one pass over the block.
            factor = self.config.lambda_softmax / (scores.norm(dim=-1, keepdim=True) + EPS)
        # raw is needed later; a tensor made here is not (no backward needs it either), so what follows may
        # overwrite it.
        scores = scores * factor if scores is raw else multiply_into(scores, factor)
        if not bool(context_mask.all()):
            scores = scores.masked_fill_(~context_mask, torch.finfo(scores.dtype).min)
        # The result does not depend on the shift: a constant taken out of the graph.
        return scores.sub_(scores.detach().amax(dim=1, keepdim=True)).exp_()

    def aggregate(self, relevance: Tensor, mask: Tensor) -> Tensor:
        """(ns, nq, Q) relevance -> (ns, nq): LogSumExp or mean over the real query items."""
        if self.config.aggregation == "mean":
            return fill_padding(relevance, mask, 0.0).sum(-1) / mask.sum(-1)
        scale = self.config.lambda_lse
        return torch.logsumexp(fill_padding(relevance * scale, mask, float("-inf")), dim=-1) / scale


class ItemSets(NamedTuple):
    """A chunk of region or word sets ready for :meth:`SCAN.cross_attention`.

    Attributes:
        vectors: (n, L, d) contiguous, zero at padded positions.
        mask: (n, L) bool.
        gram: (n, L, L) inner products of each set's vectors, for sets used as the attention's context.
    """

    vectors: Tensor
    mask: Tensor
    gram: Tensor | None

    @staticmethod
    def of(vectors: Tensor, mask: Tensor, context: bool) -> ItemSets:
        """The sets cut after the last position real in any of them, padding zeroed, Gram matrices if
        ``context``."""
        used = torch.nonzero(mask.any(0))
        extent = int(used.max()) + 1 if len(used) else 1
        mask = mask[:, :extent]
        vectors = vectors[:, :extent].masked_fill(~mask.unsqueeze(-1), 0.0).contiguous()
        return ItemSets(vectors, mask, vectors @ vectors.transpose(1, 2) if context else None)


def multiply_into(x: Tensor, y: Tensor | float) -> Tensor:
    """``x * y``, written into ``x`` (a temporary of the caller) when autograd is off: one allocation of a
    block's size less, and on CPU the page faults of a fresh allocation cost as much as the product itself."""
    return x * y if torch.is_grad_enabled() else x.mul_(y)


def fill_padding(x: Tensor, mask: Tensor, value: float) -> Tensor:
    """``x`` with ``value`` where the broadcastable ``mask`` is False (unchanged, no copy, if all is real)."""
    return x if bool(mask.all()) else x.masked_fill(~mask, value)


def softmax(scores: Tensor, mask: Tensor, dim: int) -> Tensor:
    """Softmax over ``dim`` in which positions where ``mask`` is False get weight exactly 0.

    exp(finfo.min - max) underflows to exactly 0, so no second pass over the weights is needed as long as
    every softmax has a real position.
    """
    if bool(mask.all()):
        return torch.softmax(scores, dim=dim)
    return torch.softmax(scores.masked_fill(~mask, torch.finfo(scores.dtype).min), dim=dim)
