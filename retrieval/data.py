"""Captions as token-id arrays tied to FeatureStore rows, and the batches the trainer draws from them.

Images are never held in memory as a whole: a batch reads the rows it needs from the region memory map
(:class:`features.store.FeatureStore` or anything with its ``batch`` method), so peak memory does not grow
with the number of images.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from common.distributed import share
from common.errors import InputError
from common.runtime import host_to_device
from features.store import RegionLookup
from retrieval.model import ImageBatch, TextBatch
from retrieval.vocab import EmptyCaptionError, Vocabulary


@dataclass(frozen=True)
class Caption:
    """One caption row of the canonical captions table (the columns retrieval reads)."""

    caption_id: str
    image_id: str
    lang: str
    text: str
    origin: str


def language_type(lang: str, origin: str) -> str:
    """The paper's language type l of Eq. 9: language plus origin, e.g. ``en-human``, ``de-mmt``."""
    return f"{lang}-{origin}"


@dataclass(frozen=True)
class CaptionSet:
    """Encoded captions.

    Attributes:
        caption_ids: Id of each caption.
        image_ids: Image of each caption.
        tokens: Token ids of each caption (1-D int64 arrays, no padding).
        image_rows: (N,) FeatureStore row of each caption's image.
        langs: (N,) index of each caption's language in the vocabulary's languages.
        types: (N,) index of each caption's language type in ``type_names``.
        type_names: The language types (``<lang>-<origin>``).
        synthetic: (N,) True for machine-translated captions.
    """

    caption_ids: tuple[str, ...]
    image_ids: tuple[str, ...]
    tokens: tuple[np.ndarray, ...]
    image_rows: np.ndarray
    langs: np.ndarray
    types: np.ndarray
    type_names: tuple[str, ...]
    synthetic: np.ndarray

    def __len__(self) -> int:
        return len(self.caption_ids)

    def subset(self, indices: np.ndarray) -> CaptionSet:
        return CaptionSet(
            tuple(self.caption_ids[i] for i in indices),
            tuple(self.image_ids[i] for i in indices),
            tuple(self.tokens[i] for i in indices),
            self.image_rows[indices],
            self.langs[indices],
            self.types[indices],
            self.type_names,
            self.synthetic[indices],
        )


def encode_captions(
    captions: Sequence[Caption],
    vocab: Vocabulary,
    image_rows: Mapping[str, int],
    *,
    max_len: int,
    source: str,
    type_names: Sequence[str] | None = None,
) -> CaptionSet:
    """Tokenize ``captions`` and look up their images' rows.

    Args:
        image_rows: image id -> FeatureStore row.
        source: Names the captions in errors (e.g. the table's path and split).
        type_names: Fix the language-type order (a checkpoint's); default: sorted types of ``captions``.

    Raises:
        InputError: no captions; images the store lacks (ids named); an empty caption (id named); a language or
            language type the vocabulary or ``type_names`` does not know.
    """
    if not captions:
        raise InputError(f"{source}: no captions")
    missing = sorted({c.image_id for c in captions if c.image_id not in image_rows})
    if missing:
        raise InputError(
            f"{source}: {len(missing)} image(s) have captions but no region features, e.g. {missing[:5]}; "
            "the feature store and the captions must come from the same prepared dataset"
        )
    names = tuple(type_names) if type_names is not None else tuple(sorted({_type(c) for c in captions}))
    unknown_types = sorted({_type(c) for c in captions} - set(names))
    if unknown_types:
        raise InputError(f"{source}: language types {unknown_types} are not among {list(names)}")
    tokens = []
    for caption in captions:
        if caption.lang not in vocab.languages:
            raise InputError(
                f"{source}: caption {caption.caption_id} is in {caption.lang!r}; "
                f"the model's languages are {list(vocab.languages)}"
            )
        try:
            tokens.append(np.asarray(vocab.encode(caption.text, caption.lang, max_len=max_len), dtype=np.int64))
        except EmptyCaptionError as error:
            raise InputError(f"{source}: caption {caption.caption_id}: {error}") from error
    type_index = {name: index for index, name in enumerate(names)}
    return CaptionSet(
        caption_ids=tuple(c.caption_id for c in captions),
        image_ids=tuple(c.image_id for c in captions),
        tokens=tuple(tokens),
        image_rows=np.array([image_rows[c.image_id] for c in captions], dtype=np.int64),
        langs=np.array([vocab.lang_index(c.lang) for c in captions], dtype=np.int64),
        types=np.array([type_index[_type(c)] for c in captions], dtype=np.int64),
        type_names=names,
        synthetic=np.array([c.origin != "human" for c in captions], dtype=bool),
    )


