"""Encoding whole splits in batches and scoring them: what validation, test evaluation and search share."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from torch import Tensor

from common.checks import check_range
from common.distributed import gather, share, world_size
from retrieval.data import CaptionSet, RegionLookup, chunks, image_batch, images_of, text_batch
from retrieval.evaluation import Metrics, folded_metrics, query_ranks, rank_metrics
from retrieval.model import Embedded, RetrievalModel
from retrieval.significance import QueryRanks

AutocastFactory = Callable[[], contextlib.AbstractContextManager[object]]


@dataclass(frozen=True)
class EvaluationConfig:
    """How test and validation splits are scored (the `retrieval.evaluation` section of params.yaml).

    Attributes:
        protocol: full (the whole test split: Multi30K/Flickr30K 1K, COCO 5K), folds (the mean over
            consecutive folds of ``fold_images``: COCO 5-fold 1K), or both (full under each language, the
            folds under ``<lang>-folds``: Table 3's two columns from one run).
        fold_images: Images per fold.
        val_images: Validation uses the first this many val images (the references: 1000).
        batch_size: Images or captions per encoding batch.
    """

    protocol: Literal["full", "folds", "both"] = "full"
    fold_images: int = 1000
    val_images: int = 1000
    batch_size: int = 256

    def __post_init__(self) -> None:
        check_range("fold_images", self.fold_images, 1, 10_000_000)
        check_range("val_images", self.val_images, 1, 10_000_000)
        check_range("batch_size", self.batch_size, 1, 65_536)

    @property
    def folds(self) -> int | None:
        """Images per fold of the main test metrics; None for the full test split."""
        return self.fold_images if self.protocol == "folds" else None


@contextlib.contextmanager
def evaluating(model: torch.nn.Module) -> Iterator[None]:
    """Eval mode and no autograd inside; the previous train/eval mode restored after (VSE++ issue #4)."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was_training)


def encode_images(
    model: RetrievalModel,
    regions: RegionLookup,
    rows: np.ndarray,
    *,
    device: torch.device,
    batch_size: int = 256,
    autocast: AutocastFactory = contextlib.nullcontext,
) -> Embedded:
    """Embeddings of the store ``rows`` (on the CPU, float32)."""

    def encode(start: int, stop: int) -> Embedded:
        return model.encode_images(image_batch(regions, rows[start:stop]).to(device))

    return _encode_in_chunks(model, len(rows), batch_size, encode, autocast)


def encode_texts(
    model: RetrievalModel,
    captions: CaptionSet,
    *,
    device: torch.device,
    batch_size: int = 256,
    autocast: AutocastFactory = contextlib.nullcontext,
    part: slice | None = None,
) -> Embedded:
    """Embeddings of every caption of ``captions``, or of the range ``part`` (on the CPU, float32)."""
    first, stop, _ = (part or slice(None)).indices(len(captions))

    def encode(start: int, stop: int) -> Embedded:
        return model.encode_texts(text_batch(captions, np.arange(first + start, first + stop)).to(device))

    return _encode_in_chunks(model, max(0, stop - first), batch_size, encode, autocast)


def _encode_in_chunks(
    model: RetrievalModel,
    count: int,
    batch_size: int,
    encode: Callable[[int, int], Embedded],
    autocast: AutocastFactory,
) -> Embedded:
    parts = []
    with evaluating(model):
        for start, stop in chunks(count, batch_size):
            with autocast():
                encoded = encode(start, stop)
            parts.append(_to_cpu(encoded))
    return Embedded.cat(parts)


def similarity_matrix(
    model: RetrievalModel,
    images: Embedded,
    texts: Embedded,
    *,
    device: torch.device,
    image_chunk: int = 1024,
    autocast: AutocastFactory = contextlib.nullcontext,
) -> Tensor:
    """(n_img, n_txt) scores on the CPU; images go to ``device`` a chunk at a time, captions once."""
    on_device = texts.detached(device)
    rows = []
    with evaluating(model):
        for start, stop in chunks(len(images), image_chunk):
            with autocast():
                scores = model.similarity(images.slice(start, stop).detached(device), on_device)
            rows.append(scores.float().cpu())
    return torch.cat(rows)


def evaluate(
    model: RetrievalModel,
    captions: CaptionSet,
    regions: RegionLookup,
    *,
    device: torch.device,
    fold_images: int | None = None,
    batch_size: int = 256,
    autocast: AutocastFactory = contextlib.nullcontext,
) -> Metrics:
    """R@K of ``captions`` against their images (in order of first appearance).

    ``fold_images`` set: the mean over consecutive folds of that many images (COCO 5-fold 1K).
    """
    sims, index = _similarities(model, captions, regions, device=device, batch_size=batch_size, autocast=autocast)
    return rank_metrics(sims, index) if fold_images is None else folded_metrics(sims, index, fold_images)


def evaluate_ranked(
    model: RetrievalModel,
    captions: CaptionSet,
    regions: RegionLookup,
    *,
    device: torch.device,
    fold_images: int | None = None,
    batch_size: int = 256,
    autocast: AutocastFactory = contextlib.nullcontext,
) -> tuple[Metrics, QueryRanks]:
    """:func:`evaluate`'s metrics and the per-query ranks they come from (each query within its fold, with
    ``fold_images``), for the paired test of two runs (:mod:`retrieval.significance`)."""
    sims, index = _similarities(model, captions, regions, device=device, batch_size=batch_size, autocast=autocast)
    metrics = rank_metrics(sims, index) if fold_images is None else folded_metrics(sims, index, fold_images)
    i2t, t2i = query_ranks(sims, index, fold_images)
    return metrics, QueryRanks.of_seed(
        captions.caption_ids, captions.image_ids, index.numpy(), i2t.numpy(), t2i.numpy()
    )


def _similarities(
    model: RetrievalModel,
    captions: CaptionSet,
    regions: RegionLookup,
    *,
    device: torch.device,
    batch_size: int,
    autocast: AutocastFactory,
) -> tuple[Tensor, Tensor]:
    """The (images, captions) similarity matrix on the CPU, and each caption's image (its row)."""
    rows, caption_image = images_of(captions.image_rows)
    # data-parallel ranks share the work: each encodes a share of the captions (all of them are gathered) and
    # scores its share of the images against all captions; the score rows are gathered
    mine = rows[share(len(rows))]
    images = encode_images(model, regions, mine, device=device, batch_size=batch_size, autocast=autocast)
    texts = encode_texts(
        model, captions, device=device, batch_size=batch_size, autocast=autocast, part=share(len(captions))
    )
    texts = _on_every_rank(texts, device)
    sims = similarity_matrix(model, images, texts, device=device, autocast=autocast)
    sims = gather(sims.to(device)).cpu() if world_size() > 1 else sims
    return sims, torch.from_numpy(caption_image)


def _on_every_rank(encoded: Embedded, device: torch.device) -> Embedded:
    """Every rank's share of ``encoded``, gathered through ``device`` (NCCL moves only CUDA tensors); on the CPU."""
    if world_size() == 1:
        return encoded
    return _to_cpu(encoded.detached(device).gathered())


def _to_cpu(encoded: Embedded) -> Embedded:
    vectors = encoded.vectors.detach().float().cpu()
    return Embedded(vectors, None if encoded.mask is None else encoded.mask.cpu())
