"""Generate the synthetic dataset folder: images, object boxes, Multi30K-style captions and parallel text.

The folder follows the public multi30k/dataset layout, so the Multi30K adapter reads it like the real
data::

    images/<image_id>.png                      objects.parquet (one row per drawn shape)
    task1/image_splits/{split}.txt             task1/raw/{split}.{lang}.gz    (one translation per image)
    task2/image_splits/{split}_images.txt      task2/raw/{split}.{n}.{lang}.gz (independent captions)
    parallel/{pivot}-{x}/{split}.{lang}.gz     meta.json

and two files for evaluation only (never read for training)::

    task1/image_dependent/{split}.{lang}.gz    the words of each task1 caption that depend on the image
    task1/contrastive/test.{pivot}-{x}.jsonl   one vague pivot sentence, two images, the right translation of each

The world carries the mechanisms the papers measure: pivot captions that leave to the image what the
target language must say (``underspecified``), several wordings of each meaning (``paraphrase``), words
and frames only the parallel corpus uses (its register; its ``formal`` pairs say formal words in both languages),
uncommon words in the comparable captions that only the parallel corpus's formal pairs also say (``uncommon``: the
captions' long tail, which the translation captions lack), and annotator mistakes in the comparable captions
(``noise``).

With ``config.flickr`` enabled it also writes a second, Flickr30K-like corpus of the same world in the
Karpathy split format (pivot-language captions only), which the Karpathy adapter reads::

    flickr/dataset_flickr30k.json              flickr/images/<image_id>.png   flickr/objects.parquet

Its image ids (``flk000001``...) differ from the first corpus's (``syn000001``...), and its random streams
are its own, so the first corpus's files are the same bytes with or without it.

Everything is written into a temporary sibling folder that replaces ``out_dir`` only when complete.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from dataclasses import field as dataclass_field
from pathlib import Path

from common.errors import InputError
from common.files import atomic_dir, write_text
from corpora.languages import Languages
from corpora.synthetic import layout
from corpora.synthetic.config import SplitCounts, SyntheticConfig
from corpora.synthetic.dependence import contrastive_items, image_dependent_words
from corpora.synthetic.describe import caption_meaning, parallel_meaning, underspecify
from corpora.synthetic.grammars import GRAMMARS
from corpora.synthetic.grammars.common import Register, Wording
from corpora.synthetic.inventory import COLOURS, PLACES, RELATIONS, SHAPES, SIZES
from corpora.synthetic.meaning import Meaning
from corpora.synthetic.noise import NOISE_KINDS, NoiseKind, draw_noise, missed_object, typo, wrong_colour
from corpora.synthetic.render import png_bytes, render
from corpora.synthetic.scenes import Scene, sample_scene
from corpora.synthetic.streams import array_stream, chance, stream

SPLITS = ("train", "val", "test")
PROGRESS_EVERY = 50  # images between progress reports
FLICKR_FOLDER = "flickr"
FLICKR_SPLIT_FILE = "dataset_flickr30k.json"  # the name of the real Flickr30K Karpathy split file

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class GenerationSummary:
    """What :func:`generate` wrote, for logs and a table display."""

    images: Mapping[str, int]  # split -> images
    objects: int  # shapes drawn over all images
    captions: Mapping[str, int]  # language -> captions (translation and comparable, all splits)
    parallel_pairs: Mapping[str, int]  # "<pivot>-<x>" -> sentence pairs over all splits
    flickr_images: Mapping[str, int]  # split -> images of the second corpus (all 0 when not written)
    flickr_objects: int  # shapes drawn over the second corpus's images
    flickr_captions: Mapping[str, int]  # pivot language -> captions of the second corpus
    vague_translations: int = 0  # task1 pivot captions that leave a colour or shape to the image
    noisy_captions: Mapping[str, int] = dataclass_field(default_factory=dict)  # noise kind -> captions
    contrastive_items: Mapping[str, int] = dataclass_field(default_factory=dict)  # "<pivot>-<x>" -> items

    def as_rows(self) -> list[dict[str, object]]:
        """One row per count: ``{"item": "images", "key": "train", "count": 1000}``.

        The second corpus's rows ("flickr images", ...) appear only when it was written.
        """
        groups = [("images", self.images), ("objects", {"all": self.objects}), ("captions", self.captions)]
        groups.append(("parallel pairs", self.parallel_pairs))
        groups.append(("vague translations", {"task1": self.vague_translations}))
        groups.append(("noisy captions", self.noisy_captions))
        groups.append(("contrastive items", self.contrastive_items))
        if any(self.flickr_images.values()):
            groups.append(("flickr images", self.flickr_images))
            groups.append(("flickr objects", {"all": self.flickr_objects}))
            groups.append(("flickr captions", self.flickr_captions))
        return [{"item": item, "key": key, "count": count} for item, counts in groups for key, count in counts.items()]


@dataclass(frozen=True)
class _Image:
    image_id: str
    split: str
    scene: Scene


@dataclass(frozen=True)
class _ImageSet:
    """The images of one corpus: their counts, their id prefix, and the names their random streams start with."""

    splits: SplitCounts
    id_prefix: str
    stream_prefix: tuple[str, ...]


@dataclass(frozen=True)
class _Run:
    config: SyntheticConfig
    seed: int
    languages: Languages

    def wording(
        self,
        rng: random.Random,
        lang: str,
        register: Register = "caption",
        *,
        own_style: bool = False,
        formal: bool = False,
        comparable: bool = False,
    ) -> Wording:
        """The word choices of one sentence in ``lang``; the pivot says vague mentions vaguely. A ``comparable``
        caption may say uncommon words; a ``formal`` parallel sentence says the register's formal words."""
        seed = int(rng.random() * 2**53)
        underspecify = register == "caption" and lang == self.languages.pivot
        uncommon = self.config.uncommon if comparable else 0.0
        return Wording(
            seed,
            register=register,
            paraphrase=self.config.paraphrase,
            underspecify=underspecify,
            own_style=own_style,
            formal=formal,
            uncommon=uncommon,
        )