def _type(caption: Caption) -> str:
    return language_type(caption.lang, caption.origin)


def text_batch(captions: CaptionSet, indices: Sequence[int] | np.ndarray) -> TextBatch:
    """Padded (B, L) token ids of the captions at ``indices``, with lengths and languages."""
    chosen = [captions.tokens[i] for i in indices]
    lengths = torch.tensor([len(tokens) for tokens in chosen], dtype=torch.long)
    padded = torch.zeros(len(chosen), int(lengths.max()), dtype=torch.long)
    for row, tokens in enumerate(chosen):
        padded[row, : len(tokens)] = torch.from_numpy(tokens)
    return TextBatch(padded, lengths, torch.from_numpy(captions.langs[np.asarray(indices)]), host_lengths=lengths)


def image_batch(regions: RegionLookup, rows: Sequence[int] | np.ndarray) -> ImageBatch:
    """Float32 features and masks of the store ``rows`` (read from the memory map)."""
    features, mask, _ = regions.batch(rows)
    return ImageBatch(torch.from_numpy(features.astype(np.float32)), torch.from_numpy(mask))


@dataclass(frozen=True)
class TrainBatch:
    """One ranking step's inputs on the training device.

    Attributes:
        texts: This rank's share of the batch's captions (data-parallel; all of them in one process).
        images: This rank's share of the batch's distinct images, in order of first appearance.
        caption_image: (B,) index of each caption's image among all the batch's images.
        langs: (B,) language index of each caption of the whole batch.
        types: (B,) language-type index of each caption of the whole batch.
    """

    texts: TextBatch
    images: ImageBatch
    caption_image: torch.Tensor
    langs: torch.Tensor
    types: torch.Tensor


class BatchSource(Protocol):
    """Builds a :class:`TrainBatch` from caption indices into the training :class:`CaptionSet`."""

    def batch(self, indices: np.ndarray) -> TrainBatch: ...


class HostBatches:
    """Batches read from the region store and padded on the host, then copied to ``device``: memory does not grow
    with the number of images, but every step moves its features to the device."""

    def __init__(self, captions: CaptionSet, regions: RegionLookup, device: torch.device) -> None:
        self.captions, self.regions, self.device = captions, regions, device

    def batch(self, indices: np.ndarray) -> TrainBatch:
        rows, caption_image = images_of(self.captions.image_rows[indices])
        return TrainBatch(
            text_batch(self.captions, indices[share(len(indices))]).to(self.device),
            image_batch(self.regions, rows[share(len(rows))]).to(self.device),
            torch.from_numpy(caption_image).to(self.device),
            torch.from_numpy(self.captions.langs[indices]).to(self.device),
            torch.from_numpy(self.captions.types[indices]).to(self.device),
        )


