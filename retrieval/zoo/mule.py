"""MULE, the Multimodal Universal Language Embedding (Kim et al. AAAI 2020), on EmbN's two-branch network.

Text: word vectors -> a linear layer of the caption's language (no activation) into the universal embedding
(MULE, ``mule_dim``) -> a GRU shared by all languages -> its last valid state -> a shared linear layer ->
l2norm. Images: EmbN's branch (Wang et al. 2019), Linear -> BatchNorm -> ReLU -> Dropout -> Linear -> l2norm.
Image-caption similarity is the cosine; the ranking loss is EmbN's top-K loss (``topk`` in
:mod:`retrieval.losses`).

:meth:`MULE.extra_losses` adds, on Euclidean distances between l2-normalised vectors,
d(x, y) = sqrt(|x|^2 - 2 x.y + |y|^2 + 1e-4) (= sqrt(2 - 2 cos + 1e-4)), each already weighted:

- ``uni_align`` and ``embed_align``, the multi-layer neighbourhood constraints (Eq. 1): for each pair of
  languages a < b in the batch, every a-caption is an anchor; its positive is the farthest b-caption of the
  same image, its negatives are the b-captions of other images; the K most violated hinges
  [m + d(anchor, positive) - d(anchor, negative)]_+ of each anchor are averaged, then the pairs. ``uni_align``
  works on the final sentence embeddings, ``embed_align`` on the l2-normalised mean of the MULE word
  embeddings (the paper's u_i).
- ``neighbourhood``: EmbN's within-language neighbourhood constraint (its "sent_only_loss"), the same hinge
  inside one language, the anchor itself counted among its same-image captions; averaged over languages.
- ``language_classifier`` (Eq. 2 and 4): a linear classifier predicts each caption's language from u_i,
  through a gradient reversal layer whose strength follows the DANN schedule
  (2 / (1 + exp(-10 p)) - 1) * domain_adapt (p = training progress); the classifier minimises the
  cross-entropy, the MULE layers maximise it. The loss is also weighted by domain_adapt, as in the reference.

Pre-training (the paper's LP, :meth:`MULE.pretrain_loss`): the cross-lingual constraint on u_i alone
(unweighted, as in the reference), on caption batches of several languages, for ``pretrain_epochs`` epochs
before the image-text training. Word vectors are frozen (detached), and nothing after the MULE layers is
part of the loss, so only the language-specific MULE layers learn, as in the reference's pre-training graph.

Differences from the reference code (VisionLearningGroup/MULE, TensorFlow 1):
- Images are K region features, masked-mean pooled before EmbN's image branch; the reference feeds one
  global 2048-d ResNet-152 feature per image.
- The GRU has 512 units (the project's hidden size; the reference: 1024; the paper says an LSTM).
- One word table instead of one per language; the project's vocabulary keys every word by its language, so
  only the unknown-word and padding rows are common to all languages.
- The mean MULE embedding averages real words only; the reference sums every position, so padding adds
  the FC bias to the sum.
- Hinges are averaged over the ones kept (an anchor with fewer than K negatives keeps those it has), the
  convention of :mod:`retrieval.losses`; it equals the reference's mean whenever every anchor has K
  negatives. Anchors without a same-image caption in the other language are skipped (reference batches
  always have one). Like the reference, cross-lingual anchors come from the lower language index only.
- The language classifier loss is the mean over the batch's languages of each language's mean
  cross-entropy (the reference: the same, with equally many captions per language); it and the
  cross-lingual terms are left out of batches with a single language.
- The reference declares L2 regularisers (0.005) on its FC layers but never adds them to the loss, so there
  are none here. Its drift penalty on fine-tuned FastText vectors (embed_reg 5e-7) is not implemented.
- BatchNorm keeps PyTorch's momentum 0.1; the reference's TF momentum=0.1 means a running average that
  keeps 10% of the old value (PyTorch momentum 0.9). Layers use PyTorch's default initialisation except the
  language classifier (Glorot, as in the reference).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from common.checks import check, check_choice, check_fraction, check_positive
from retrieval.encoders import RNNKind, TextEncoder, WordEmbedding, l2norm, masked_mean
from retrieval.losses import mean_of, neighbourhood_loss, within_language_loss
from retrieval.model import BatchContext, Embedded, ImageBatch, RetrievalModel, TextBatch

# Inside the square root of EmbN's distances: keeps the gradient finite where two vectors coincide.


@dataclass(frozen=True)
class MULEConfig:
    """Attributes:
    word_dim: Word vector size (FastText: 300).
    mule_dim: Size of the universal embedding, the output of the language-specific FC layers.
    rnn: Cell of the shared text branch (the reference: GRU).
    hidden: Units of that recurrent layer (the project's 512; the reference: 1024).
    embed_dim: Size of the joint image-text space.
    image_hidden: Width of the image branch's first layer (EmbN: 2048).
    dropout: Dropout after the image branch's first layer.
    uni_align: Weight of the cross-lingual neighbourhood constraint on the final sentence embeddings.
    embed_align: Weight of the same constraint on the mean MULE embeddings.
    neighbourhood: Weight of EmbN's within-language neighbourhood constraint (lambda, 0.05).
    domain_adapt: Weight of the adversarial language classifier and scale of its gradient reversal (the
        reference: 1e-6 on Multi30K, 1e-5 on COCO; Multi30K is the dataset ours imitates).
    margin: m of the neighbourhood hinges on Euclidean distances.
    topk: K, the most violated hinges kept per anchor.
    pretrain_epochs: Epochs of MULE pre-training before the image-text training (0 skips it).
    separate_lang_branch: One GRU and output layer per language instead of a shared one (the reference's
        ``--separate_lang_branch``).
    """

    word_dim: int = 300
    mule_dim: int = 512
    rnn: RNNKind = "gru"
    hidden: int = 512
    embed_dim: int = 512
    image_hidden: int = 2048
    dropout: float = 0.5
    uni_align: float = 1.0
    embed_align: float = 1.0
    neighbourhood: float = 0.05
    domain_adapt: float = 1e-6
    margin: float = 0.05
    topk: int = 10
    pretrain_epochs: int = 5
    separate_lang_branch: bool = False

    def __post_init__(self) -> None:
        for name in ("word_dim", "mule_dim", "hidden", "embed_dim", "image_hidden", "topk"):
            check_positive(name, getattr(self, name))
        check_choice("rnn", self.rnn, RNNKind)
        check_fraction("dropout", self.dropout, below_one=True)
        for name in ("uni_align", "embed_align", "neighbourhood", "domain_adapt", "margin", "pretrain_epochs"):
            check(getattr(self, name) >= 0, name, getattr(self, name), f"{name} >= 0")


# --- distances and neighbourhood constraints ---------------------------------------------------------------


def cross_lingual_loss(
    embeddings: Tensor, caption_image: Tensor, langs: Tensor, *, k: int, margin: float
) -> Tensor | None:
    """Mean over language pairs a < b of :func:`neighbourhood_loss` from a-captions to b-captions.

    Args:
        embeddings: (B, d) l2-normalised caption embeddings.
        caption_image: (B,) image index of each caption.
        langs: (B,) language index of each caption.
    """
    present = torch.unique(langs).tolist()  # sorted
    losses = []
    for i, lang_a in enumerate(present):
        in_a = langs == lang_a
        for lang_b in present[i + 1 :]:
            in_b = langs == lang_b
            losses.append(
                neighbourhood_loss(
                    embeddings[in_a], caption_image[in_a], embeddings[in_b], caption_image[in_b], k=k, margin=margin
                )
            )
    return mean_of(losses)


# --- adversarial language classifier -----------------------------------------------------------------------


class GradientReversal(torch.autograd.Function):
    """Identity forward; backward multiplies the gradient by ``-scale`` (Ganin and Lempitsky 2015)."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, scale: float) -> Tensor:
        ctx.scale = scale
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        return -ctx.scale * grad, None


def reverse_gradient(x: Tensor, scale: float) -> Tensor:
    """``x`` unchanged; the gradient flowing back through it is multiplied by ``-scale``."""
    reversed_x: Tensor = GradientReversal.apply(x, scale)
    return reversed_x


def dann_schedule(progress: float, weight: float) -> float:
    """Gradient reversal strength (2 / (1 + exp(-10 p)) - 1) * weight: 0 at the start, ~weight at the end."""
    return (2.0 / (1.0 + math.exp(-10.0 * progress)) - 1.0) * weight


def language_classifier_loss(
    classifier: nn.Module, features: Tensor, langs: Tensor, *, progress: float, weight: float
) -> Tensor:
    """``weight`` * cross-entropy of ``classifier`` on (B, d) ``features`` seen through gradient reversal.

    The cross-entropy is averaged within each language, then over languages.
    """
    reversed_features = reverse_gradient(features, dann_schedule(progress, weight))
    per_caption = F.cross_entropy(classifier(reversed_features), langs, reduction="none")  # (B,)
    per_language = [per_caption[langs == lang].mean() for lang in torch.unique(langs).tolist()]
    return weight * torch.stack(per_language).mean()


# --- encoders ----------------------------------------------------------------------------------------------


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


def last_state(states: Tensor, lengths: Tensor) -> Tensor:
    """(B, L, H) recurrent states -> (B, H) the state at each caption's last real token."""
    rows = torch.arange(states.shape[0], device=states.device)
    return states[rows, lengths - 1]


def length_mask(lengths: Tensor, steps: int) -> Tensor:
    """(B,) lengths -> (B, steps) bool, True at real tokens."""
    return torch.arange(steps, device=lengths.device).unsqueeze(0) < lengths.unsqueeze(1)


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


class MULE(RetrievalModel):
    """MULE on EmbN; see the module docstring.

    ``encode_texts`` returns the final sentence embeddings with extras ``mule`` ((B, mule_dim), the
    l2-normalised mean MULE embedding u_i), ``words`` ((B, L, word_dim) word vectors) and ``word_mask``
    ((B, L) bool), which :meth:`extra_losses` and :meth:`pretrain_loss` read.
    """

    name = "mule"
    default_loss = "topk"

    def __init__(self, config: MULEConfig, *, vocab_size: int, languages: int, region_dim: int) -> None:
        super().__init__()
        self.config = config
        self.languages = languages
        self.word_embedding = WordEmbedding(vocab_size, config.word_dim)
        self.mule_layers = nn.ModuleList(nn.Linear(config.word_dim, config.mule_dim) for _ in range(languages))
        branches = languages if config.separate_lang_branch else 1
        self.sentence_branches = nn.ModuleList(
            SentenceBranch(config.mule_dim, config.hidden, config.embed_dim, config.rnn) for _ in range(branches)
        )
        self.image_branch = ImageBranch(region_dim, config.image_hidden, config.embed_dim, config.dropout)
        self.language_classifier = nn.Linear(config.mule_dim, languages)
        nn.init.xavier_uniform_(self.language_classifier.weight)
        nn.init.zeros_(self.language_classifier.bias)

    def encode_images(self, images: ImageBatch) -> Embedded:
        return Embedded(self.image_branch(images.regions, images.mask))

    def encode_texts(self, texts: TextBatch) -> Embedded:
        words = self.word_embedding(texts.tokens)  # (B, L, word_dim)
        mask = length_mask(texts.lengths, texts.tokens.shape[1])
        mule = self.project(words, texts.langs)  # (B, L, mule_dim)
        sentences = self.encode_sentences(mule, texts.lengths, texts.langs)
        extras = {"mule": l2norm(masked_mean(mule, mask)), "words": words, "word_mask": mask}
        return Embedded(l2norm(sentences), extras=extras)

    def project(self, words: Tensor, langs: Tensor) -> Tensor:
        """(B, L, word_dim) word vectors -> (B, L, mule_dim) through each caption's language FC layer."""
        return apply_by_language(langs, self.languages, lambda lang, rows: self.mule_layers[lang](words[rows]))

    def encode_sentences(self, mule: Tensor, lengths: Tensor, langs: Tensor) -> Tensor:
        """(B, L, mule_dim) MULE embeddings -> (B, embed_dim) sentence vectors (before l2norm)."""
        if len(self.sentence_branches) == 1:
            return self.sentence_branches[0](mule, lengths)
        return apply_by_language(
            langs, self.languages, lambda lang, rows: self.sentence_branches[lang](mule[rows], lengths[rows])
        )

    def extra_losses(self, images: Embedded, texts: Embedded, context: BatchContext) -> dict[str, Tensor]:
        config = self.config
        caption_image, langs = context.caption_image, context.langs
        constraints = {
            "neighbourhood": (config.neighbourhood, texts.vectors, within_language_loss),
            "uni_align": (config.uni_align, texts.vectors, cross_lingual_loss),
            "embed_align": (config.embed_align, texts.extras["mule"], cross_lingual_loss),
        }
        losses: dict[str, Tensor] = {}
        for name, (weight, embeddings, constraint) in constraints.items():
            loss = constraint(embeddings, caption_image, langs, k=config.topk, margin=config.margin) if weight else None
            if loss is not None:
                losses[name] = weight * loss
        # One language alone gives the classifier nothing to tell apart (the reference skips it likewise when
        # it trains a single language).
        if config.domain_adapt > 0 and torch.unique(langs).numel() > 1:
            losses["language_classifier"] = language_classifier_loss(
                self.language_classifier,
                texts.extras["mule"],
                langs,
                progress=context.progress,
                weight=config.domain_adapt,
            )
        return losses

    def pretrain_epochs(self) -> int:
        return self.config.pretrain_epochs

    def pretrain_loss(self, texts: Embedded, context: BatchContext) -> Tensor:
        """The cross-lingual constraint on the mean MULE embeddings, recomputed from frozen word vectors.

        Zero (with a graph, so backward still works) when no language pair has a shared image.
        """
        words = texts.extras["words"].detach()  # frozen word vectors, as in the reference
        mule = l2norm(masked_mean(self.project(words, context.langs), texts.extras["word_mask"]))
        loss = cross_lingual_loss(
            mule, context.caption_image, context.langs, k=self.config.topk, margin=self.config.margin
        )
        return loss if loss is not None else mule.sum() * 0.0