@dataclass
class _Tally:
    """What the caption writers count for the summary."""

    vague_translations: int = 0
    noisy: dict[str, int] = dataclass_field(default_factory=lambda: dict.fromkeys(NOISE_KINDS, 0))


class _ProgressCounter:
    """Counts the images written over both corpora; reports every ``PROGRESS_EVERY`` and at the end."""

    def __init__(self, total: int, report: Progress | None) -> None:
        self.total, self.report, self.done = total, report, 0

    def advance(self) -> None:
        self.done += 1
        if self.report is not None and (self.done % PROGRESS_EVERY == 0 or self.done == self.total):
            self.report(self.done, self.total)


def generate(
    config: SyntheticConfig,
    out_dir: str | os.PathLike[str],
    *,
    seed: int,
    languages: Languages,
    progress: Progress | None = None,
) -> GenerationSummary:
    """Write the dataset described by ``config`` into ``out_dir`` (replaced as a whole).

    Args:
        config: what to generate.
        out_dir: the dataset folder; nothing appears there unless generation completes.
        seed: seeds every random stream (scenes, pixels, captions, parallel text).
        languages: captions in every language; parallel text pivot-target for each target.
        progress: called as ``progress(done, total)`` every few dozen images and at the end; the images of
            both corpora count.

    Returns:
        The counts of what was written (also stored in ``meta.json``).

    Raises:
        InputError: a language without a grammar (before anything is written).
    """
    unknown = [code for code in languages.all if code not in GRAMMARS]
    if unknown:
        raise InputError(f"languages: no grammar for {unknown}; available grammars: {sorted(GRAMMARS)}")
    run = _Run(config, seed, languages)
    first = _ImageSet(config.splits, id_prefix="syn", stream_prefix=())
    # the second corpus's streams are all named "flickr/...": the first corpus's draws never depend on it
    second = _ImageSet(config.flickr.splits, id_prefix="flk", stream_prefix=(FLICKR_FOLDER,))
    counter = _ProgressCounter(_image_count(first) + _image_count(second), progress)
    with atomic_dir(out_dir) as root:
        images = _write_images(run, first, root / "images", counter)
        layout.write_objects(root / "objects.parquet", [(image.image_id, image.scene) for image in images])
        layout.write_image_splits(root, _ids_by_split(images))
        tally = _Tally()
        captions = _write_captions(run, root, images, tally)
        contrastive = _write_contrastive(run, root, images)
        pairs = _write_parallel(run, root)
        flickr_images = (
            _write_flickr(run, second, root / FLICKR_FOLDER, counter, tally) if config.flickr.enabled else []
        )
        summary = GenerationSummary(
            images=_count_by_split(images),
            objects=_count_objects(images),
            captions=captions,
            parallel_pairs=pairs,
            flickr_images=_count_by_split(flickr_images),
            flickr_objects=_count_objects(flickr_images),
            flickr_captions={languages.pivot: len(flickr_images) * config.flickr.captions_per_image},
            vague_translations=tally.vague_translations,
            noisy_captions=dict(tally.noisy),
            contrastive_items=contrastive,
        )
        _write_meta(root / "meta.json", run, summary)
    return summary


