"""Human captions read by the adapters, collected row by row into a validated captions table.

Caption ids are stable and readable: ``<image_id>#<lang>#t`` for the one translation caption of an
image (Multi30K task1) and ``<image_id>#<lang>#c<n>`` (n from 1) for its comparable captions (task2,
Flickr30K, COCO).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from corpora.image_files import ListedImage, build_images_table
from corpora.prepared import Corpus
from corpora.tables import captions_table


def translation_id(image_id: str, lang: str) -> str:
    return f"{image_id}#{lang}#t"


def comparable_id(image_id: str, lang: str, number: int) -> str:
    return f"{image_id}#{lang}#c{number}"


@dataclass
class HumanCaptions:
    """Column lists of human captions (origin "human", no system, hop 0, no parent)."""

    caption_id: list[str] = field(default_factory=list)
    image_id: list[str] = field(default_factory=list)
    split: list[str] = field(default_factory=list)
    lang: list[str] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    kind: list[str] = field(default_factory=list)

    def add_translation(self, image_id: str, split: str, lang: str, text: str) -> None:
        self._add(translation_id(image_id, lang), image_id, split, lang, text, "translation")

    def add_comparable(self, image_id: str, split: str, lang: str, number: int, text: str) -> None:
        self._add(comparable_id(image_id, lang, number), image_id, split, lang, text, "comparable")

    def _add(self, caption_id: str, image_id: str, split: str, lang: str, text: str, kind: str) -> None:
        self.caption_id.append(caption_id)
        self.image_id.append(image_id)
        self.split.append(split)
        self.lang.append(lang)
        self.text.append(text)
        self.kind.append(kind)

    def table(self, images: pa.Table) -> pa.Table:
        """The captions as a table, validated against ``images`` (every image_id and split must match)."""
        count = len(self.caption_id)
        return captions_table(
            {
                "caption_id": self.caption_id,
                "image_id": self.image_id,
                "split": self.split,
                "lang": self.lang,
                "text": self.text,
                "origin": ["human"] * count,
                "system": [None] * count,
                "hop": [0] * count,
                "parent_id": [None] * count,
                "kind": self.kind,
            },
            images=images,
        )


def comparable_corpus(
    listed: Sequence[ListedImage],
    texts: Sequence[Sequence[str]],
    *,
    image_root: Path | None,
    dataset: str,
    lang: str,
    outside_allowed: bool = False,
) -> Corpus:
    """Images and their comparable captions (``texts[i]`` describes ``listed[i]``), as a validated corpus
    (``outside_allowed``: image paths may lead out of ``image_root``)."""
    images = build_images_table(listed, image_root=image_root, dataset=dataset, outside_allowed=outside_allowed)
    captions = HumanCaptions()
    for image, image_texts in zip(listed, texts, strict=True):
        for number, text in enumerate(image_texts, start=1):
            captions.add_comparable(image.image_id, image.split, lang, number, text)
    return Corpus(images=images, captions=captions.table(images))
