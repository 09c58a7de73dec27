"""The contract every retrieval model fulfils, and the batch and embedding types that cross it.

A model encodes images and captions separately (:meth:`RetrievalModel.encode_images`,
:meth:`RetrievalModel.encode_texts`) and scores every (image, caption) pair of two encoded sets
(:meth:`RetrievalModel.similarity`). Training, evaluation and search only use these three methods, plus the
optional extra losses a model adds to the ranking loss and, for an ensemble of separately trained members, the
members' own scores and parameter groups (:meth:`RetrievalModel.ranking_similarities`,
:meth:`RetrievalModel.clip_groups`). Models whose image embedding is one vector per image,
independent of the query (SAN, DAN, MULE, VSE++), set ``gallery_cacheable``; SCAN's similarity needs every
pair, so it does not.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from common.distributed import gather, world_size

LossKind = Literal["harder", "max_violation", "sum", "topk"]


@dataclass(frozen=True)
class ImageBatch:
    """Region features of a batch of images.

    Attributes:
        regions: (B, K, D) float features.
        mask: (B, K) bool, True for real regions (images may have fewer than K).
    """

    regions: Tensor
    mask: Tensor

    def to(self, device: torch.device) -> ImageBatch:
        return ImageBatch(self.regions.to(device), self.mask.to(device))


@dataclass(frozen=True)
class TextBatch:
    """A batch of tokenized captions.

    Attributes:
        tokens: (B, L) token ids, 0 = padding.
        lengths: (B,) number of real tokens (>= 1).
        langs: (B,) index of each caption's language in the model's language list.
        host_lengths: ``lengths`` on the CPU when the batch was built from host arrays, so a recurrent encoder can
            pack the batch without reading ``lengths`` back from the device (a host sync per step on a GPU).
    """

    tokens: Tensor
    lengths: Tensor
    langs: Tensor
    host_lengths: Tensor | None = None

    def to(self, device: torch.device) -> TextBatch:
        return TextBatch(self.tokens.to(device), self.lengths.to(device), self.langs.to(device), self.host_lengths)


@dataclass(frozen=True)
class Embedded:
    """Encoded images or captions.

    Attributes:
        vectors: (N, d) one vector per item, or (N, L, d) a set of vectors per item (SCAN's regions/words).
        mask: (N, L) bool for sets; None for one vector per item.
        extras: Training-time intermediates a model's extra losses need (e.g. MULE's word-level embedding);
            dropped by :meth:`detached` and never concatenated.
    """

    vectors: Tensor
    mask: Tensor | None = None
    extras: dict[str, Tensor] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.vectors.shape[0])

    def slice(self, start: int, stop: int) -> Embedded:
        mask = None if self.mask is None else self.mask[start:stop]
        return Embedded(self.vectors[start:stop], mask)

    def gathered(self) -> Embedded:
        """Every data-parallel rank's items in rank order, extras included (:func:`common.distributed.gather`:
        differentiable, sets padded with mask False); itself in one process."""
        if world_size() == 1:
            return self
        mask = None if self.mask is None else gather(self.mask)
        return Embedded(gather(self.vectors), mask, {key: gather(value) for key, value in self.extras.items()})

    def detached(self, device: torch.device | None = None) -> Embedded:
        """Vectors and mask only, without autograd history, optionally moved to ``device``."""
        vectors = self.vectors.detach()
        mask = self.mask
        if device is not None:
            vectors = vectors.to(device)
            mask = None if mask is None else mask.to(device)
        return Embedded(vectors, mask)

    @staticmethod
    def cat(parts: Sequence[Embedded]) -> Embedded:
        """Concatenate along items; sets of different lengths are padded (mask False) to the longest."""
        if not parts:
            raise ValueError("nothing to concatenate")
        if parts[0].mask is None:
            return Embedded(torch.cat([part.vectors for part in parts]))
        longest = max(part.vectors.shape[1] for part in parts)
        vectors, masks = [], []
        for part in parts:
            assert part.mask is not None
            pad = longest - part.vectors.shape[1]
            vectors.append(F.pad(part.vectors, (0, 0, 0, pad)))
            masks.append(F.pad(part.mask, (0, pad), value=False))
        return Embedded(torch.cat(vectors), torch.cat(masks))


@dataclass(frozen=True)
class BatchContext:
    """What a model's extra losses may need to know about a training batch.

    Attributes:
        caption_image: (B_txt,) index of each caption's image in the batch's images.
        langs: (B_txt,) language index of each caption.
        progress: Fraction of training done, in [0, 1] (schedules such as gradient-reversal strength).
    """

    caption_image: Tensor
    langs: Tensor
    progress: float


class RetrievalModel(nn.Module, ABC):
    """Base class of the registered retrieval models (see :mod:`retrieval.zoo.registry`).

    Subclasses set ``name``, implement the two encoders and, when the embeddings are not single l2-normalised
    vectors scored by cosine, :meth:`similarity`. Constructors take ``(config, *, vocab_size, languages,
    region_dim)``: the model's config dataclass, the vocabulary size, the number of languages and the
    region feature size.
    """

    name: ClassVar[str] = ""
    # The image embedding does not depend on the query, so a search gallery can be encoded once and kept.
    gallery_cacheable: ClassVar[bool] = True
    # The ranking loss used when params.yaml says `loss: auto`.
    default_loss: ClassVar[LossKind] = "harder"

    @abstractmethod
    def encode_images(self, images: ImageBatch) -> Embedded:
        """One embedding per image of the batch."""

    @abstractmethod
    def encode_texts(self, texts: TextBatch) -> Embedded:
        """One embedding per caption of the batch."""

    def similarity(self, images: Embedded, texts: Embedded) -> Tensor:
        """(n_img, n_txt) scores; the default is the dot product of one vector per item (cosine if normalised)."""
        return images.vectors @ texts.vectors.t()

    def ranking_similarities(self, images: Embedded, texts: Embedded) -> list[Tensor]:
        """The score matrices training applies the ranking loss to, one loss each (summed): :meth:`similarity`'s
        alone by default; an ensemble's members' own, so that each member learns as it would alone."""
        return [self.similarity(images, texts)]

    def clip_groups(self) -> list[list[nn.Parameter]]:
        """Parameter groups whose gradient norms are clipped each on its own: one, every parameter, by default."""
        return [list(self.parameters())]

    def text_similarity(self, queries: Embedded, texts: Embedded) -> Tensor:
        """(n_query, n_txt) caption-caption scores, for the c2c objective (Kádár et al. 2018)."""
        if queries.mask is not None or texts.mask is not None:
            raise ValueError(f"model {self.name!r} embeds captions as sets of vectors; c2c ranking needs one vector")
        return queries.vectors @ texts.vectors.t()

    def extra_losses(self, images: Embedded, texts: Embedded, context: BatchContext) -> dict[str, Tensor]:
        """Weighted losses added to the ranking loss (MULE's constraints, head diversity); none by default."""
        return {}

    # gamma of Huang et al. 2019's cross-lingual text ranking term (Eq. 4, :mod:`retrieval.joint`), trained in every
    # step beside the image-text ranking loss; 0 (none) for models without one.
    def text_ranking_weight(self) -> float:
        return 0.0

    # Epochs of text-only pre-training before the image-text training (MULE's universal-embedding
    # pre-training); 0 for models without one.
    def pretrain_epochs(self) -> int:
        return 0

    def pretrain_loss(self, texts: Embedded, context: BatchContext) -> Tensor:
        """Loss of one pre-training batch: captions of several languages, ``context.caption_image`` groups
        captions of the same image."""
        # The trainer only calls this when pretrain_epochs() > 0, which models with a pre-training define.
        raise TypeError(f"model {self.name!r} has no pre-training (its pretrain_epochs() is 0)")