def _image_count(image_set: _ImageSet) -> int:
    return sum(image_set.splits.as_dict().values())


def _write_images(run: _Run, image_set: _ImageSet, folder: Path, counter: _ProgressCounter) -> list[_Image]:
    """Sample and draw the images of ``image_set`` into ``folder``, numbered from 1 in split order."""
    counts = image_set.splits.as_dict()
    splits = [split for split in SPLITS for _ in range(counts[split])]
    rng = stream(run.seed, *image_set.stream_prefix, "images")
    folder.mkdir()
    images: list[_Image] = []
    for number, split in enumerate(splits, start=1):
        scene = _scene(rng, run.config)
        image = _Image(image_id=f"{image_set.id_prefix}{number:06d}", split=split, scene=scene)
        pixels = array_stream(run.seed, *image_set.stream_prefix, "pixels", number)  # own stream per image
        (folder / f"{image.image_id}.png").write_bytes(png_bytes(render(scene, pixels)))
        images.append(image)
        counter.advance()
    return images


def _count_by_split(images: Sequence[_Image]) -> dict[str, int]:
    return {split: sum(image.split == split for image in images) for split in SPLITS}


def _count_objects(images: Sequence[_Image]) -> int:
    return sum(len(image.scene.objects) for image in images)


def _ids_by_split(images: Sequence[_Image]) -> dict[str, list[str]]:
    return {split: [image.image_id for image in images if image.split == split] for split in SPLITS}


def _scene(rng: random.Random, config: SyntheticConfig) -> Scene:
    objects = config.objects_per_image
    return sample_scene(
        rng,
        image_size=config.image_size,
        min_objects=objects.min,
        max_objects=objects.max,
        look_alike=config.look_alike,
    )


def _write_captions(run: _Run, root: Path, images: Sequence[_Image], tally: _Tally) -> dict[str, int]:
    """Task 1: one meaning per image said in every language (vague in the pivot where the image settles it),
    with each target caption's image-dependent words; task 2: captions sampled per language and n."""
    translation_rng = stream(run.seed, "translation")
    meanings = [_translation_meaning(run, translation_rng, image.scene) for image in images]
    tally.vague_translations += sum(meaning != plain for meaning, plain in meanings)
    per_image = run.config.comparable_per_image
    for lang in run.languages.all:
        wording_rng = stream(run.seed, "wording", lang)
        wordings = [run.wording(wording_rng, lang) for _ in images]
        texts = [
            GRAMMARS[lang].realise(meaning, wording) for (meaning, _), wording in zip(meanings, wordings, strict=True)
        ]
        layout.write_split_texts(root / "task1" / "raw", f"{lang}.gz", _by_split(images, texts))
        dependent = [
            " ".join(image_dependent_words(GRAMMARS[lang], meaning, wording))
            for (meaning, _), wording in zip(meanings, wordings, strict=True)
        ]
        layout.write_split_texts(root / "task1" / "image_dependent", f"{lang}.gz", _by_split(images, dependent))
        for n in range(1, per_image + 1):
            rng, noise_rng = stream(run.seed, "comparable", lang, n), stream(run.seed, "noise", lang, n)
            texts = [_human_caption(run, rng, noise_rng, image.scene, lang, tally) for image in images]
            layout.write_split_texts(root / "task2" / "raw", f"{n}.{lang}.gz", _by_split(images, texts))
    return {lang: len(images) * (1 + per_image) for lang in run.languages.all}


