"""``SyntheticConfig``: every knob of the synthetic dataset, checked once before anything is written."""

from __future__ import annotations

from dataclasses import dataclass

from corpora.io import InputError
from corpora.synthetic.grammars import GRAMMARS
from corpora.synthetic.inventory import MAX_OBJECTS

MIN_IMAGE_SIZE = 64  # below this the small shapes are a few pixels wide and their outlines merge

_COUNT_FIELDS = (
    "train_images",
    "val_images",
    "test_images",
    "comparable_per_image",
    "parallel_train_pairs",
    "parallel_val_pairs",
    "parallel_test_pairs",
)


@dataclass(frozen=True)
class SyntheticConfig:
    """What to generate. The defaults are a miniature Multi30K (1000/100/100 images) with WMT-like text."""

    seed: int = 0
    languages: tuple[str, ...] = ("en", "de", "fr", "cs")
    pivot: str = "en"  # parallel corpus pairs are pivot-X for every other language
    image_size: int = 224  # pixels per side
    train_images: int = 1000
    val_images: int = 100
    test_images: int = 100
    min_objects: int = 1  # shapes per image
    max_objects: int = 4
    comparable_per_image: int = 5  # Multi30K task 2 style captions per image and language
    parallel_train_pairs: int = 20000  # per language pair
    parallel_val_pairs: int = 500
    parallel_test_pairs: int = 500


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def validate_config(config: SyntheticConfig) -> None:
    """Raise InputError naming the first bad field, its value and what was expected."""
    _check_languages(config)
    for name in ("seed", "image_size", "min_objects", "max_objects", *_COUNT_FIELDS):
        if not _is_int(getattr(config, name)):
            raise InputError(f"synthetic config: {name} = {getattr(config, name)!r} must be an integer")
    for name in ("seed", *_COUNT_FIELDS):
        if getattr(config, name) < 0:
            raise InputError(f"synthetic config: {name} = {getattr(config, name)} must not be negative")
    if config.image_size < MIN_IMAGE_SIZE:
        raise InputError(f"synthetic config: image_size = {config.image_size} must be at least {MIN_IMAGE_SIZE}")
    for name in ("min_objects", "max_objects"):
        if not 1 <= getattr(config, name) <= MAX_OBJECTS:
            raise InputError(f"synthetic config: {name} = {getattr(config, name)} must be in 1..{MAX_OBJECTS}")
    if config.min_objects > config.max_objects:
        raise InputError(
            f"synthetic config: min_objects = {config.min_objects} is larger than max_objects = {config.max_objects}"
        )


def _check_languages(config: SyntheticConfig) -> None:
    languages = config.languages
    if isinstance(languages, str) or not languages:
        raise InputError(f"synthetic config: languages = {languages!r} must be a non-empty list of language codes")
    unknown = [code for code in languages if code not in GRAMMARS]
    if unknown:
        raise InputError(
            f"synthetic config: languages has no grammar for {unknown}; available grammars: {sorted(GRAMMARS)}"
        )
    if len(set(languages)) != len(languages):
        raise InputError(f"synthetic config: languages = {list(languages)} lists a language twice")
    if config.pivot not in languages:
        raise InputError(f"synthetic config: pivot = {config.pivot!r} is not one of languages {list(languages)}")
