"""The dataset card (README.md) of an exported caption variant, rendered with huggingface_hub's card classes.

The YAML front matter is :class:`huggingface_hub.DatasetCardData`'s (languages, license, size, task categories, tags
and the ``configs`` that point ``load_dataset`` at the Parquet files). The body is our Jinja template
``corpora/templates/dataset_card.md``, rendered by :meth:`huggingface_hub.DatasetCard.from_template`; it keeps every
section of the Hub's dataset card template (``datasetcard_template.md``: details, uses, structure, creation,
annotations, personal information, bias, risks and limitations, citation, ...) and fills each with what is true of
the variant. Our own template rather than the Hub's default one, because the export promises byte-identical folders
for the same inputs (the default template changes with huggingface_hub's version), and because the Hub's template
holds one free-text field per section where ours holds the tables and the wording per case (human, MT or MMT
captions; generated or real corpus) with only the facts coming from here. What the card says of the source corpus
(terms, producers, citations) is :mod:`corpora.card_sources`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from corpora.card_sources import HUANG2020, MMTR, source_of

if TYPE_CHECKING:
    from huggingface_hub import DatasetCardData

TEMPLATE = "templates/dataset_card.md"  # package data of corpora (pyproject.toml)
TASK_CATEGORIES = ("image-to-text", "text-to-image")


@dataclass(frozen=True)
class Translation:
    """The system that synthesized a variant's captions, and the settings it was trained and run with.

    Attributes:
        origin: ``mmt`` (the regional multimodal NMT) or ``mt`` (the text-only system).
        mt_backend: mmt.mt_system, the ``mt`` system's backend: ``text-only`` or ``seq2seq``.
        held: mmt.seq2seq.held, language pair (``en-de``) -> the pre-trained model the seq2seq backend starts from.
        as_is: mmt.seq2seq.as_is: held models translate as released, not fine-tuned.
        extractor: features.extractor, the region features the MMT reads.
        finetune_corpus: corpus_roles.mmt_finetune, whose translation captions fine-tune both systems.
        beam: synthesis.beam, the beam width of the translations.
        kinds: synthesis.kinds, the kinds of human pivot captions translated.
    """

    origin: Literal["mt", "mmt"]
    mt_backend: str
    held: Mapping[str, str]
    as_is: bool
    extractor: str
    finetune_corpus: str
    beam: int
    kinds: tuple[str, ...]


@dataclass(frozen=True)
class CardInfo:
    """What the dataset card says about where the captions come from.

    Attributes:
        variant: The variant's name (``mmt_f``).
        definition: The variant in words (``MMT(f): origin mmt, 1 hop, hops kept: 1``).
        corpus: The corpus's name in params.yaml (corpus_roles.target).
        dataset: The images table's dataset name.
        generated: True for the built-in synthetic data this project generates; False for a real corpus (its own
            license applies).
        pivot: languages.pivot.
        targets: mmt.targets, the languages captions were synthesized in and back from.
        settings: Further params that shaped the data, ``key -> value`` (shown as a table).
        translation: The system of the synthesized captions; None for a variant of human captions alone.
    """

    variant: str
    definition: str
    corpus: str
    dataset: str
    generated: bool
    pivot: str
    targets: tuple[str, ...]
    settings: Mapping[str, object] = field(default_factory=dict)
    translation: Translation | None = None


class RegionShape(Protocol):
    """What the card says of the region features (a :class:`~corpora.hf_dataset.RegionSource` has it)."""

    path: Path
    max_regions: int
    dim: int


SIZE_CATEGORIES = (
    (1_000, "n<1K"),
    (10_000, "1K<n<10K"),
    (100_000, "10K<n<100K"),
    (1_000_000, "100K<n<1M"),
    (10_000_000, "1M<n<10M"),
    (100_000_000, "10M<n<100M"),
)

COLUMN_DOCS = {
    "image_id": "the image's id in the corpus's images table",
    "text": "the caption",
    "lang": "its language (ISO 639-1)",
    "kind": "`comparable` (written for the image, Multi30K task 2 style) or `translation` (a translation of the "
    "pivot caption, task 1 style)",
    "caption_id": "unique id; a synthesized caption's id is its parent's id, `>`, and the system",
    "origin": "`human` (written by people, or by the built-in generator), `mt` (text-only machine translation) or "
    "`mmt` (multimodal machine translation, the image's regions as context)",
    "system": "the translation system that produced it, `<origin>-<source language>-<target language>` "
    "(empty for human captions)",
    "hop": "0 for human captions; 1 translated forward from the pivot, 2 back into the pivot, 3 forward again, ...",
    "parent_id": "the `caption_id` of the caption it was translated from (empty for human captions)",
    "image_path": "the image file, relative to the corpus's image folder",
    "image": "the image file's bytes (decoded to a PIL image on access)",
    "regions": "the image's region features (K x D, float16): the first `num_regions` rows, then zeros",
    "region_boxes": "their boxes (K x 4, float32, x1 y1 x2 y2 in pixels)",
    "num_regions": "how many of the K rows are regions",
}


def dataset_card(
    card: CardInfo,
    rows: Mapping[str, Mapping[str, int]],
    origins: Sequence[Mapping[str, Any]],
    columns: Sequence[str],
    regions: RegionShape | None,
    *,
    data_dir: str,
    disk_dir: str,
) -> str:
    """The README.md of an exported variant: YAML front matter for the Hub and ``load_dataset``, then the body.

    Args:
        card: Where the captions come from.
        rows: Hugging Face split -> language -> captions, splits in the order of the dataset.
        origins: Captions (``caption_id_count``) per ``split`` (its Hugging Face name), ``lang``, ``origin``,
            ``system`` and ``hop``, in the order of the table.
        columns: The dataset's columns in order, each a key of :data:`COLUMN_DOCS`.
        regions: The store the ``regions`` column comes from, if there is one.
        data_dir: The folder of the Parquet files, relative to the card.
        disk_dir: The folder ``save_to_disk`` wrote, relative to the card.
    """
    from huggingface_hub import DatasetCard

    languages = sorted({lang for counts in rows.values() for lang in counts})
    total = sum(sum(counts.values()) for counts in rows.values())
    source = source_of(card.dataset, card.generated)
    synthesized = [row for row in origins if row["origin"] != "human"]
    systems = sorted({row["system"] for row in synthesized})
    values = {
        "pretty_name": _pretty_name(card),
        "card": card,
        "source": source,
        "translation": card.translation,
        "total": total,
        "languages": languages,
        "targets_code": _code(card.targets),
        "settings": [(key, _yaml_value(value)) for key, value in card.settings.items()],
        "origins": origins,
        "synthesized": sum(row["caption_id_count"] for row in synthesized),
        "synthesized_splits": sorted({row["split"] for row in synthesized}, key=list(rows).index),
        "systems_code": _code(systems),
        "held_models": _held_models(card.translation, systems),
        "hops": sorted({row["hop"] for row in synthesized}),
        "split_rows": [
            (name, [counts.get(lang, 0) for lang in languages], sum(counts.values())) for name, counts in rows.items()
        ],
        "columns": [(name, COLUMN_DOCS[name]) for name in columns],
        "with_images": "image" in columns,
        "regions": None if regions is None else _regions_note(regions),
        "data_dir": data_dir,
        "disk_dir": disk_dir,
        "citations": [HUANG2020, MMTR, *source.citations],
    }
    template = resources.files("corpora").joinpath(TEMPLATE).read_text(encoding="utf-8")
    rendered = DatasetCard.from_template(_card_data(card, rows, data_dir), template_str=template, **values)
    return f"{str(rendered).rstrip()}\n"


def _card_data(card: CardInfo, rows: Mapping[str, Mapping[str, int]], data_dir: str) -> DatasetCardData:
    """The card's YAML front matter: what the Hub shows and indexes, and the ``configs`` ``load_dataset`` reads."""
    from huggingface_hub import DatasetCardData

    languages = sorted({lang for counts in rows.values() for lang in counts})
    total = sum(sum(counts.values()) for counts in rows.values())
    source = source_of(card.dataset, card.generated)
    return DatasetCardData(
        pretty_name=_pretty_name(card),
        language=languages,
        license=source.license,
        multilinguality="multilingual" if len(languages) > 1 else "monolingual",
        size_categories=[next((label for limit, label in SIZE_CATEGORIES if total < limit), "n>100M")],
        task_categories=list(TASK_CATEGORIES),
        tags=_tags(card),
        configs=[
            {
                "config_name": "default",
                "data_files": [{"split": name, "path": f"{data_dir}/{name}-*.parquet"} for name in rows],
            }
        ],
        # with license: other, the Hub shows these; None leaves them out (a Hub license id needs neither)
        license_name=source.license_name or None,
        license_link=(source.license_link or None) if source.license_name else None,
    )