def _translation_meaning(run: _Run, rng: random.Random, scene: Scene) -> tuple[Meaning, Meaning]:
    """(the meaning with its vague mention marked, the same meaning unmarked) of one translation caption."""
    plain = caption_meaning(rng, scene)
    return underspecify(rng, scene, plain, run.config.underspecified), plain


def _human_caption(
    run: _Run,
    rng: random.Random,
    noise_rng: random.Random,
    scene: Scene,
    lang: str,
    tally: _Tally,
    *,
    own_style: bool = False,
) -> str:
    """One comparable caption: sampled meaning, vague in the pivot as in task 1, worded (by the annotators of another
    corpus with ``own_style``), maybe with a mistake.

    Mistakes draw from ``noise_rng`` only, so the captions without one do not depend on the noise shares.
    """
    meaning = caption_meaning(rng, scene)
    if lang == run.languages.pivot:
        meaning = underspecify(rng, scene, meaning, run.config.underspecified)
    wording = run.wording(rng, lang, own_style=own_style, comparable=True)
    kind: NoiseKind | None = draw_noise(noise_rng, run.config.noise)
    if kind == "wrong_colour" or kind == "missed_object":
        mistaken = (wrong_colour if kind == "wrong_colour" else missed_object)(noise_rng, meaning)
        kind, meaning = (kind, mistaken) if mistaken is not None else (None, meaning)
    text = GRAMMARS[lang].realise(meaning, wording)
    if kind == "typo":
        mistyped = typo(noise_rng, text)
        kind, text = (kind, mistyped) if mistyped is not None else (None, text)
    if kind is not None:
        tally.noisy[kind] += 1
    return text


def _write_contrastive(run: _Run, root: Path, images: Sequence[_Image]) -> dict[str, int]:
    """Contrastive items of the test images per target language -> ``task1/contrastive/test.<pivot>-<x>.jsonl``."""
    pivot = run.languages.pivot
    test = [(image.image_id, image.scene) for image in images if image.split == "test"]
    counts: dict[str, int] = {}
    for lang in run.languages.targets:
        items = contrastive_items(test, GRAMMARS[pivot], GRAMMARS[lang], limit=run.config.contrastive_items)
        lines = [
            json.dumps(
                {"source": item.source, "image_ids": list(item.image_ids), "translations": list(item.translations)},
                ensure_ascii=False,
            )
            for item in items
        ]
        layout.write_lines(root / "task1" / "contrastive" / f"test.{pivot}-{lang}.jsonl", lines)
        counts[f"{pivot}-{lang}"] = len(items)
    return counts


def _by_split(images: Sequence[_Image], texts: Sequence[str]) -> dict[str, list[str]]:
    pairs = list(zip(images, texts, strict=True))
    return {split: [text for image, text in pairs if image.split == split] for split in SPLITS}