class DeviceBatches:
    """The training captions (padded token ids) and their images' regions held on ``device`` once, and each batch
    gathered there by index.

    A step then copies only its indices to the device, from pinned memory (:func:`common.runtime.host_to_device`),
    and never reads from it: on a GPU a host-built batch costs more than a small model's step. The regions keep the
    store's dtype (float16, half the memory of float32) and are widened per batch, which gives the same float32
    values as :func:`image_batch`. Batch widths (the longest caption) come from host-side lengths, so they need no
    read from the device either.
    """

    def __init__(
        self, captions: CaptionSet, regions: RegionLookup, device: torch.device, *, read_rows: int = 1024
    ) -> None:
        self.captions, self.device = captions, device
        used = np.unique(captions.image_rows)
        self._slot = np.full(int(used.max()) + 1, -1, dtype=np.int64)  # store row -> row of the resident regions
        self._slot[used] = np.arange(len(used))
        parts = [regions.batch(used[start:stop])[:2] for start, stop in chunks(len(used), read_rows)]
        self._regions = torch.cat([torch.from_numpy(features).to(device) for features, _ in parts])
        self._mask = torch.cat([torch.from_numpy(mask).to(device) for _, mask in parts])
        self._lengths = np.array([len(tokens) for tokens in captions.tokens], dtype=np.int64)
        padded = np.zeros((len(captions), int(self._lengths.max())), dtype=np.int64)
        for row, tokens in enumerate(captions.tokens):
            padded[row, : len(tokens)] = tokens
        self._tokens = torch.from_numpy(padded).to(device)
        self._device_lengths = torch.from_numpy(self._lengths).to(device)
        self._langs = torch.from_numpy(captions.langs).to(device)
        self._types = torch.from_numpy(captions.types).to(device)

    def batch(self, indices: np.ndarray) -> TrainBatch:
        rows, caption_image = images_of(self.captions.image_rows[indices])
        mine = indices[share(len(indices))]
        width = int(self._lengths[mine].max())  # text_batch pads to the batch's longest caption
        picked = host_to_device(torch.from_numpy(mine), self.device)
        texts = TextBatch(
            self._tokens[picked, :width],
            self._device_lengths[picked],
            self._langs[picked],
            host_lengths=torch.from_numpy(self._lengths[mine]),
        )
        slots = host_to_device(torch.from_numpy(self._slot[rows[share(len(rows))]]), self.device)
        images = ImageBatch(self._regions[slots].float(), self._mask[slots])
        every = host_to_device(torch.from_numpy(np.asarray(indices)), self.device)
        caption_index = host_to_device(torch.from_numpy(caption_image), self.device)
        return TrainBatch(texts, images, caption_index, self._langs[every], self._types[every])


def images_of(image_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct rows in order of first appearance, and each caption's index among them."""
    unique, first, inverse = np.unique(image_rows, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    position = np.empty_like(order)
    position[order] = np.arange(len(order))
    return unique[order], position[inverse]


@dataclass(frozen=True)
class BalancedSampler:
    """Random batches with an equal portion of original and synthesized captions (section 3.3).

    An epoch is one pass over the original captions; each batch adds ``synthetic_fraction`` of synthesized
    ones, drawn without replacement and reshuffled when they run out. With no synthesized captions, batches
    are plain random batches of all captions. Deterministic for a given seed and epoch.
    """

    synthetic: np.ndarray
    batch_size: int
    synthetic_fraction: float = 0.5
    seed: int = 0

    def batches(self, epoch: int) -> list[np.ndarray]:
        rng = np.random.default_rng([self.seed, epoch])
        original = np.flatnonzero(~self.synthetic)
        synthesized = np.flatnonzero(self.synthetic)
        if len(synthesized) == 0 or self.synthetic_fraction == 0.0:
            order = rng.permutation(np.arange(len(self.synthetic)))
            return [order[i : i + self.batch_size] for i in range(0, len(order), self.batch_size)]
        per_batch_synthetic = max(1, round(self.batch_size * self.synthetic_fraction))
        per_batch_original = max(1, self.batch_size - per_batch_synthetic)
        count = math.ceil(len(original) / per_batch_original)
        originals = rng.permutation(original)
        needed = count * per_batch_synthetic
        rounds = math.ceil(needed / len(synthesized))
        synthetic_stream = np.concatenate([rng.permutation(synthesized) for _ in range(rounds)])
        batches = []
        for b in range(count):
            own = originals[b * per_batch_original : (b + 1) * per_batch_original]
            extra = synthetic_stream[b * per_batch_synthetic : (b + 1) * per_batch_synthetic]
            batches.append(np.concatenate([own, extra]))
        return batches


def chunks(count: int, size: int) -> Iterator[tuple[int, int]]:
    for start in range(0, count, size):
        yield start, min(start + size, count)
