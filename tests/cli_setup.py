"""What `mmtr search` and `mmtr translate` read, written with the project's own writers at a size the caller picks:
a FeatureStore of random region features, the prepared images table, a SAN retrieval checkpoint, and two en->de
translation systems with their sentencepiece text pipelines, the text-only MT (``mt-en-de``) and the regional MMT
(``mmt-en-de``). The weights are random: the commands read them as they read trained ones.

The CLI tests build it tiny; bench/cli_latency.py builds it at the demo's sizes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from common.files import write_text
from corpora import tables
from features.store import FeatureStoreWriter
from mmt.checkpoint import save_mmt
from mmt.model import MMTConfig, MMTShape, RegionalMMT
from mmt.systems import SYSTEM_FILE
from mmt.text import SubwordConfig, TextPipeline
from retrieval.checkpoint import MODEL, save_retrieval
from retrieval.vocab import Vocabulary
from retrieval.zoo.registry import build_model, make_config

COLOURS = {"red": "rot", "blue": "blau", "green": "grün", "yellow": "gelb"}
SHAPES = {"circle": "Kreis", "square": "Quadrat", "star": "Stern", "triangle": "Dreieck"}
PLACES = {"left": "links", "right": "rechts", "top": "oben", "bottom": "unten"}
SENTENCE = "A red circle is to the left of a big blue star."


@dataclass(frozen=True)
class Sizes:
    """Attributes:
    images: Gallery images (the test split).
    regions: K, regions per image.
    dim: D, size of a region feature.
    san: The SAN's config (`retrieval.configs.san`).
    mmt: The translation systems' architecture (`mmt.model`).
    subwords: Subword vocabulary asked for per language (`mmt.text.vocab_size`; sentencepiece gives fewer when the
        sentences hold fewer).
    """

    images: int
    regions: int
    dim: int
    san: dict[str, int]
    mmt: MMTConfig
    subwords: int


TINY = Sizes(6, 2, 8, {"word_dim": 8, "hidden": 8}, MMTConfig(emb_dim=16, hidden=16), 60)
# the demo's: a test split of 200 images, at most 8 given boxes of the compact preset's 256 features, params.yaml's
# retrieval.configs.san, mmt.model and mmt.text.vocab_size
DEMO = Sizes(200, 8, 256, {"word_dim": 128, "hidden": 256}, MMTConfig(emb_dim=128, hidden=128), 1000)


@dataclass(frozen=True)
class CliSetup:
    model: Path  # a retrieval run folder (model.safetensors + model.json)
    store: Path  # the FeatureStore of the gallery
    prepared: Path  # a prepared folder holding images.parquet
    images: Path  # the folder the images table's paths are under (never read)
    mt: Path  # the text-only MT system, en->de
    mmt: Path  # the regional MMT, en->de
    image_ids: list[str]  # of the gallery, in store order

    def search_argv(self, query: str, cache: Path) -> list[str]:
        """`mmtr search` of ``query`` (English) with every folder given (no params file is read)."""
        return [
            *("search", query, "--lang", "en", "--model", str(self.model), "--store", str(self.store)),
            *("--prepared", str(self.prepared), "--images", str(self.images), "--device", "cpu"),
            *("--cache-dir", str(cache)),
        ]

    def translate_argv(self, system: Path) -> list[str]:
        """`mmtr translate` en->de with ``system``; the MMT reads its regions from the store (input lines are then
        ``image_id<TAB>sentence``)."""
        store = ["--store", str(self.store)] if system == self.mmt else []
        return ["translate", "--src", "en", "--tgt", "de", "--device", "cpu", "--model", str(system), *store]


def sentence_pairs() -> list[tuple[str, str]]:
    """English sentences about coloured shapes and their German translations, every combination once."""
    return [
        (f"A {colour} {shape} is on the {place}.", f"Ein {farbe}er {form} ist {ort}.")
        for colour, farbe in COLOURS.items()
        for shape, form in SHAPES.items()
        for place, ort in PLACES.items()
    ]


def build(root: Path, sizes: Sizes, *, seed: int = 0) -> CliSetup:
    """Everything in ``root`` (which must not hold it yet)."""
    torch.manual_seed(seed)
    store, prepared, ids = write_gallery(root, sizes, seed)
    write_retrieval_model(root / "model", sizes)
    mt = write_system(root / "systems" / "mt-en-de", sizes, multimodal=False)
    mmt = write_system(root / "systems" / "mmt-en-de", sizes, multimodal=True)
    return CliSetup(root / "model", store, prepared, root / "images", mt, mmt, ids)


def write_gallery(root: Path, sizes: Sizes, seed: int) -> tuple[Path, Path, list[str]]:
    """A FeatureStore of ``sizes.images`` test images (random features) and the prepared images table naming
    them."""
    ids = [f"img{index:06d}" for index in range(sizes.images)]
    rng = np.random.default_rng(seed)
    store = root / "features"
    shape = (sizes.regions, sizes.dim)
    with FeatureStoreWriter(
        store, image_ids=ids, max_regions=shape[0], dim=shape[1], extractor="compact", checkpoint_sha256=None, config={}
    ) as writer:
        for start in range(0, len(ids), 512):
            count = min(512, len(ids) - start)
            boxes = np.tile(np.array([0.0, 0.0, 8.0, 8.0], np.float32), (count, shape[0], 1))
            writer.write_rows(
                start, rng.normal(size=(count, *shape)).astype(np.float32), boxes, np.full(count, shape[0])
            )
    images = tables.images_table(
        {
            "image_id": ids,
            "split": ["test"] * len(ids),
            "path": [f"{image_id}.png" for image_id in ids],
            "width": [None] * len(ids),
            "height": [None] * len(ids),
            "dataset": ["cli"] * len(ids),
        }
    )
    prepared = root / "prepared"
    prepared.mkdir(parents=True)
    tables.write_images(images, prepared / "images.parquet")
    return store, prepared, ids


def write_retrieval_model(folder: Path, sizes: Sizes) -> None:
    """A SAN checkpoint over the English and German words of :func:`sentence_pairs`."""
    pairs = sentence_pairs()
    vocab = Vocabulary.build(
        [("en", en) for en, _ in pairs] + [("de", de) for _, de in pairs], ("en", "de"), min_count=1
    )
    config = make_config("san", sizes.san)
    model = build_model("san", config, vocab_size=len(vocab), languages=2, region_dim=sizes.dim)
    save_retrieval(
        folder / MODEL,
        model,
        config=config,
        vocab=vocab,
        type_names=("de-human", "en-human"),
        type_weights=[0.5, 0.5],
        region_dim=sizes.dim,
        max_len=100,
        extra={},
    )


def write_system(folder: Path, sizes: Sizes, *, multimodal: bool) -> Path:
    """A system folder of the ``mmt`` backend (``multimodal``) or the ``text-only`` one: its text pipeline, the
    ``finetune`` checkpoint and system.json."""
    pairs = sentence_pairs()
    text = TextPipeline.train(
        [en for en, _ in pairs],
        [de for _, de in pairs],
        src_lang="en",
        tgt_lang="de",
        config=SubwordConfig(vocab_size=sizes.subwords),
        out_dir=folder,
        seed=0,
    )
    model = RegionalMMT(sizes.mmt, MMTShape(text.src_vocab.size, text.tgt_vocab.size, region_dim=sizes.dim))
    with torch.no_grad():  # only fine-tuning with regions moves this bias off zero (mmt.systems checks it)
        model.region_proj.bias.fill_(0.5 if multimodal else 0.0)
    save_mmt(folder / "finetune", model, extra={"text_pipeline": text.identity()})
    backend = "mmt" if multimodal else "text-only"
    write_text(folder / SYSTEM_FILE, json.dumps({"backend": backend, "src": "en", "tgt": "de"}))
    return folder
