"""PARALLEL-EmbN, the separate-language-branch baseline of the MULE paper (Kim et al. AAAI 2020, Tables 2-5).

The paper builds it after Gella et al. (2017): EmbN (Wang et al. 2019) with one image branch shared by all
languages and a separate language branch per language. Each branch has its own word vectors, recurrent layer
and output layer: word vectors -> unidirectional GRU -> last real state -> linear -> l2norm, the text
branch MULE's EmbN uses, without the universal embedding layer. Nothing is shared between languages except
the image branch and the joint space, so language-specific parameters grow linearly with the number of
languages (the paper's parameter comparison: 4 x 6.8M on Multi30K). The word vectors of all languages live
in one table, which is the same as one table per language because the project's vocabulary keys every word
by its language; only the unknown-word and padding rows are common to all languages.

Loss: EmbN's top-K ranking loss (``topk`` in :mod:`retrieval.losses`) plus, from :meth:`ParallelEmbN.extra_losses`,
EmbN's within-language neighbourhood constraint (``neighbourhood``, lambda 0.05), as in MULE (see
:mod:`retrieval.zoo.mule` for the distance and hinge conventions). No cross-lingual constraint, language
classifier or pre-training: the paper lists those as MULE's contributions (Table 2(d)), and its description
of PARALLEL-EmbN names only the shared image branch and the separate language branches (Gella et al.'s
caption-caption term of PARALLEL-SYM/ASYM is therefore left out).

Differences from the paper's setting: region features masked-mean pooled instead of a global ResNet feature,
a 512-unit GRU instead of a 1024-unit LSTM/GRU, as in :mod:`retrieval.zoo.mule`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from common.checks import check, check_choice, check_fraction, check_positive
from retrieval.encoders import RNNKind, TextEncoder, WordEmbedding, l2norm, masked_mean
from retrieval.losses import within_language_loss
from retrieval.model import BatchContext, Embedded, ImageBatch, RetrievalModel, TextBatch


@dataclass(frozen=True)
class ParallelEmbNConfig:
    """Attributes:
    word_dim: Word vector size (FastText: 300).
    rnn: Cell of each language branch.
    hidden: Units of each branch's recurrent layer (the project's 512).
    embed_dim: Size of the joint image-text space.
    image_hidden: Width of the image branch's first layer (EmbN: 2048).
    dropout: Dropout after the image branch's first layer.
    neighbourhood: Weight of EmbN's within-language neighbourhood constraint (lambda, 0.05).
    margin: m of the neighbourhood hinge on Euclidean distances.
    topk: K, the most violated hinges kept per anchor.
    """

    word_dim: int = 300
    rnn: RNNKind = "gru"
    hidden: int = 512
    embed_dim: int = 512
    image_hidden: int = 2048
    dropout: float = 0.5
    neighbourhood: float = 0.05
    margin: float = 0.05
    topk: int = 10

    def __post_init__(self) -> None:
        for name in ("word_dim", "hidden", "embed_dim", "image_hidden", "topk"):
            check_positive(name, getattr(self, name))
        check_choice("rnn", self.rnn, RNNKind)
        check_fraction("dropout", self.dropout, below_one=True)
        for name in ("neighbourhood", "margin"):
            check(getattr(self, name) >= 0, name, getattr(self, name), f"{name} >= 0")


# Copied from retrieval.zoo.mule.ImageBranch
class ImageBranch(nn.Module):
    """EmbN's image branch over the masked mean of the regions: (B, K, D), (B, K) -> (B, embed_dim) l2-normed."""

    def __init__(self, region_dim: int, hidden: int, embed_dim: int, dropout: float) -> None:
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(region_dim, hidden),
            nn.BatchNorm1d(hidden, eps=1e-5),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(hidden, embed_dim),
        )

    def forward(self, regions: Tensor, mask: Tensor) -> Tensor:
        return l2norm(self.layers(masked_mean(regions, mask)))


