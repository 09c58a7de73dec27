"""SAN, the simplest attention network (Huang et al. 2020, section 3.2, Eq. 7).

Each modality has one learned context vector c. Token (or region) i gets the weight
alpha_i = softmax_i(f_c(c)^T f_z(z_i)), where f_c and f_z are one-layer perceptrons (linear + tanh), and
the item is z' = sum_i alpha_i z_i, l2-normalised; image-caption similarity is the cosine. Text tokens z come
from the Bi-LSTM, regions from a linear projection of the region features; all hidden sizes are 512.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from common.checks import check_choice, check_positive
from retrieval.encoders import ImageEncoderKind, RegionEncoder, RNNKind, TextEncoder, l2norm, masked_softmax
from retrieval.model import Embedded, ImageBatch, RetrievalModel, TextBatch


@dataclass(frozen=True)
class SANConfig:
    """Attributes:
    word_dim: Word vector size.
    hidden: Size of token states, region projections, context vectors and the joint space.
    rnn: Text encoder cell (the paper: Bi-LSTM).
    image_encoder: ``linear`` (the paper) or ``mlp`` region projection.
    """

    word_dim: int = 300
    hidden: int = 512
    rnn: RNNKind = "lstm"
    image_encoder: ImageEncoderKind = "linear"

    def __post_init__(self) -> None:
        check_positive("word_dim", self.word_dim)
        check_positive("hidden", self.hidden)
        check_choice("rnn", self.rnn, RNNKind)
        check_choice("image_encoder", self.image_encoder, ImageEncoderKind)


class ContextAttention(nn.Module):
    """Eq. 7: attention of one learned context vector over a set, pooled by the weights."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.context = nn.Parameter(torch.randn(dim) * dim**-0.5)
        self.f_context = nn.Sequential(nn.Linear(dim, dim), nn.Tanh())
        self.f_item = nn.Sequential(nn.Linear(dim, dim), nn.Tanh())

    def forward(self, items: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """(B, L, d) items, (B, L) mask -> (B, d) pooled, (B, L) weights."""
        scores = self.f_item(items) @ self.f_context(self.context)
        weights = masked_softmax(scores, mask)
        return (weights.unsqueeze(-1) * items).sum(1), weights


class SAN(RetrievalModel):
    name = "san"

    def __init__(self, config: SANConfig, *, vocab_size: int, languages: int, region_dim: int) -> None:
        super().__init__()
        self.config = config
        self.text_encoder = TextEncoder(vocab_size, config.word_dim, config.hidden, rnn=config.rnn)
        self.region_encoder = RegionEncoder(region_dim, config.hidden, kind=config.image_encoder)
        self.text_attention = ContextAttention(config.hidden)
        self.image_attention = ContextAttention(config.hidden)

    def encode_images(self, images: ImageBatch) -> Embedded:
        pooled, _ = self.image_attention(self.region_encoder(images.regions, images.mask), images.mask)
        return Embedded(l2norm(pooled))

    def encode_texts(self, texts: TextBatch) -> Embedded:
        states, mask = self.text_encoder(texts.tokens, texts.lengths, texts.host_lengths)
        pooled, _ = self.text_attention(states, mask)
        return Embedded(l2norm(pooled))