def _pretty_name(card: CardInfo) -> str:
    return f"mmtr {card.corpus}: caption variant {card.variant}"


def _tags(card: CardInfo) -> list[str]:
    tags = ["image-text-retrieval"]
    if card.translation is not None:
        tags += ["machine-translation", "synthetic-captions"]
        if card.translation.origin == "mmt":
            tags.append("multimodal-machine-translation")
    if card.generated:
        tags.append("synthetic")
    return tags


def _held_models(translation: Translation | None, systems: Sequence[str]) -> list[tuple[str, str | None]]:
    """Per system of the seq2seq backend (``mt-en-de``), the held model it starts from (None: a Marian trained here)."""
    if translation is None or translation.origin != "mt" or translation.mt_backend != "seq2seq":
        return []
    return [(system, translation.held.get(system.split("-", 1)[1])) for system in systems]


def _code(items: Sequence[str]) -> str:
    """``de``, ``fr`` as Markdown code spans, comma-separated."""
    return ", ".join(f"`{item}`" for item in items)


def _regions_note(regions: RegionShape) -> str:
    return (
        f"Region features from the feature store `{regions.path.name}` (K = {regions.max_regions}, "
        f"D = {regions.dim}), one copy per caption."
    )


def _yaml_value(value: object) -> str:
    """A setting as params.yaml would spell it: plain strings bare, anything else in JSON (YAML flow) syntax."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