# Copied from retrieval.zoo.mule.apply_by_language
def apply_by_language(langs: Tensor, languages: int, branch: Callable[[int, Tensor], Tensor]) -> Tensor:
    """Run ``branch(lang, rows)`` on the (n_lang,) indices ``rows`` of each language's captions and put the
    (n_lang, ...) outputs back in batch order: (B, ...).

    Raises:
        ValueError: a language index outside [0, languages).
    """
    if bool(((langs < 0) | (langs >= languages)).any()):
        raise ValueError(f"caption language indices must lie in [0, {languages}), got {langs.unique().tolist()}")
    outputs, order = [], []
    for lang in torch.unique(langs).tolist():
        rows = torch.nonzero(langs == lang).flatten()
        outputs.append(branch(lang, rows))
        order.append(rows)
    inverse = torch.argsort(torch.cat(order))
    return torch.cat(outputs)[inverse]


# Copied from retrieval.zoo.mule.last_state
def last_state(states: Tensor, lengths: Tensor) -> Tensor:
    """(B, L, H) recurrent states -> (B, H) the state at each caption's last real token."""
    rows = torch.arange(states.shape[0], device=states.device)
    return states[rows, lengths - 1]


# Copied from retrieval.zoo.mule.SentenceBranch
class SentenceBranch(nn.Module):
    """Unidirectional RNN over (B, L, in_dim) vectors -> last real state -> linear: (B, out_dim), not normed."""

    def __init__(self, in_dim: int, hidden: int, out_dim: int, rnn: RNNKind) -> None:
        super().__init__()
        # Only the recurrent part of TextEncoder is used (encode_embedded); a one-row word table keeps it
        # from holding a vocabulary-sized table that never trains.
        self.encoder = TextEncoder(1, in_dim, hidden, rnn=rnn, bidirectional=False)
        self.output = nn.Linear(hidden, out_dim)

    def forward(self, vectors: Tensor, lengths: Tensor) -> Tensor:
        states, _ = self.encoder.encode_embedded(vectors, lengths)
        return self.output(last_state(states, lengths))


class ParallelEmbN(RetrievalModel):
    """PARALLEL-EmbN; see the module docstring. ``branches[l]`` is language l's recurrent and output layer."""

    name = "parallel_embn"
    default_loss = "topk"

    def __init__(self, config: ParallelEmbNConfig, *, vocab_size: int, languages: int, region_dim: int) -> None:
        super().__init__()
        self.config = config
        self.languages = languages
        # The vocabulary keeps each language's words apart ("de:die" and "en:die" are different ids), so one
        # table holds a separate word table per language without (languages - 1) unused copies of every row.
        self.word_embedding = WordEmbedding(vocab_size, config.word_dim)
        self.branches = nn.ModuleList(
            SentenceBranch(config.word_dim, config.hidden, config.embed_dim, config.rnn) for _ in range(languages)
        )
        self.image_branch = ImageBranch(region_dim, config.image_hidden, config.embed_dim, config.dropout)

    def encode_images(self, images: ImageBatch) -> Embedded:
        return Embedded(self.image_branch(images.regions, images.mask))

    def encode_texts(self, texts: TextBatch) -> Embedded:
        words = self.word_embedding(texts.tokens)  # (B, L, word_dim)
        sentences = apply_by_language(
            texts.langs, self.languages, lambda lang, rows: self.branches[lang](words[rows], texts.lengths[rows])
        )
        return Embedded(l2norm(sentences))

    def extra_losses(self, images: Embedded, texts: Embedded, context: BatchContext) -> dict[str, Tensor]:
        config = self.config
        if not config.neighbourhood:
            return {}
        loss = within_language_loss(
            texts.vectors, context.caption_image, context.langs, k=config.topk, margin=config.margin
        )
        return {} if loss is None else {"neighbourhood": config.neighbourhood * loss}
