"""Kádár et al. 2018's training setups: which training captions a run keeps, and how its batches are drawn.

A language role (:mod:`retrieval.roles`) may carry a :class:`TrainingSetup`; the default one changes nothing. The
paper's conditions, on the comparable (task 2) and translation (task 1) captions of Multi30K:

- translation vs comparable captions (section 5.2, Table 4): ``kinds``; "Bi-comparable" keeps one caption per
  image and language (``captions_per_image: 1``), the size of the translation data;
- overlapping vs disjoint images (section 5.3, Table 5): ``images: 0.5`` keeps a random half of the training
  images ("Half Monolingual", "Bi-overlap"); ``disjoint`` splits the images among the languages, each language's
  captions coming from its own share ("Bi-disjoint": English on one half, German on the other);
- a low-resource language (section 6.2): ``low_resource`` keeps a random share of one language's captions;
- one language per batch (section 3): each ranking step first draws a language, uniformly, then a batch of its
  captions (``batches: one_language``; their code keeps one shuffled stream per language);
- the caption-caption objective per role (``c2c_probability``), so that one experiment compares runs with and
  without it.

Every draw is seeded by ``seed`` alone, so the replicates of a run (seeds 0, 1, ...) train on the same selection
and differ only in their initialisation and batch order.
"""

from __future__ import annotations

import logging
import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Literal, Protocol

import numpy as np

from common.checks import SettingError, check, check_fraction, check_range
from common.errors import InputError

logger = logging.getLogger(__name__)

Batches = Literal["mixed", "one_language"]
KINDS = ("comparable", "translation")
_LANGUAGE = re.compile(r"[a-z]{2}")


@dataclass(frozen=True)
class TrainingSetup:
    """Attributes (defaults: no selection, the trainer's own batches):
    kinds: Human caption kinds trained on (comparable, translation); empty: ``retrieval.train_kinds``.
    images: Share of the training images kept, drawn at random (0.5: the paper's halves).
    disjoint: Split the kept images among the role's training languages (in the role's order), each language
        trained on its own share's captions only: no image has captions of two languages.
    captions_per_image: At most this many captions per image and language, drawn at random (0: all).
    low_resource: Language code -> share of its training captions kept, drawn at random after the other selections.
    batches: ``mixed`` (the trainer's batches) or ``one_language`` (each ranking batch holds one language).
    c2c_probability: This role's chance of a caption-caption step, in place of ``retrieval.train``'s.
    seed: Seeds every draw of the selection (the order of ``one_language`` batches follows the run's seed, as the
        trainer's own batches do).
    """

    kinds: tuple[str, ...] = ()
    images: float = 1.0
    disjoint: bool = False
    captions_per_image: int = 0
    low_resource: dict[str, float] = field(default_factory=dict)
    batches: Batches = "mixed"
    c2c_probability: float | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        for index, kind in enumerate(self.kinds):
            check(kind in KINDS, f"kinds[{index}]", kind, ", ".join(KINDS))
        check(0.0 < self.images <= 1.0, "images", self.images, "0 < images <= 1")
        check_range("captions_per_image", self.captions_per_image, 0, 1000)
        for code, share in self.low_resource.items():
            check(_LANGUAGE.fullmatch(code) is not None, f"low_resource.{code}", code, "an ISO 639-1 code")
            check(0.0 < share <= 1.0, f"low_resource.{code}", share, "0 < share <= 1")
        check(self.batches in ("mixed", "one_language"), "batches", self.batches, "mixed, one_language")
        if self.c2c_probability is not None:
            check_fraction("c2c_probability", self.c2c_probability)
            if self.disjoint and self.c2c_probability > 0:
                raise SettingError(
                    "c2c_probability",
                    "caption-caption steps need captions of one image in two languages; disjoint images have none",
                )
        check_range("seed", self.seed, 0, 2**31 - 1)

    def describe(self) -> str:
        """The settings that differ from the default, ``<key> <value>`` each, e.g. ``images 0.5, disjoint true``."""
        default = TrainingSetup()
        return ", ".join(
            f"{item.name} {_text(getattr(self, item.name))}"
            for item in fields(self)
            if getattr(self, item.name) != getattr(default, item.name)
        )

    @property
    def selects(self) -> bool:
        """Whether the setup drops any training caption (kinds aside)."""
        return self.images < 1.0 or self.disjoint or self.captions_per_image > 0 or bool(self.low_resource)


