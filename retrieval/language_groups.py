"""MULE's batches (Kim et al. AAAI 2020, supplementary "Minibatch Construction"), balanced over language groups.

An image's language group is the set of languages its training captions are in (on COCO: English only,
English-Japanese, English-Chinese). Each batch draws its images from the groups in turn, so every group is equally
represented however few images it has (the paper: "we sample images from each group equally"; a small group's
images recur more often), and each drawn image brings up to ``per_language`` of its captions in each of its
languages (the paper: two English and two German captions, one French and one Czech, where French and Czech have
one per image). Captions of one image in several languages share a batch, which the cross-lingual constraints of
:mod:`retrieval.zoo.mule` need: a plain random batch seldom holds two languages of one image.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class LanguageGroupSampler:
    """Batches of at most ``batch_size`` captions, whole images at a time, the groups taking turns.

    An epoch has as many batches as one pass over every caption in batches of ``batch_size``
    (``ceil(N / batch_size)``), so the schedule's epochs cost what they cost with plain batches. Within a group,
    images are drawn without replacement and reshuffled when they run out; within an image and language, captions
    likewise at random. Deterministic for a given seed and epoch.

    Attributes:
        image_rows: (N,) each caption's image (its FeatureStore row).
        langs: (N,) each caption's language index.
        batch_size: Most captions per batch (an image whose captions would overflow it opens the next batch).
        per_language: Most captions of one image and language per draw.
        seed: Seeds the order, with the epoch.
    """

    image_rows: np.ndarray
    langs: np.ndarray
    batch_size: int
    per_language: int
    seed: int = 0

    def groups(self) -> list[np.ndarray]:
        """The images (store rows) of each language group, groups ordered by their sorted language indices."""
        by_image: dict[int, set[int]] = {}
        for row, lang in zip(self.image_rows.tolist(), self.langs.tolist(), strict=True):
            by_image.setdefault(row, set()).add(lang)
        members: dict[tuple[int, ...], list[int]] = {}
        for row in sorted(by_image):
            members.setdefault(tuple(sorted(by_image[row])), []).append(row)
        return [np.array(members[key], dtype=np.int64) for key in sorted(members)]

    def batches(self, epoch: int) -> list[np.ndarray]:
        rng = np.random.default_rng([self.seed, epoch])
        captions_of = self._captions_by_image_and_language()
        streams = [_Stream(images, rng) for images in self.groups()]
        count = math.ceil(len(self.image_rows) / self.batch_size)
        batches: list[np.ndarray] = []
        current: list[int] = []
        turn = 0
        while len(batches) < count:
            image = streams[turn % len(streams)].next()
            turn += 1
            drawn = self._draw(captions_of[image], rng)
            if current and len(current) + len(drawn) > self.batch_size:
                batches.append(np.array(current, dtype=np.int64))
                current = []
            current += drawn[: self.batch_size]
        return batches

    def _captions_by_image_and_language(self) -> dict[int, list[np.ndarray]]:
        """Image row -> its caption indices per language (languages in increasing order)."""
        order = np.lexsort((self.langs, self.image_rows))
        result: dict[int, list[np.ndarray]] = {}
        keys = np.stack([self.image_rows[order], self.langs[order]], axis=1)
        starts = np.flatnonzero(np.any(np.diff(keys, axis=0) != 0, axis=1)) + 1
        for indices in np.split(order, starts):
            result.setdefault(int(self.image_rows[indices[0]]), []).append(indices)
        return result

    def _draw(self, per_language: list[np.ndarray], rng: np.random.Generator) -> list[int]:
        drawn: list[int] = []
        for indices in per_language:
            take = min(self.per_language, len(indices))
            drawn += rng.choice(indices, size=take, replace=False).tolist()
        return drawn


class _Stream:
    """A group's images in random order, reshuffled each time they run out."""

    def __init__(self, images: np.ndarray, rng: np.random.Generator) -> None:
        self.images, self.rng = images, rng
        self.order = rng.permutation(images)
        self.position = 0

    def next(self) -> int:
        if self.position == len(self.order):
            self.order, self.position = self.rng.permutation(self.images), 0
        self.position += 1
        return int(self.order[self.position - 1])