def _write_parallel(run: _Run, root: Path) -> dict[str, int]:
    """Pivot-X sentence pairs for every target language, per split; returns the pairs per language pair."""
    sizes = run.config.parallel_pairs.as_dict()
    pivot = run.languages.pivot
    pairs: dict[str, int] = {}
    for lang in run.languages.targets:
        name = f"{pivot}-{lang}"
        for split in SPLITS:
            source, target = _parallel_split(run, lang, stream(run.seed, "parallel", name, split), sizes[split])
            layout.write_lines(root / "parallel" / name / f"{split}.{pivot}.gz", source)
            layout.write_lines(root / "parallel" / name / f"{split}.{lang}.gz", target)
        pairs[name] = sum(sizes.values())
    return pairs


def _parallel_split(run: _Run, lang: str, rng: random.Random, count: int) -> tuple[list[str], list[str]]:
    """``count`` meanings of fresh scenes (never the dataset's images), said in the pivot and in ``lang``.

    The scenes use the images' object range, so the text shares the captions' vocabulary and numerals.
    """
    source, target = [], []
    pivot = run.languages.pivot
    for _ in range(count):
        meaning = parallel_meaning(rng, _scene(rng, run.config))
        formal = chance(rng, run.config.formal)  # a sentence and its translation share their register
        source.append(GRAMMARS[pivot].realise(meaning, run.wording(rng, pivot, "parallel", formal=formal)))
        target.append(GRAMMARS[lang].realise(meaning, run.wording(rng, lang, "parallel", formal=formal)))
    return source, target


def _write_flickr(
    run: _Run, image_set: _ImageSet, folder: Path, counter: _ProgressCounter, tally: _Tally
) -> list[_Image]:
    """The second corpus: images, their objects, and a Karpathy split file with pivot-language captions."""
    folder.mkdir()
    images = _write_images(run, image_set, folder / "images", counter)
    layout.write_objects(folder / "objects.parquet", [(image.image_id, image.scene) for image in images])
    captions = _flickr_captions(run, images, tally)
    entries = [(f"{image.image_id}.png", image.split, texts) for image, texts in zip(images, captions, strict=True)]
    layout.write_karpathy_split_file(folder / FLICKR_SPLIT_FILE, entries, dataset="flickr30k")
    return images


def _flickr_captions(run: _Run, images: Sequence[_Image], tally: _Tally) -> list[list[str]]:
    """``captions_per_image`` independent pivot captions per image, sampled like the task 2 captions (worded in
    the corpus's own style with ``flickr.own_style``).

    Caption n of every image comes from stream n, so raising ``captions_per_image`` keeps the earlier ones.
    """
    pivot = run.languages.pivot
    per_image: list[list[str]] = [[] for _ in images]
    for n in range(1, run.config.flickr.captions_per_image + 1):
        rng, noise_rng = stream(run.seed, FLICKR_FOLDER, "captions", n), stream(run.seed, FLICKR_FOLDER, "noise", n)
        for texts, image in zip(per_image, images, strict=True):
            texts.append(
                _human_caption(run, rng, noise_rng, image.scene, pivot, tally, own_style=run.config.flickr.own_style)
            )
    return per_image


def _write_meta(path: Path, run: _Run, summary: GenerationSummary) -> None:
    meta = {
        "config": {**asdict(run.config), "seed": run.seed, "languages": list(run.languages.all)},
        "inventory": {
            "shapes": list(SHAPES),
            "colours": {name: list(rgb) for name, rgb in COLOURS.items()},
            "sizes": dict(SIZES),
            "relations": list(RELATIONS),
            "places": list(PLACES),
        },
        "counts": {
            "images": dict(summary.images),
            "objects": summary.objects,
            "captions": dict(summary.captions),
            "parallel_pairs": dict(summary.parallel_pairs),
            "vague_translations": summary.vague_translations,
            "noisy_captions": dict(summary.noisy_captions),
            "contrastive_items": dict(summary.contrastive_items),
            "flickr": {
                "images": dict(summary.flickr_images),
                "objects": summary.flickr_objects,
                "captions": dict(summary.flickr_captions),
            },
        },
    }
    write_text(path, json.dumps(meta, sort_keys=True, indent=2, ensure_ascii=False) + "\n")
