"""Multi-head attention with diversity (Huang, Chang, Hauptmann, EMNLP 2019, section 3).

Encoders: a Bi-LSTM gives token states g_i in R^H; a linear layer maps each detector region to v_m in R^H.
Each modality has K attention heads (Eq. 1-2); head k has a learned context vector c^k and weights
W_c^k (H_c x H_attn), W^k (H x H_attn), no biases:

    a_i^k = softmax_i( tanh(W_c^k c^k)^T tanh(W^k g_i) ),    g^k = sum_i a_i^k g_i.

The item is the concatenation of its heads, g = [g^1 | ... | g^K], and image-caption similarity is the
cosine of two concatenations (the s(a, b) of Eq. 3), so each modality is embedded on its own and the
gallery can be cached. The paper's text-side heads belong to one language (W_g^k, c_g^k for German, the
same again for English); ``language_attention`` keeps one set of text heads per language.

Diversity (Eq. 5-7). Between two sets X, Y of parallel items (an item and its own counterpart p):

    l^D(X, Y) = sum_p sum_k sum_{r != k} [h(s(x_p^k, y_p^r))]_+,

summed over the intra-modal/lingual terms l^D(V,V) + l^D(E,E) + l^D(G,G) and the cross-modal/lingual terms
l^D(V,E) + l^D(V,G) + l^D(G,E) (Eq. 6; more languages add terms the same way, footnote 1), and weighted by
beta in the total loss (Eq. 7). In a batch of this project the pairs p are: each image with itself (V,V);
each caption with itself (E,E), (G,G); each caption with its image (V,E), (V,G); each pair of captions of
the same image in different languages, once per unordered pair (G,E). The sums are sums, like the ranking
loss of Eq. 3 that beta = 1 balances them against.

The hinge h. Eq. 5 is typeset [alpha_D - s(v_p^k, e_p^{k != r})]_+ with s the cosine (Eq. 3), which would
pull the heads of an item together until their cosine reaches alpha_D; the text says the opposite ("increase
the distance (up to a diversity margin alpha_D) between attended embeddings from different attention heads"),
and so does Figure 1. ``diversity_hinge="below_margin"`` (default) follows the text: h = s - alpha_D, different
heads are pushed apart until their cosine is at most alpha_D. (Reading s in Eq. 5 as the cosine distance
1 - s gives the same hinge with the margin 1 - alpha_D, i.e. ``diversity_margin=0.9``.) ``"as_printed"``
is h = alpha_D - s, the equation as typeset.

Hyper-parameters from section 4.1: K = 3, H = 512, H_c = 512 ("the same dimension is shared by all the
context vectors"), alpha_D = 0.1, beta = 1.0, and alpha = 0.2 for the ranking terms (``retrieval.objective.margin``).
gamma = 0.6 weighs the cross-lingual text ranking term l(G, E) of Eq. 4 (``text_ranking_weight``; default 0, off;
:mod:`retrieval.joint` says how the trainer pairs the captions). H_attn is not given; we use H. Deviations: one
word-embedding table and one Bi-LSTM for every language (the project's vocabulary is shared and FastText vectors go
into one table; the paper has one of each per language, which is the PARALLEL baseline's design).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn

from common.checks import check, check_choice, check_positive, check_range
from retrieval.encoders import ImageEncoderKind, RegionEncoder, RNNKind, TextEncoder, l2norm, masked_softmax
from retrieval.model import BatchContext, Embedded, ImageBatch, RetrievalModel, TextBatch

DiversityHinge = Literal["below_margin", "as_printed"]

HEADS = "heads"  # key of the (N, K, H) per-head vectors in Embedded.extras


@dataclass(frozen=True)
class MultiHeadConfig:
    """Attributes:
    word_dim: Word vector size.
    hidden: H, size of token states, region projections and every head's output.
    heads: K, attention heads per modality (paper: 3).
    attention_dim: H_attn, where context and items meet (not given in the paper; H).
    context_dim: H_c, size of the context vectors (paper: H).
    rnn: Text encoder cell (the paper: Bi-LSTM).
    image_encoder: ``linear`` region projection (the paper's one-layer perceptron) or ``mlp``.
    language_attention: One set of text heads per language, as Eq. 1 (False: shared by all languages).
    diversity_margin: alpha_D (paper: 0.1).
    diversity_weight: beta (paper: 1.0); 0 turns the diversity loss off.
    diversity_hinge: ``below_margin`` or ``as_printed`` (see the module notes).
    text_ranking_weight: gamma of Eq. 4, the cross-lingual text ranking term (:mod:`retrieval.joint`; paper: 0.6);
        0 (default) trains the image-text terms alone.
    """

    word_dim: int = 300
    hidden: int = 512
    heads: int = 3
    attention_dim: int = 512
    context_dim: int = 512
    rnn: RNNKind = "lstm"
    image_encoder: ImageEncoderKind = "linear"
    language_attention: bool = True
    diversity_margin: float = 0.1
    diversity_weight: float = 1.0
    diversity_hinge: DiversityHinge = "below_margin"
    text_ranking_weight: float = 0.0

    def __post_init__(self) -> None:
        for name in ("word_dim", "hidden", "heads", "attention_dim", "context_dim"):
            check_positive(name, getattr(self, name))
        check_choice("rnn", self.rnn, RNNKind)
        check_choice("image_encoder", self.image_encoder, ImageEncoderKind)
        check(self.diversity_margin >= 0, "diversity_margin", self.diversity_margin, "diversity_margin >= 0")
        check(self.diversity_weight >= 0, "diversity_weight", self.diversity_weight, "diversity_weight >= 0")
        check_choice("diversity_hinge", self.diversity_hinge, DiversityHinge)
        check_range("text_ranking_weight", self.text_ranking_weight, 0.0, 100.0)


class ContextHeads(nn.Module):
    """Eq. 1-2 for K heads at once: each head's context vector attends over a set, pooled by its weights."""

    def __init__(self, dim: int, heads: int, attention_dim: int, context_dim: int) -> None:
        super().__init__()
        self.heads = heads
        self.attention_dim = attention_dim
        self.context = nn.Parameter(torch.randn(heads, context_dim) * context_dim**-0.5)  # c^k
        self.context_weight = nn.Parameter(torch.empty(heads, context_dim, attention_dim))  # W_c^k
        self.item_weight = nn.Linear(dim, heads * attention_dim, bias=False)  # W^k of all heads, stacked
        # Xavier-uniform per head (not over the stacked matrix, whose fan-out is K times larger).
        context_bound = (6.0 / (context_dim + attention_dim)) ** 0.5
        item_bound = (6.0 / (dim + attention_dim)) ** 0.5
        nn.init.uniform_(self.context_weight, -context_bound, context_bound)
        nn.init.uniform_(self.item_weight.weight, -item_bound, item_bound)

    def forward(self, items: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """(B, L, d) items, (B, L) mask -> (B, K, d) head outputs, (B, K, L) weights."""
        batch, length, _ = items.shape
        queries = torch.tanh(torch.einsum("hc,hca->ha", self.context, self.context_weight))  # (K, H_attn)
        keys = torch.tanh(self.item_weight(items)).view(batch, length, self.heads, self.attention_dim)
        scores = torch.einsum("blha,ha->bhl", keys, queries)  # (B, K, L)
        weights = masked_softmax(scores, mask.unsqueeze(1))
        return weights @ items, weights


class MultiHeadDiversity(RetrievalModel):
    """Image and caption = l2-normalised concatenation of K attention heads; head diversity as an extra loss."""

    name = "multihead"
    # Eq. 3 is the VSE++ hinge on the hardest negative.
    default_loss = "max_violation"

    def __init__(self, config: MultiHeadConfig, *, vocab_size: int, languages: int, region_dim: int) -> None:
        super().__init__()
        self.config = config
        self.text_encoder = TextEncoder(vocab_size, config.word_dim, config.hidden, rnn=config.rnn)
        self.region_encoder = RegionEncoder(region_dim, config.hidden, kind=config.image_encoder)
        head_args = (config.hidden, config.heads, config.attention_dim, config.context_dim)
        text_sets = languages if config.language_attention else 1
        self.text_attention = nn.ModuleList(ContextHeads(*head_args) for _ in range(text_sets))
        self.image_attention = ContextHeads(*head_args)

    def encode_images(self, images: ImageBatch) -> Embedded:
        """(B, K_regions, D) regions -> Embedded((B, K * H)), extras[HEADS] (B, K, H)."""
        heads, _ = self.image_attention(self.region_encoder(images.regions, images.mask), images.mask)
        return Embedded(l2norm(heads.flatten(1)), extras={HEADS: heads})

    def encode_texts(self, texts: TextBatch) -> Embedded:
        """(B, L) tokens -> Embedded((B, K * H)), extras[HEADS] (B, K, H)."""
        states, mask = self.text_encoder(texts.tokens, texts.lengths, texts.host_lengths)
        heads = self._attend_texts(states, mask, texts.langs)
        return Embedded(l2norm(heads.flatten(1)), extras={HEADS: heads})

    def _attend_texts(self, states: Tensor, mask: Tensor, langs: Tensor) -> Tensor:
        """(B, L, H) states, (B, L) mask, (B,) languages -> (B, K, H), each caption by its language's heads."""
        if len(self.text_attention) == 1:
            return self.text_attention[0](states, mask)[0]
        heads = states.new_zeros(states.shape[0], self.config.heads, states.shape[-1])
        for lang in langs.unique().tolist():
            rows = (langs == lang).nonzero(as_tuple=True)[0]
            heads = heads.index_copy(0, rows, self.text_attention[lang](states[rows], mask[rows])[0])
        return heads

    def text_ranking_weight(self) -> float:
        return self.config.text_ranking_weight

    def extra_losses(self, images: Embedded, texts: Embedded, context: BatchContext) -> dict[str, Tensor]:
        """{"diversity": beta * l^D(V, E, G)} (Eq. 6-7) from the per-head vectors of both encoders."""
        if self.config.diversity_weight == 0:
            return {}
        if HEADS not in images.extras or HEADS not in texts.extras:
            raise ValueError("the diversity loss needs the per-head vectors of encode_images/encode_texts (extras)")
        loss = diversity_loss(
            images.extras[HEADS],
            texts.extras[HEADS],
            context.caption_image,
            context.langs,
            margin=self.config.diversity_margin,
            hinge=self.config.diversity_hinge,
        )
        return {"diversity": self.config.diversity_weight * loss}


def diversity_loss(
    image_heads: Tensor,
    text_heads: Tensor,
    caption_image: Tensor,
    langs: Tensor,
    *,
    margin: float,
    hinge: DiversityHinge = "below_margin",
) -> Tensor:
    """Eq. 6 (unweighted) over a batch; see the module notes for the pairs and the hinge.

    Args:
        image_heads: (n_img, K, H) head outputs of the batch's images.
        text_heads: (n_txt, K, H) head outputs of its captions.
        caption_image: (n_txt,) image index of each caption.
        langs: (n_txt,) language index of each caption.
        margin: alpha_D.
        hinge: ``below_margin`` or ``as_printed``.
    """
    first, second = cross_lingual_pairs(caption_image, langs)
    parallel = [
        (image_heads, image_heads),  # l^D(V, V)
        (text_heads, text_heads),  # l^D(E, E) + l^D(G, G): each caption within its own language
        (image_heads[caption_image], text_heads),  # l^D(V, E) + l^D(V, G)
        (text_heads[first], text_heads[second]),  # l^D(G, E)
    ]
    return torch.stack([_head_pair_hinges(x, y, margin, hinge) for x, y in parallel]).sum()


def cross_lingual_pairs(caption_image: Tensor, langs: Tensor) -> tuple[Tensor, Tensor]:
    """Indices (P,), (P,) of the caption pairs i < j of the same image in different languages."""
    same_image = caption_image.unsqueeze(0) == caption_image.unsqueeze(1)
    other_language = langs.unsqueeze(0) != langs.unsqueeze(1)
    first, second = torch.triu(same_image & other_language, diagonal=1).nonzero(as_tuple=True)
    return first, second


def _head_pair_hinges(x: Tensor, y: Tensor, margin: float, hinge: DiversityHinge) -> Tensor:
    """sum_p sum_k sum_{r != k} of the hinge on s(x_p^k, y_p^r), for (P, K, H) parallel x and y."""
    cosines = l2norm(x) @ l2norm(y).transpose(1, 2)  # (P, K, K): [p, k, r] = s(x_p^k, y_p^r)
    violation = cosines - margin if hinge == "below_margin" else margin - cosines
    other_head = ~torch.eye(cosines.shape[-1], dtype=torch.bool, device=cosines.device)
    return (violation.clamp(min=0.0) * other_head).sum()
