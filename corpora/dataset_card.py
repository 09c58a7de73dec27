"""The dataset card (README.md) of an exported caption variant, rendered from ``corpora/templates/dataset_card.md``.

The template is the card's text with ``string.Template`` fields (``${name}``); :func:`dataset_card` gives each its
value: the YAML front matter the Hub and ``load_dataset`` read (languages, license note, size, the ``configs`` that
point at the Parquet files), then where the captions come from, the rows per split and provenance, the columns, how to
load the folder and the license. The field of a repeated line (``${language_items}``, ``${data_files}``,
``${origin_rows}``, ``${split_rows}``, ``${column_items}``) stands at the end of the line before it and takes one
newline-led line per item; an optional block (``${settings_table}``, ``${regions_note}``) ends with its blank line.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from string import Template
from typing import Any, Protocol

TEMPLATE = "templates/dataset_card.md"  # package data of corpora (pyproject.toml)


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
    """

    variant: str
    definition: str
    corpus: str
    dataset: str
    generated: bool
    pivot: str
    targets: tuple[str, ...]
    settings: Mapping[str, object] = field(default_factory=dict)


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
    languages = sorted({lang for counts in rows.values() for lang in counts})
    total = sum(sum(counts.values()) for counts in rows.values())
    pretty = f"mmtr {card.corpus}: caption variant {card.variant}"
    license_name = "mmtr-generated" if card.generated else f"{card.dataset}-license"
    settings = "".join(f"| `{key}` | `{_yaml_value(value)}` |\n" for key, value in card.settings.items())
    values = {
        "pretty_name_yaml": _quoted(pretty),
        "language_items": "".join(f"\n- {lang}" for lang in languages),
        "multilinguality": "multilingual" if len(languages) > 1 else "monolingual",
        "license_name_yaml": _quoted(license_name),
        "size": next((label for limit, label in SIZE_CATEGORIES if total < limit), "n>100M"),
        "data_files": "".join(f"\n  - split: {name}\n    path: {data_dir}/{name}-*.parquet" for name in rows),
        "pretty_name": pretty,
        "variant": card.variant,
        "corpus": card.corpus,
        "dataset": card.dataset,
        "total": total,
        "languages": ", ".join(languages),
        "definition": card.definition,
        "pivot": card.pivot,
        "targets": ", ".join(f"`{lang}`" for lang in card.targets) or "none",
        "settings_table": f"| setting | value |\n|---|---|\n{settings}\n" if card.settings else "",
        "origin_rows": "".join(
            f"\n| {row['split']} | {row['lang']} | {row['origin']} | {row['system'] or '-'} | "
            f"{row['hop']} | {row['caption_id_count']} |"
            for row in origins
        ),
        "language_columns": " | ".join(languages),
        "count_rules": "---:|" * (len(languages) + 1),
        "split_rows": "".join(
            f"\n| {name} | {' | '.join(str(counts.get(lang, 0)) for lang in languages)} | {sum(counts.values())} |"
            for name, counts in rows.items()
        ),
        "column_items": "".join(f"\n- `{name}`: {COLUMN_DOCS[name]}" for name in columns),
        "images_note": _images_note("image" in columns),
        "regions_note": "" if regions is None else f"{_regions_note(regions)}\n\n",
        "data_dir": data_dir,
        "disk_dir": disk_dir,
        "license": _license(card),
    }
    text = resources.files("corpora").joinpath(TEMPLATE).read_text(encoding="utf-8")
    return Template(text).substitute(values)


def _images_note(with_images: bool) -> str:
    if not with_images:
        return (
            "The images are not embedded (params `export.images: false`): `image_path` is relative to the "
            "corpus's image folder."
        )
    return "Each row holds its image's bytes (one copy per caption), so the folder loads after the source images move."


def _regions_note(regions: RegionShape) -> str:
    return (
        f"Region features from the feature store `{regions.path.name}` (K = {regions.max_regions}, "
        f"D = {regions.dim}), one copy per caption."
    )


def _license(card: CardInfo) -> str:
    if card.generated:
        return (
            "Built-in synthetic data: the images and human captions were generated by mmtr's own generator "
            "(corpora/synthetic) from a seed, and the synthesized captions by models trained on them; no "
            "third-party data is included. mmtr's code is MIT-licensed."
        )
    return (
        f"Derived from `{card.dataset}`: its images and human captions keep the source dataset's license "
        f"and terms of use, and the synthesized captions are derived from them. Check that license "
        f"before you share or publish this folder."
    )


def _quoted(text: str) -> str:
    """A YAML double-quoted scalar (JSON's string syntax is a subset of YAML's)."""
    return json.dumps(text, ensure_ascii=False)


def _yaml_value(value: object) -> str:
    """A setting as params.yaml would spell it: plain strings bare, anything else in JSON (YAML flow) syntax."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
