"""The root configs of the MMT's params sections: ``SystemsConfig`` (`mmt`), ``SynthesisConfig`` (`synthesis`) and
``AugmentConfig`` (`augment`).

``mmt.mt_system`` is one of :data:`TEXT_ONLY_BACKENDS`, the names of the text-only rows of
:data:`mmt.systems.BACKENDS` (a test keeps the two in step).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from common.checks import (
    SettingError,
    check,
    check_choice,
    check_fraction,
    check_not_empty,
    check_positive,
    check_range,
)
from mmt.augment import VARIANTS, Variant
from mmt.marian import MarianTrainConfig
from mmt.model import MMTConfig
from mmt.seq2seq_languages import FAMILIES
from mmt.synthesis import MAX_HOPS
from mmt.text import SubwordConfig
from mmt.train import TrainConfig

SystemName = Literal["mmt", "mt"]  # the two systems of a direction (folder prefixes, caption origins)
TEXT_ONLY_BACKENDS = ("text-only", "seq2seq")  # the backends of mmt.systems.BACKENDS that read no image regions
VARIANT_NAME = re.compile(r"[a-z][a-z0-9_]*")  # no hyphen: retrieval run names are <model>-<variant>-<role>
PAIR_KEY = re.compile(r"[a-z]{2}-[a-z]{2}")


@dataclass(frozen=True)
class Seq2SeqFinetuneConfig:
    """Fine-tuning a held model on the caption translations of its pair (`mmt.seq2seq.finetune`).

    Attributes:
        epochs: Passes over the pair's training captions; the epoch with the lowest validation loss is kept.
        batch_size: Sentence pairs per step.
        max_steps: Stop after this many steps, if set (smoke tests, quick demos).
        max_len: Subwords kept per training sentence.
        lr: AdamW peak learning rate, reached after ``warmup_steps``.
        warmup_steps: Linear warm-up steps; the rate then decays with the inverse square root of the step.
        weight_decay: AdamW weight decay.
        label_smoothing: Label smoothing of the cross-entropy.
        clip_norm: Gradient norm clipping.
    """

    epochs: int = 3
    batch_size: int = 16
    max_steps: int | None = None
    max_len: int = 100
    lr: float = 5e-5
    warmup_steps: int = 100
    weight_decay: float = 0.0
    label_smoothing: float = 0.1
    clip_norm: float = 1.0

    def __post_init__(self) -> None:
        check_range("epochs", self.epochs, 1, 10_000)
        check_range("batch_size", self.batch_size, 1, 65_536)
        if self.max_steps is not None:
            check_range("max_steps", self.max_steps, 1, 100_000_000)
        check_range("max_len", self.max_len, 1, 65_536)
        check_positive("lr", self.lr, below=1.0)
        check_range("warmup_steps", self.warmup_steps, 0, 100_000_000)
        check_fraction("weight_decay", self.weight_decay)
        check_fraction("label_smoothing", self.label_smoothing, below_one=True)
        check_positive("clip_norm", self.clip_norm)


@dataclass(frozen=True)
class Seq2SeqSettings:
    """The seq2seq MT backend (the `mmt.seq2seq` section of params.yaml): models transformers loads with its auto
    classes (OPUS-MT Marian, NLLB, M2M100, mBART-50).

    Attributes:
        held: "<src>-<tgt>" -> a model you hold: a folder name in the MT models folder (e.g. opus-mt-en-de,
            downloaded elsewhere) or a model id in the local Hugging Face cache (e.g.
            facebook/nllb-200-distilled-600M); pairs without one get a small Marian trained here.
        as_is: Use held models as they are; false (the default) fine-tunes them on the pair's caption translations.
        finetune: How held models are fine-tuned.
        language_codes: Family (marian-multi, nllb, m2m100, mbart50) -> ISO 639-1 language -> the model's code,
            over the family's own table (:mod:`mmt.seq2seq_languages`).
        train: The Marian trained here for the other pairs, and how.
    """

    held: dict[str, str] = field(default_factory=dict)
    as_is: bool = False
    finetune: Seq2SeqFinetuneConfig = field(default_factory=Seq2SeqFinetuneConfig)
    language_codes: dict[str, dict[str, str]] = field(default_factory=dict)
    train: MarianTrainConfig = field(default_factory=MarianTrainConfig)

    def __post_init__(self) -> None:
        for pair, name in self.held.items():
            check(PAIR_KEY.fullmatch(pair) is not None, f"held.{pair}", pair, "<src>-<tgt>")
            check(bool(name.strip()), f"held.{pair}", name, "a folder name or a model id")
        for family, codes in self.language_codes.items():
            check(family in FAMILIES[1:], f"language_codes.{family}", family, ", ".join(FAMILIES[1:]))
            for language, code in codes.items():
                key = f"language_codes.{family}.{language}"
                check(re.fullmatch(r"[a-z]{2}", language) is not None, key, language, "an ISO 639-1 code")
                check(bool(code.strip()), key, code, "the model's code")


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
        seq2seq: The seq2seq backend's models.
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
    seq2seq: Seq2SeqSettings = field(default_factory=Seq2SeqSettings)
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
        max_captions: Translate only the first this many source captions (in table order), if set: a fixed
            sample whatever the corpus size (cost measurements, smoke runs); the others get no synthesized caption.
        to_pivot: Also translate the target language's own human captions (of ``kinds``, train split) into the
            pivot, one pass per system (MULE's Table 4(b)); the variants ``mt_to_pivot``/``mmt_to_pivot`` add them.
    """

    kinds: tuple[Literal["comparable", "translation"], ...] = ("comparable",)
    shard_size: int = 1000
    batch_size: int = 64
    beam: int = 5
    hops: int = 2
    max_captions: int | None = None
    to_pivot: bool = False

    def __post_init__(self) -> None:
        check_not_empty("kinds", self.kinds, "kind of caption (comparable, translation)")
        check_range("shard_size", self.shard_size, 1, 10_000_000)
        check_range("batch_size", self.batch_size, 1, 65_536)
        check_range("beam", self.beam, 1, 64)
        check_range("hops", self.hops, 1, MAX_HOPS)
        if self.max_captions is not None:
            check_range("max_captions", self.max_captions, 1, 100_000_000)


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
