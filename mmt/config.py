"""The root configs of the MMT's params sections: ``SystemsConfig`` (`mmt`), ``SynthesisConfig`` (`synthesis`) and
``AugmentConfig`` (`augment`).

``mmt.mt_system`` is one of :data:`TEXT_ONLY_BACKENDS`, the names of the text-only rows of
:data:`mmt.systems.BACKENDS` (a test keeps the two in step).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from common.checks import SettingError, check, check_choice, check_not_empty, check_range
from mmt.augment import VARIANTS, Variant
from mmt.marian import MarianSettings
from mmt.model import MMTConfig
from mmt.synthesis import MAX_HOPS
from mmt.text import SubwordConfig
from mmt.train import TrainConfig

SystemName = Literal["mmt", "mt"]  # the two systems of a direction (folder prefixes, caption origins)
TEXT_ONLY_BACKENDS = ("text-only", "marian")  # the backends of mmt.systems.BACKENDS that read no image regions
VARIANT_NAME = re.compile(r"[a-z][a-z0-9_]*")  # no hyphen: retrieval run names are <model>-<variant>-<role>


@dataclass(frozen=True)
class SystemsConfig:
    """The `mmt` section of params.yaml.

    Attributes:
        targets: Languages that get pivot<->target systems and synthesis (a subset of languages.targets).
        text: Subword processing of every direction.
        model: The regional model's architecture.
        pretrain: Text-only training on the parallel corpus.
        finetune: Training on the translation captions (with region features for the MMT), with
            ``finetune.mixed_pairs`` pairs of the parallel corpus mixed into each epoch, text-only.
        beam: Beam width of the test translations.
        meteor: Score the test translations with METEOR 1.5 too (:mod:`mmt.meteor`: a Java run, about 7 s for
            English, which loads its paraphrase table); false leaves ``meteor`` None with the reason in the note.
        mt_system: The backend of the text-only MT system (the mt_* variants, translate-search).
        marian: The Marian backend's models.
        systems: Which systems `train_mmt` trains and `synthesize` runs: ``mmt`` (needs the corpus's region
            features) and ``mt``. ``[mt]`` alone is the text-only route, for corpora without images.
    """

    targets: tuple[str, ...] = ("de",)
    text: SubwordConfig = field(default_factory=SubwordConfig)
    model: MMTConfig = field(default_factory=MMTConfig)
    pretrain: TrainConfig = field(default_factory=TrainConfig)
    finetune: TrainConfig = field(default_factory=TrainConfig)
    beam: int = 5
    meteor: bool = True
    mt_system: str = "text-only"
    marian: MarianSettings = field(default_factory=MarianSettings)
    systems: tuple[SystemName, ...] = ("mmt", "mt")

    def __post_init__(self) -> None:
        check_range("beam", self.beam, 1, 64)
        check_not_empty("systems", self.systems, "system")
        for index, name in enumerate(self.systems):
            check_choice(f"systems[{index}]", name, SystemName)
        check(len(set(self.systems)) == len(self.systems), "systems", list(self.systems), "each system once")
        check(self.mt_system in TEXT_ONLY_BACKENDS, "mt_system", self.mt_system, ", ".join(TEXT_ONLY_BACKENDS))
        mixed = self.pretrain.mixed_pairs
        check(mixed == 0, "pretrain.mixed_pairs", mixed, "0 (finetune.mixed_pairs mixes the parallel corpus in)")


@dataclass(frozen=True)
class SynthesisConfig:
    """Caption synthesis (the `synthesis` section of params.yaml).

    Attributes:
        kinds: Which human pivot captions are translated: comparable (Multi30K task 2 style) and/or
            translation (task 1 style, the MMT's own training data).
        shard_size: Captions per shard (the unit of resumption and of distribution).
        batch_size: Sentences per decoding batch.
        beam: Beam width.
        hops: Translation passes per system (:func:`~mmt.synthesis.hop_languages`): 1 forward only, 2 forward and
            back, ...
    """

    kinds: tuple[Literal["comparable", "translation"], ...] = ("comparable",)
    shard_size: int = 1000
    batch_size: int = 64
    beam: int = 5
    hops: int = 2

    def __post_init__(self) -> None:
        check_not_empty("kinds", self.kinds, "kind of caption (comparable, translation)")
        check_range("shard_size", self.shard_size, 1, 10_000_000)
        check_range("batch_size", self.batch_size, 1, 65_536)
        check_range("beam", self.beam, 1, 64)
        check_range("hops", self.hops, 1, MAX_HOPS)


@dataclass(frozen=True)
class AugmentConfig:
    """The `augment` section of params.yaml.

    Attributes:
        custom_variants: Variants of your own by name (``[a-z][a-z0-9_]*``, not a preset's name), beside the
            presets of :data:`~mmt.augment.VARIANTS`.
    """

    custom_variants: dict[str, Variant] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in self.custom_variants:
            key = f"custom_variants.{name}"
            if not VARIANT_NAME.fullmatch(name):
                raise SettingError(key, f"got {name!r}, allowed: lowercase letters, digits and _ (run names use -)")
            if name in VARIANTS:
                raise SettingError(key, f"a preset has this name; presets: {', '.join(VARIANTS)}")

    @property
    def variants(self) -> dict[str, Variant]:
        """Every variant by name: the presets in their order, then the custom ones."""
        return {**VARIANTS, **self.custom_variants}

    def variant_labels(self) -> dict[str, str]:
        """Variant name -> the papers' notation (``MMT(f+b)``), in the order of :attr:`variants` (the report's rows)."""
        return {name: variant.display_name() for name, variant in self.variants.items()}
