"""Building blocks every retrieval model shares: word embeddings, recurrent text encoder, region encoder.

All encoders take padded batches with explicit masks; padding never changes an output (the tests check
this by comparing a padded batch with each item run alone).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Literal

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

from common.errors import InputError
from common.runtime import host_to_device

RNNKind = Literal["lstm", "gru"]
Combine = Literal["concat", "mean"]
ImageEncoderKind = Literal["linear", "mlp"]

EPS = 1e-8


def l2norm(x: Tensor, dim: int = -1, eps: float = EPS) -> Tensor:
    """``x`` scaled to unit L2 norm along ``dim`` (an all-zero vector stays zero)."""
    return x / (x.norm(dim=dim, keepdim=True) + eps)


def masked_softmax(scores: Tensor, mask: Tensor, dim: int = -1) -> Tensor:
    """Softmax over ``dim`` where ``mask`` is False contributes nothing (weights there are exactly 0)."""
    scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = torch.softmax(scores, dim=dim)
    return weights * mask.to(weights.dtype)


def masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    """Mean of (B, L, D) ``x`` over the positions where (B, L) ``mask`` is True."""
    weights = mask.to(x.dtype).unsqueeze(-1)
    return (x * weights).sum(1) / weights.sum(1).clamp(min=1.0)


class WordEmbedding(nn.Embedding):
    """Word vectors (id 0 = padding, always zero), uniform(-0.1, 0.1) like SCAN/VSE++, or from FastText."""

    def __init__(self, vocab_size: int, dim: int) -> None:
        super().__init__(vocab_size, dim, padding_idx=0)
        with torch.no_grad():
            self.weight.uniform_(-0.1, 0.1)
            self.weight[0].zero_()

    def load_vectors(self, words: Mapping[str, int], path: Path) -> int:
        """Copy the vectors of ``words`` (word -> id) found in the FastText ``.vec`` file at ``path``.

        Returns:
            How many of ``words`` the file had.

        Raises:
            InputError: a missing file, a malformed line (file and line number named), or a vector size that
                differs from this embedding's dimension.
        """
        if not path.is_file():
            raise InputError(f"{path}: FastText vector file not found")
        found = 0
        with path.open(encoding="utf-8", errors="replace") as lines, torch.no_grad():
            for number, line in enumerate(lines, start=1):
                parts = line.rstrip("\n").rstrip(" ").split(" ")
                if number == 1 and len(parts) == 2 and all(part.isdigit() for part in parts):
                    if int(parts[1]) != self.embedding_dim:
                        raise InputError(
                            f"{path}: vectors have {parts[1]} dimensions, the model's word_dim is {self.embedding_dim}"
                        )
                    continue
                index = words.get(parts[0])
                if index is None:
                    continue
                if len(parts) != self.embedding_dim + 1:
                    raise InputError(
                        f"{path}:{number}: expected a word and {self.embedding_dim} numbers, got {len(parts) - 1}"
                    )
                try:
                    self.weight[index] = torch.tensor([float(value) for value in parts[1:]])
                except ValueError as error:
                    raise InputError(f"{path}:{number}: {error}") from error
                found += 1
        return found


class TextEncoder(nn.Module):
    """Word embeddings -> (bi)directional LSTM or GRU -> one state per token.

    Args:
        vocab_size: Rows of the embedding table.
        word_dim: Word vector size (300 in the papers).
        hidden: Size of each output state: with ``combine="concat"`` each direction has ``hidden // 2`` units,
            with ``"mean"`` (SCAN's averaging of the halves) each has ``hidden``.
        rnn: ``"lstm"`` or ``"gru"``.
        bidirectional: Run a backward RNN too.
        combine: How the two directions make one state.
    """

    def __init__(
        self,
        vocab_size: int,
        word_dim: int,
        hidden: int,
        *,
        rnn: RNNKind = "lstm",
        bidirectional: bool = True,
        combine: Combine = "concat",
    ) -> None:
        super().__init__()
        if bidirectional and combine == "concat" and hidden % 2:
            raise ValueError(f"hidden={hidden} must be even to concatenate two directions")
        units = hidden // 2 if bidirectional and combine == "concat" else hidden
        self.embedding = WordEmbedding(vocab_size, word_dim)
        rnn_type = nn.LSTM if rnn == "lstm" else nn.GRU
        self.rnn = rnn_type(word_dim, units, batch_first=True, bidirectional=bidirectional)
        self.bidirectional = bidirectional
        self.combine = combine
        self.hidden = hidden

    def forward(self, tokens: Tensor, lengths: Tensor, host_lengths: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """(B, L) token ids and (B,) lengths -> (B, L, hidden) states (zero at padding), (B, L) bool mask.

        ``host_lengths``: the same lengths on the CPU, when the caller has them (packing needs them there).
        """
        return self.encode_embedded(self.embedding(tokens), lengths, host_lengths)

    def encode_embedded(
        self, embedded: Tensor, lengths: Tensor, host_lengths: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """The recurrent part alone, for models that transform word vectors first (MULE)."""
        steps = embedded.shape[1]
        if host_lengths is None:  # .cpu() of lengths on a GPU makes the host wait for the device
            packed = pack_padded_sequence(embedded, lengths.cpu(), batch_first=True, enforce_sorted=False)
        else:
            # pack_padded_sequence(enforce_sorted=False) sorts the lengths the same way, then copies the order to
            # the device with a blocking copy; this copy does not make the host wait
            sorted_lengths, order = torch.sort(host_lengths, descending=True)
            order_here = host_to_device(order, embedded.device)
            sorted_packed = pack_padded_sequence(embedded.index_select(0, order_here), sorted_lengths, batch_first=True)
            packed = PackedSequence(sorted_packed.data, sorted_packed.batch_sizes, order_here)
        output, _ = self.rnn(packed)
        states, _ = pad_packed_sequence(output, batch_first=True, total_length=steps)
        if self.bidirectional and self.combine == "mean":
            forward, backward = states.chunk(2, dim=-1)
            states = (forward + backward) / 2
        mask = torch.arange(steps, device=lengths.device).unsqueeze(0) < lengths.unsqueeze(1)
        return states, mask


class RegionEncoder(nn.Module):
    """Per-region projection of (B, K, D) features: linear (SCAN, Xavier init) or a two-layer MLP.

    Padded regions come out as zeros, so they cannot leak into sums even without a mask.
    """

    def __init__(self, region_dim: int, hidden: int, *, kind: ImageEncoderKind = "linear") -> None:
        super().__init__()
        self.kind = kind
        if kind == "linear":
            linear = nn.Linear(region_dim, hidden)
            nn.init.xavier_uniform_(linear.weight)
            nn.init.zeros_(linear.bias)
            self.project: nn.Module = linear
        else:
            self.project = nn.Sequential(nn.Linear(region_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden))

    def forward(self, regions: Tensor, mask: Tensor) -> Tensor:
        return self.project(regions) * mask.unsqueeze(-1).to(regions.dtype)
