"""SCAN (Fusion), Lee et al. 2018: a text-to-image and an image-to-text SCAN model whose scores are averaged.

Lee et al. train the two models separately and average their (image, caption) similarities at test time; Huang et
al. 2020 compare against that ensemble in Table 2. Here the two members live in one model, so that a fusion run is
one stage like any other run (``train_retrieval@scan_fusion-<variant>-<role>``) and its checkpoint one file:

- scoring (validation, test, search): the mean of the members' scores;
- training: the ranking loss is applied to each member's own scores (:meth:`SCANFusion.ranking_similarities`) and
  each member's gradient is clipped on its own (:meth:`SCANFusion.clip_groups`). The members share no parameter,
  so each takes the step it would take trained alone on the same batches;
- the epoch kept is the one of the best validation rsum of the fused scores (Lee et al. keep each member's own
  best epoch).

The members' defaults are Lee et al.'s Flickr30K ensemble, "t-i AVG + i-t LSE" (their code's settings: t2i mean
aggregation with softmax temperature 9; i2t LogSumExp with lambda_lse 5 and softmax temperature 4); their sizes are
the project's 512-d joint space, as for :mod:`retrieval.zoo.scan`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from common.checks import SettingError
from retrieval.encoders import ImageEncoderKind, RNNKind
from retrieval.model import Embedded, ImageBatch, RetrievalModel, TextBatch
from retrieval.zoo.scan import SCAN, Aggregation, Direction, RawFeatureNorm, SCANConfig

DIRECTIONS: tuple[Direction, Direction] = ("t2i", "i2t")


@dataclass(frozen=True)
class SCANFusionConfig:
    """The two members' settings: shared sizes and encoders, each direction's aggregation and temperatures (the
    fields of :class:`~retrieval.zoo.scan.SCANConfig`, prefixed ``t2i_`` / ``i2t_``)."""

    word_dim: int = 300
    hidden: int = 512
    rnn: RNNKind = "gru"
    bidirectional: bool = True
    image_encoder: ImageEncoderKind = "linear"
    raw_feature_norm: RawFeatureNorm = "clipped_l2norm"
    t2i_aggregation: Aggregation = "mean"
    t2i_lambda_lse: float = 6.0
    t2i_lambda_softmax: float = 9.0
    i2t_aggregation: Aggregation = "lse"
    i2t_lambda_lse: float = 5.0
    i2t_lambda_softmax: float = 4.0
    image_chunk: int = 64
    caption_chunk: int = 64

    def __post_init__(self) -> None:
        for direction in DIRECTIONS:
            try:
                self.member(direction)
            except SettingError as error:  # a member's field is named as this config names it
                own = f"{direction}_{error.key}"
                raise SettingError(own if own in _FIELDS else error.key, error.message) from None

    def member(self, direction: Direction) -> SCANConfig:
        """The config of the member that attends in ``direction``."""
        return SCANConfig(
            word_dim=self.word_dim,
            hidden=self.hidden,
            rnn=self.rnn,
            bidirectional=self.bidirectional,
            image_encoder=self.image_encoder,
            direction=direction,
            aggregation=getattr(self, f"{direction}_aggregation"),
            lambda_lse=getattr(self, f"{direction}_lambda_lse"),
            lambda_softmax=getattr(self, f"{direction}_lambda_softmax"),
            raw_feature_norm=self.raw_feature_norm,
            image_chunk=self.image_chunk,
            caption_chunk=self.caption_chunk,
        )


class SCANFusion(RetrievalModel):
    """A t2i and an i2t :class:`~retrieval.zoo.scan.SCAN`; an item's embedding is the members' side by side (their
    vectors concatenated: each member's ``hidden`` values, t2i's first), a score the mean of theirs."""

    name = "scan_fusion"
    gallery_cacheable = False  # as SCAN: every score needs both sets of vectors
    default_loss = "max_violation"

    def __init__(self, config: SCANFusionConfig, *, vocab_size: int, languages: int, region_dim: int) -> None:
        super().__init__()
        self.config = config
        sizes = {"vocab_size": vocab_size, "languages": languages, "region_dim": region_dim}
        self.t2i = SCAN(config.member("t2i"), **sizes)
        self.i2t = SCAN(config.member("i2t"), **sizes)

    def encode_images(self, images: ImageBatch) -> Embedded:
        return _side_by_side([member.encode_images(images) for member in self.members()])

    def encode_texts(self, texts: TextBatch) -> Embedded:
        return _side_by_side([member.encode_texts(texts) for member in self.members()])

    def similarity(self, images: Embedded, texts: Embedded) -> Tensor:
        """(n_img, n_txt) the mean of the members' SCAN scores."""
        first, second = self.ranking_similarities(images, texts)
        return (first + second) / 2

    def ranking_similarities(self, images: Embedded, texts: Embedded) -> list[Tensor]:
        """Each member's own (n_img, n_txt) scores, t2i's first."""
        return [
            member.similarity(self._part(images, index), self._part(texts, index))
            for index, member in enumerate(self.members())
        ]

    def clip_groups(self) -> list[list[nn.Parameter]]:
        return [list(member.parameters()) for member in self.members()]

    def text_similarity(self, queries: Embedded, texts: Embedded) -> Tensor:
        raise ValueError("SCAN (Fusion) only scores image-caption pairs (cross attention); it has no caption score")

    def members(self) -> tuple[SCAN, SCAN]:
        """The t2i member, then the i2t one."""
        return self.t2i, self.i2t

    def _part(self, embedded: Embedded, index: int) -> Embedded:
        """Member ``index``'s vectors of a side-by-side embedding."""
        width = self.config.hidden
        return Embedded(embedded.vectors[..., index * width : (index + 1) * width], embedded.mask)


_FIELDS = {field.name for field in dataclasses.fields(SCANFusionConfig)}


def _side_by_side(parts: list[Embedded]) -> Embedded:
    """The members' embeddings of the same items concatenated along the vector axis (their masks are the items')."""
    return Embedded(torch.cat([part.vectors for part in parts], dim=-1), parts[0].mask)