def select_training_rows(
    rows: Sequence[dict[str, Any]], setup: TrainingSetup, languages: Sequence[str]
) -> list[dict[str, Any]]:
    """The caption rows (``image_id``, ``lang``) ``setup`` keeps, in their order: the share of images first, then
    the disjoint split among ``languages``, the captions per image and language, the low-resource shares.

    Raises:
        InputError: ``disjoint`` with fewer images than languages.
    """
    if not setup.selects:
        return list(rows)
    kept = list(rows)
    images = _shuffled(sorted({row["image_id"] for row in kept}), setup.seed, 0)
    if setup.images < 1.0:
        images = images[: max(1, round(setup.images * len(images)))]
        chosen = set(images)
        kept = [row for row in kept if row["image_id"] in chosen]
    if setup.disjoint:
        present = [lang for lang in languages if any(row["lang"] == lang for row in kept)]
        if len(images) < len(present):
            raise InputError(f"{len(images)} training images cannot be split among {len(present)} languages")
        owner = {
            image: lang
            for lang, share in zip(present, np.array_split(np.array(images, dtype=object), len(present)), strict=True)
            for image in share
        }
        kept = [row for row in kept if owner.get(row["image_id"]) == row["lang"]]
    if setup.captions_per_image > 0:
        groups: dict[tuple[str, str], list[int]] = {}
        for index, row in enumerate(kept):
            groups.setdefault((row["image_id"], row["lang"]), []).append(index)
        rng = np.random.default_rng([setup.seed, 1])
        chosen_rows: set[int] = set()
        for key in sorted(groups):
            members = groups[key]
            if len(members) > setup.captions_per_image:
                members = [members[i] for i in rng.choice(len(members), setup.captions_per_image, replace=False)]
            chosen_rows.update(members)
        kept = [row for index, row in enumerate(kept) if index in chosen_rows]
    for position, (lang, share) in enumerate(sorted(setup.low_resource.items())):
        own = [index for index, row in enumerate(kept) if row["lang"] == lang]
        count = max(1, round(share * len(own))) if own else 0
        dropped = set(own) - set(_shuffled(own, setup.seed, 2 + position)[:count])
        kept = [row for index, row in enumerate(kept) if index not in dropped]
    _log_selection(rows, kept)
    return kept


def _text(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return "/".join(value)
    if isinstance(value, dict):
        return "/".join(f"{key} {share:g}" for key, share in value.items())
    return f"{value:g}" if isinstance(value, float) else str(value)


def _shuffled(values: list[Any], seed: int, stream: int) -> list[Any]:
    order = np.random.default_rng([seed, stream]).permutation(len(values))
    return [values[i] for i in order]


def _log_selection(rows: Sequence[dict[str, Any]], kept: Sequence[dict[str, Any]]) -> None:
    before, after = Counter(row["lang"] for row in rows), Counter(row["lang"] for row in kept)
    images = {lang: len({row["image_id"] for row in kept if row["lang"] == lang}) for lang in before}
    parts = [f"{lang} {after[lang]} of {before[lang]} on {images[lang]} images" for lang in sorted(before)]
    logger.info("training setup keeps %d of %d captions: %s", len(kept), len(rows), ", ".join(parts))


class Sampler(Protocol):
    """The batch order of an epoch: indices into the training captions, one array per step, seeded by the epoch."""

    def batches(self, epoch: int) -> list[np.ndarray]: ...


@dataclass(frozen=True)
class OneLanguageSampler:
    """Batches of one language each: every step draws a language uniformly, then the next ``batch_size`` captions
    of its own shuffled stream (reshuffled when it runs out; its last batch may be smaller). An epoch has as many
    steps as one pass over every language takes. Deterministic for a given seed and epoch.

    Attributes:
        langs: (N,) language index of each training caption.
    """

    langs: np.ndarray
    batch_size: int
    seed: int = 0

    def batches(self, epoch: int) -> list[np.ndarray]:
        rng = np.random.default_rng([self.seed, epoch, 1])
        groups = [np.flatnonzero(self.langs == lang) for lang in np.unique(self.langs)]
        count = sum(math.ceil(len(group) / self.batch_size) for group in groups)
        streams: list[list[np.ndarray]] = [[] for _ in groups]
        batches = []
        for lang in rng.integers(len(groups), size=count):
            if not streams[lang]:
                order = rng.permutation(groups[lang])
                streams[lang] = [order[i : i + self.batch_size] for i in range(0, len(order), self.batch_size)]
            batches.append(streams[lang].pop(0))
        return batches
