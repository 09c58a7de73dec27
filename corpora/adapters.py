"""Every dataset adapter by name: one row each (its settings dataclass and its reader).

Add a dataset format: write ``corpora/<format>.py`` (a config dataclass and a reader returning a
:class:`~corpora.prepared.Corpus`), add its row here and its settings field to
:class:`~corpora.config.PrepareConfig`; a corpus's ``format`` in params.yaml then selects it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common.text_input import TextCleaner
from corpora.hf_captions import HfConfig, read_hf
from corpora.karpathy import KarpathyConfig, read_karpathy
from corpora.languages import Languages
from corpora.multi30k import Multi30kConfig, discover_languages, read_multi30k
from corpora.prepared import Corpus
from corpora.scan_captions import ScanCaptionsConfig, read_scan_captions

# reader(config, source, image_root, languages, dataset, text, outside_allowed): image_root None leaves image sizes
# null; text cleans (and counts what it removed from) every caption; outside_allowed lets image paths lead out of
# image_root (prepare.images_outside_root)
Reader = Callable[[Any, Path, Path | None, Languages, str, TextCleaner, bool], Corpus]


@dataclass(frozen=True)
class Adapter:
    config_type: type
    read: Reader


def _read_multi30k(
    config: Multi30kConfig,
    source: Path,
    images: Path | None,
    languages: Languages,
    dataset: str,
    text: TextCleaner,
    outside: bool,
) -> Corpus:
    # every language the source holds, the pivot first: naming another target in params.yaml must not rerun prepare
    found = discover_languages(source, splits=config.splits, tasks=config.tasks, tokenized=config.tokenized)
    held = [languages.pivot, *(lang for lang in found if lang != languages.pivot)]
    return read_multi30k(
        source,
        languages=held,
        splits=config.splits,
        image_root=images,
        dataset=dataset,
        tasks=config.tasks,
        tokenized=config.tokenized,
        eval_sets=config.eval_sets,
        text=text,
        outside_allowed=outside,
    )


def _read_karpathy(
    config: KarpathyConfig,
    source: Path,
    images: Path | None,
    languages: Languages,
    dataset: str,
    text: TextCleaner,
    outside: bool,
) -> Corpus:
    return read_karpathy(
        source,
        dataset=dataset,
        image_root=images,
        lang=languages.pivot,
        captions_per_image=config.captions_per_image,
        restval=config.restval,
        text=text,
        outside_allowed=outside,
    )


def _read_scan(
    config: ScanCaptionsConfig,
    source: Path,
    images: Path | None,
    languages: Languages,
    dataset: str,
    text: TextCleaner,
    outside: bool,
) -> Corpus:
    return read_scan_captions(
        source,
        splits=config.splits,
        dataset=dataset,
        lang=languages.pivot,
        captions_per_image=config.captions_per_image,
        text=text,
        outside_allowed=outside,
    )


def _read_hf(
    config: HfConfig,
    source: Path,
    images: Path | None,
    languages: Languages,
    dataset: str,
    text: TextCleaner,
    outside: bool,
) -> Corpus:
    return read_hf(str(source), config, image_root=images, dataset=dataset, text=text, outside_allowed=outside)


ADAPTERS: dict[str, Adapter] = {
    "multi30k": Adapter(Multi30kConfig, _read_multi30k),  # task1 + task2 layout (and the built-in data)
    "karpathy": Adapter(KarpathyConfig, _read_karpathy),  # dataset_{flickr30k,coco}.json
    "scan": Adapter(ScanCaptionsConfig, _read_scan),  # SCAN precomp <stem>_caps.txt
    "hf": Adapter(HfConfig, _read_hf),  # a Hugging Face dataset: save_to_disk, Parquet files, or the datasets cache
}


def read_corpus(
    format: str,
    config: object,
    source: Path,
    *,
    image_root: Path | None,
    languages: Languages,
    dataset: str,
    text: TextCleaner | None = None,
    outside_allowed: bool = False,
) -> Corpus:
    """Images and human captions of the dataset at ``source``, read by the adapter ``format``, every caption cleaned
    by ``text`` (default: NFC, control characters refused); ``outside_allowed``: image paths may lead out of
    ``image_root``.

    Raises:
        ValueError: an unknown format (the known ones are listed).
        TypeError: ``config`` is not the adapter's config dataclass.
    """
    if format not in ADAPTERS:
        raise ValueError(f"unknown dataset format {format!r}; known: {', '.join(ADAPTERS)}")
    adapter = ADAPTERS[format]
    if not isinstance(config, adapter.config_type):
        raise TypeError(f"format {format} takes a {adapter.config_type.__name__}, got {type(config).__name__}")
    return adapter.read(config, source, image_root, languages, dataset, text or TextCleaner(), outside_allowed)
