"""DAN, Dual Attention Networks for matching (m-DAN; Nam, Ha, Kim, CVPR 2017), on region features ("DAN*").

Text: a Bi-LSTM gives one state u_t per token. Image: the K region features v_n as they come (the original
used 14x14 ResNet grid cells; DAN* of Huang et al. 2020 swaps in the detector regions). Step 0 pools
uniformly, u^(0) = mean_t u_t and v^(0) = tanh(P^(0) mean_n v_n), and starts one memory per modality,
m^(0) = x^(0). Each step k = 1..steps has its own weights and attends within each modality, guided by that
modality's memory:

    h_n = tanh(W_v v_n) * tanh(W_vm m_v^(k-1)),  alpha_n = softmax_n(w_vh . h_n),  v^(k) = tanh(P^(k) sum_n alpha_n v_n)
    h_t = tanh(W_u u_t) * tanh(W_um m_u^(k-1)),  alpha_t = softmax_t(w_uh . h_t),  u^(k) = sum_t alpha_t u_t

then m^(k) = m^(k-1) + x^(k). The score is S = sum_k v^(k) . u^(k), which equals z_v . z_u with
z = [x^(0); ...; x^(steps)], so each modality is embedded on its own and the gallery can be cached.

Deviations from the paper, all for the project's shared ranking loss (margin 0.2 on cosine-like scores):
- ``normalize=True`` (default) l2-normalises each step's vector and divides the concatenation by
  sqrt(steps + 1), so S is the mean of the per-step cosines, in [-1, 1]. The original scores unnormalised dot
  products and trains with margin 100; ``normalize=False`` gives that score back.
- The paper adds the forward and backward LSTM states; we average them (half the sum, absorbed by W_u).
- The paper reports dropout 0.5 without saying where; ``dropout`` applies it to the token states and region
  features that every attention step reads, and is 0 by default.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from common.checks import check, check_choice, check_fraction, check_positive
from retrieval.encoders import RNNKind, TextEncoder, l2norm, masked_mean, masked_softmax
from retrieval.model import Embedded, ImageBatch, RetrievalModel, TextBatch


@dataclass(frozen=True)
class DANConfig:
    """Attributes:
    word_dim: Word vector size.
    hidden: Size of the LSTM states (each direction), attention layers and every step's vector (Nam et al.
        and Huang et al. 2020: 512 everywhere).
    steps: Attention steps after step 0 (the paper's K = 2), so the embedding holds steps + 1 vectors.
    rnn: Text encoder cell (the paper: LSTM).
    bidirectional: Run a backward RNN too (the paper: yes); the two directions are averaged.
    dropout: Dropout on token states and region features before the attention steps (see the module notes).
    normalize: Score the mean of per-step cosines instead of the sum of raw dot products (see the module notes).
    """

    word_dim: int = 300
    hidden: int = 512
    steps: int = 2
    rnn: RNNKind = "lstm"
    bidirectional: bool = True
    dropout: float = 0.0
    normalize: bool = True

    def __post_init__(self) -> None:
        check_positive("word_dim", self.word_dim)
        check_positive("hidden", self.hidden)
        check(self.steps >= 0, "steps", self.steps, "steps >= 0")
        check_choice("rnn", self.rnn, RNNKind)
        check_fraction("dropout", self.dropout, below_one=True)


class VisualStep(nn.Module):
    """One visual attention step k >= 1: memory-guided attention over regions, then P^(k) and tanh."""

    def __init__(self, region_dim: int, hidden: int) -> None:
        super().__init__()
        self.item = nn.Linear(region_dim, hidden)  # W_v
        self.memory = nn.Linear(hidden, hidden)  # W_vm
        self.score = nn.Linear(hidden, 1)  # w_vh
        self.project = nn.Linear(region_dim, hidden)  # P^(k)

    def forward(self, regions: Tensor, mask: Tensor, memory: Tensor) -> Tensor:
        """(B, K, D) regions, (B, K) mask, (B, hidden) memory m_v^(k-1) -> (B, hidden) v^(k)."""
        joint = torch.tanh(self.item(regions)) * torch.tanh(self.memory(memory)).unsqueeze(1)  # (B, K, hidden)
        weights = masked_softmax(self.score(joint).squeeze(-1), mask)  # (B, K)
        return torch.tanh(self.project((weights.unsqueeze(-1) * regions).sum(1)))


class TextualStep(nn.Module):
    """One textual attention step k >= 1: memory-guided attention over token states, no projection."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.item = nn.Linear(hidden, hidden)  # W_u
        self.memory = nn.Linear(hidden, hidden)  # W_um
        self.score = nn.Linear(hidden, 1)  # w_uh

    def forward(self, states: Tensor, mask: Tensor, memory: Tensor) -> Tensor:
        """(B, L, hidden) states, (B, L) mask, (B, hidden) memory m_u^(k-1) -> (B, hidden) u^(k)."""
        joint = torch.tanh(self.item(states)) * torch.tanh(self.memory(memory)).unsqueeze(1)  # (B, L, hidden)
        weights = masked_softmax(self.score(joint).squeeze(-1), mask)  # (B, L)
        return (weights.unsqueeze(-1) * states).sum(1)


class DAN(RetrievalModel):
    """m-DAN with region features; the embedding of either modality is the concatenation of its step vectors."""

    name = "dan"
    default_loss = "harder"

    def __init__(self, config: DANConfig, *, vocab_size: int, languages: int, region_dim: int) -> None:
        super().__init__()
        if config.steps < 0:
            raise ValueError(f"steps must be >= 0, got {config.steps}")
        self.config = config
        self.text_encoder = TextEncoder(
            vocab_size,
            config.word_dim,
            config.hidden,
            rnn=config.rnn,
            bidirectional=config.bidirectional,
            combine="mean",
        )
        self.dropout = nn.Dropout(config.dropout)
        self.image_start = nn.Linear(region_dim, config.hidden)  # P^(0)
        self.visual_steps = nn.ModuleList(VisualStep(region_dim, config.hidden) for _ in range(config.steps))
        self.textual_steps = nn.ModuleList(TextualStep(config.hidden) for _ in range(config.steps))

    def encode_images(self, images: ImageBatch) -> Embedded:
        """(B, K, D) regions -> Embedded((B, (steps + 1) * hidden)) z_v."""
        regions = self.dropout(images.regions)
        vector = torch.tanh(self.image_start(masked_mean(regions, images.mask)))  # v^(0)
        memory = vector
        vectors = [vector]
        for step in self.visual_steps:
            vector = step(regions, images.mask, memory)
            memory = memory + vector
            vectors.append(vector)
        return Embedded(self._join(vectors))

    def encode_texts(self, texts: TextBatch) -> Embedded:
        """(B, L) tokens -> Embedded((B, (steps + 1) * hidden)) z_u."""
        states, mask = self.text_encoder(texts.tokens, texts.lengths, texts.host_lengths)
        states = self.dropout(states)
        vector = masked_mean(states, mask)  # u^(0)
        memory = vector
        vectors = [vector]
        for step in self.textual_steps:
            vector = step(states, mask, memory)
            memory = memory + vector
            vectors.append(vector)
        return Embedded(self._join(vectors))

    def _join(self, vectors: list[Tensor]) -> Tensor:
        """steps + 1 vectors of (B, hidden) -> (B, (steps + 1) * hidden), so that z_v . z_u = S."""
        if not self.config.normalize:
            return torch.cat(vectors, dim=-1)
        # Unit steps scaled by 1/sqrt(n): the dot product of two such embeddings is the mean of n cosines.
        return torch.cat([l2norm(vector) for vector in vectors], dim=-1) / len(vectors) ** 0.5
