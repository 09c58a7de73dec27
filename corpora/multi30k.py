"""Multi30K task1 + task2 captions (layout of the public multi30k/dataset repository) -> canonical tables.

Layout under ``root`` (the built-in synthetic generator writes the same, with stems train/val/test)::

    task1/image_splits/<stem>.txt             image file names, one per line, in corpus order
    task1/raw/<stem>.<lang>.gz                one caption per image; the non-English ones translate the English
    task1/tok/<stem>.lc.norm.tok.<lang>       the same, lowercased and Moses-tokenized (``tokenized=True``)
    task2/image_splits/<stem>_images.txt
    task2/raw/<stem>.<n>.<lang>.gz            n = 1..N independently written captions per image
    task2/tok/<stem>.lc.norm.tok.<n>.<lang>

Line i of every caption file describes the image on line i of its image list. task1 files become
kind="translation" captions, task2 files kind="comparable" ones. Caption files are accepted gzipped or
plain. The tokenized files keep Moses XML escapes (``&apos;``, ``&quot;``, ``&amp;``); they are read as is.

Two optional evaluation files, written by the built-in generator (real Multi30K has neither)::

    task1/image_dependent/<stem>.<lang>.gz    line i: the words of task1 caption i whose form the image decides
                                              (space-separated, empty when none); for every task1 file or none
    task1/contrastive/<test stem>.<src>-<tgt>.jsonl
                                              {"source", "image_ids": [a, b], "translations": [right with a,
                                              right with b]} per line, both images of the test split

They become :attr:`Corpus.image_dependent` and :attr:`Corpus.contrastive`.

Extra evaluation sets (``eval_sets``: name -> :class:`Multi30kEvalSet`) are read like a split whose languages may
be incomplete: a language without files in a set is left out of it (test_2017_flickr has no Czech; test_2018_flickr
had English only until 2020), and the set's images and captions get the split ``eval:<name>``. Their image files lie
in the folder the set names, relative to the corpus's image folder (Ambiguous COCO's MS-COCO images apart from the
Flickr30K ones). An image list line may carry a ``#<suffix>`` after the file name (test_2017_mscoco.txt names
``COCO_val2014_000000398076.jpg#657409``): the file name is the part before it.

Row order: images by split (train, val, test, then the evaluation sets in settings order) in corpus order;
captions by split, then image, then the task1 captions in the requested language order, then the task2 captions
by language and n. Selecting one split, language and kind therefore keeps each image's captions consecutive (the
SCAN convention).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

from common.checks import SettingError, check_not_empty
from common.errors import InputError
from common.files import parse_json, read_lines
from common.text_input import TextCleaner
from corpora.human_captions import HumanCaptions
from corpora.image_files import ListedImage, build_images_table
from corpora.languages import ISO_639_1, check_language
from corpora.prepared import Corpus
from corpora.tables import (
    CONTRASTIVE_SCHEMA,
    IMAGE_DEPENDENT_SCHEMA,
    SPLITS,
    check_eval_set_names,
    check_split_keys,
    contrastive_table,
    eval_split,
    image_dependent_table,
)

Task = Literal["task1", "task2"]
TASKS: tuple[Task, ...] = ("task1", "task2")
logger = logging.getLogger(__name__)
# the tokenizer mmt.metrics.image_dependent_accuracy reads hypotheses with: a recorded word must be one of its tokens
_TOKENIZE_13A = Tokenizer13a()


@dataclass(frozen=True)
class Multi30kSplit:
    """The file stems of one canonical split in task1 and task2; None where a task lacks the split."""

    task1: str | None
    task2: str | None

    def stem(self, task: str) -> str | None:
        return self.task1 if task == "task1" else self.task2


# The splits of the WMT 2016 Multi30K release (29,000 / 1,014 / 1,000 images).
MULTI30K_2016: dict[str, Multi30kSplit] = {
    "train": Multi30kSplit(task1="train", task2="train"),
    "val": Multi30kSplit(task1="val", task2="val"),
    "test": Multi30kSplit(task1="test_2016_flickr", task2="test_2016"),
}


@dataclass(frozen=True)
class Multi30kEvalSet:
    """An extra evaluation set: its file stems and the folder of its images.

    Attributes:
        task1: The task1 file stem (e.g. ``test_2017_flickr``), or None (a task2-only set).
        task2: The task2 file stem, or None.
        images: The folder of its image files, relative to the corpus's image folder ("": that folder itself).
    """

    task1: str | None
    task2: str | None = None
    images: str = ""

    def __post_init__(self) -> None:
        if self.task1 is None and self.task2 is None:
            raise SettingError("task1", "an evaluation set needs a task1 or a task2 file stem")
        folder = Path(self.images)
        if folder.is_absolute() or ".." in folder.parts or "\\" in self.images:
            raise SettingError("images", f"got {self.images!r}, allowed: a folder relative to the corpus's images")

    @property
    def stems(self) -> Multi30kSplit:
        return Multi30kSplit(task1=self.task1, task2=self.task2)


@dataclass(frozen=True)
class Multi30kConfig:
    """How to read a Multi30K-layout folder (the `prepare.multi30k` section of params.yaml).

    Attributes:
        tasks: task1 (translation captions) and/or task2 (comparable captions).
        tokenized: Read ``tok/*.lc.norm.tok.*`` instead of ``raw/*.gz``.
        splits: Canonical split -> file stems in task1/ and task2/.
        eval_sets: Extra evaluation sets, scored beside the test split: name -> file stems and image folder.
    """

    tasks: tuple[Task, ...] = TASKS
    tokenized: bool = False
    splits: dict[str, Multi30kSplit] = field(default_factory=lambda: dict(MULTI30K_2016))
    eval_sets: dict[str, Multi30kEvalSet] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_not_empty("tasks", self.tasks, "task (task1, task2)")
        check_split_keys("splits", self.splits)
        check_eval_set_names("eval_sets", self.eval_sets)


@dataclass(frozen=True)
class _Layout:
    root: Path
    tokenized: bool

    def image_list(self, task: str, stem: str) -> Path:
        if task == "task1":
            return self.root / "task1" / "image_splits" / f"{stem}.txt"
        return self.root / "task2" / "image_splits" / f"{stem}_images.txt"

    def caption_prefix(self, task: str, stem: str) -> Path:
        """Caption files are ``<prefix>.<lang>`` (task1) or ``<prefix>.<n>.<lang>`` (task2), ``.gz`` optional."""
        if self.tokenized:
            return self.root / task / "tok" / f"{stem}.lc.norm.tok"
        return self.root / task / "raw" / stem


@dataclass
class _SplitFiles:
    """What one split reads: its image list and the caption files per language."""

    list_path: Path
    images: list[ListedImage]
    translation: dict[str, Path] = field(default_factory=dict)
    comparable: dict[str, list[Path]] = field(default_factory=dict)


def read_multi30k(
    root: Path,
    *,
    languages: Sequence[str],
    splits: Mapping[str, Multi30kSplit],
    image_root: Path | None,
    dataset: str = "multi30k",
    tasks: Sequence[str] = TASKS,
    tokenized: bool = False,
    eval_sets: Mapping[str, Multi30kEvalSet] | None = None,
    text: TextCleaner | None = None,
    outside_allowed: bool = False,
) -> Corpus:
    """Read Multi30K-layout captions into a validated images + captions corpus.

    Args:
        root: The folder holding ``task1/`` and ``task2/``.
        languages: ISO 639-1 codes to read; each needs files in at least one task.
        splits: Canonical split ("train", "val", "test") -> file stems, e.g. :data:`MULTI30K_2016`.
        image_root: The folder of the listed image files; None for text-only preparation (null sizes).
        dataset: The name stored in ``images.dataset``.
        tasks: Which of "task1" (translation captions) and "task2" (comparable captions) to read.
        tokenized: Read the ``tok/`` files instead of ``raw/``.
        eval_sets: Extra evaluation sets by name (split ``eval:<name>``); each needs caption files of at least
            one of ``languages``, the others are left out of it.
        text: Cleans every caption and contrastive sentence (default: NFC, control characters refused).
        outside_allowed: Image paths may lead out of ``image_root`` (``prepare.images_outside_root``).

    Raises:
        InputError: a bad argument, a missing or inconsistent file, a line-count mismatch, a caption with a control
            character, differing task1
            and task2 image lists, a duplicate or missing image, an unreadable image file, or an evaluation set
            without caption files.
    """
    _check_request(languages, splits, tasks)
    layout = _Layout(Path(root), tokenized)
    order = [split for split in SPLITS if split in splits]
    split_files = {split: _read_image_lists(layout, split, splits[split], tasks) for split in order}
    for lang in languages:
        _locate_language(layout, {split: splits[split] for split in order}, lang, tasks, split_files)
    extra = {name: _read_eval_set(layout, name, spec, languages, tasks) for name, spec in (eval_sets or {}).items()}
    listed = [image for files in [*split_files.values(), *extra.values()] for image in files.images]
    images = build_images_table(listed, image_root=image_root, dataset=dataset, outside_allowed=outside_allowed)
    clean = text or TextCleaner()
    captions = HumanCaptions()
    for split in order:
        _add_split_captions(captions, split, split_files[split], clean)
    for name, files in extra.items():
        _add_split_captions(captions, eval_split(name), files, clean)
    # the task1 captions again, cleaned alike but not counted twice
    image_dependent = _read_image_dependent(layout, splits, split_files, images, TextCleaner(clean.control_characters))
    contrastive = _read_contrastive(layout, splits, split_files, languages, images, clean)
    return Corpus(images, captions.table(images), image_dependent=image_dependent, contrastive=contrastive)


def discover_languages(
    root: Path, *, splits: Mapping[str, Multi30kSplit], tasks: Sequence[str] = TASKS, tokenized: bool = False
) -> list[str]:
    """Every language with caption files for a split of ``splits`` (task1 ``<stem>.<lang>``, task2
    ``<stem>.<n>.<lang>``, gzipped or plain): what `prepare` reads, so that naming a new target language in
    params.yaml does not rerun it. Sorted; an empty list when no file matches."""
    layout = _Layout(Path(root), tokenized)
    pattern = re.compile(r"\.(?:[1-9][0-9]*\.)?([a-z]{2})(?:\.gz)?")
    found: set[str] = set()
    for task in TASKS:
        for _, stem in _stems(splits, task, tasks):
            prefix = layout.caption_prefix(task, stem)
            names = os.listdir(prefix.parent) if prefix.parent.is_dir() else []
            for name in names:
                if name.startswith(prefix.name) and (match := pattern.fullmatch(name[len(prefix.name) :])):
                    found.add(match.group(1))
    return sorted(lang for lang in found if lang in ISO_639_1)


def _check_request(languages: Sequence[str], splits: Mapping[str, Multi30kSplit], tasks: Sequence[str]) -> None:
    if not languages:
        raise InputError("multi30k: no languages requested")
    for lang in languages:
        check_language(lang, where="multi30k languages")
    if len(set(languages)) != len(languages):
        raise InputError(f"multi30k languages: {list(languages)} names a language twice")
    if not tasks or any(task not in TASKS for task in tasks):
        raise InputError(f"multi30k tasks: {list(tasks)}; expected a non-empty subset of {list(TASKS)}")
    if not splits or any(split not in SPLITS for split in splits):
        raise InputError(f"multi30k splits: {list(splits)}; expected a non-empty subset of {list(SPLITS)}")


def _read_image_lists(
    layout: _Layout, split: str, stems: Multi30kSplit, tasks: Sequence[str], folder: str = ""
) -> _SplitFiles:
    """Read the split's image list(s); when both tasks list the split, the lists must be identical. Image paths are
    ``<folder>/<file name>`` (just the file name when ``folder`` is empty)."""
    paths = [layout.image_list(task, stem) for task in TASKS if task in tasks and (stem := stems.stem(task))]
    if not paths:
        raise InputError(f"multi30k split {split!r}: {stems} names no file stem for tasks {list(tasks)}")
    names = [[_file_name(line) for line in read_lines(path)] for path in paths]
    if len(paths) == 2:
        _check_same_images(paths[0], names[0], paths[1], names[1])
    listed = [
        ListedImage(
            image_id=Path(name).stem,
            path=str(Path(folder) / name) if folder else name,
            split=split,
            where=f"{paths[0]}:{line}",
        )
        for line, name in enumerate(names[0], start=1)
    ]
    return _SplitFiles(list_path=paths[0], images=listed)


def _file_name(line: str) -> str:
    # test_2017_mscoco.txt appends "#<COCO caption id>" to each file name
    return line.strip().partition("#")[0]


def _read_eval_set(
    layout: _Layout, name: str, spec: Multi30kEvalSet, languages: Sequence[str], tasks: Sequence[str]
) -> _SplitFiles:
    """The image list and the caption files of every language the evaluation set has; the others are left out."""
    files = _read_image_lists(layout, eval_split(name), spec.stems, tasks, spec.images)
    task1 = layout.caption_prefix("task1", spec.task1) if "task1" in tasks and spec.task1 else None
    task2 = layout.caption_prefix("task2", spec.task2) if "task2" in tasks and spec.task2 else None
    for lang in languages:
        if task1 is not None and (path := _find(task1, lang)) is not None:
            files.translation[lang] = path
        if task2 is not None and (numbered := _task2_files(task2, lang)):
            files.comparable[lang] = numbered
    present = set(files.translation) | set(files.comparable)
    if not present:
        looked = [f"{task1}.<lang>"] if task1 is not None else []
        looked += [f"{task2}.<n>.<lang>"] if task2 is not None else []
        raise InputError(
            f"evaluation set {name!r}: no caption files of {list(languages)}; looked for {looked} (gzipped or plain)"
        )
    absent = [lang for lang in languages if lang not in present]
    if absent:
        logger.info("evaluation set %s: no captions of %s (left out of it)", name, ", ".join(absent))
    return files


def _check_same_images(path_a: Path, names_a: list[str], path_b: Path, names_b: list[str]) -> None:
    # Line i of both tasks' caption files must describe the same image, so order matters too.
    for line, (name_a, name_b) in enumerate(zip(names_a, names_b, strict=False), start=1):
        if name_a != name_b:
            raise InputError(
                f"task1 and task2 image lists differ: {path_a}:{line} names {name_a!r}, "
                f"{path_b}:{line} names {name_b!r}"
            )
    if len(names_a) != len(names_b):
        raise InputError(
            f"task1 and task2 image lists differ in length: {path_a} has {len(names_a)} lines, "
            f"{path_b} has {len(names_b)} lines"
        )


def _locate_language(
    layout: _Layout,
    splits: Mapping[str, Multi30kSplit],
    lang: str,
    tasks: Sequence[str],
    split_files: Mapping[str, _SplitFiles],
) -> None:
    """Find the caption files of one language in every split and record them in ``split_files``.

    A language may lack one task (French and Czech have no task2 files), but a task it has must cover
    every split that names a stem for that task, with the same number of task2 files in each.
    """
    task1 = {split: layout.caption_prefix("task1", stem) for split, stem in _stems(splits, "task1", tasks)}
    task2 = {split: layout.caption_prefix("task2", stem) for split, stem in _stems(splits, "task2", tasks)}
    found1 = {split: _find(prefix, lang) for split, prefix in task1.items()}
    found2 = {split: _task2_files(prefix, lang) for split, prefix in task2.items()}
    if not any(found1.values()) and not any(found2.values()):
        looked = [f"{prefix}.{lang}" for prefix in task1.values()]
        looked += [f"{prefix}.<n>.{lang}" for prefix in task2.values()]
        raise InputError(f"language {lang!r}: no caption files; looked for {looked} (each gzipped or plain)")
    if any(found1.values()):
        for split, path in found1.items():
            if path is None:
                raise InputError(
                    f"{task1[split]}.{lang}: caption file not found, gzipped or plain "
                    f"(language {lang!r} has task1 files in other splits)"
                )
            split_files[split].translation[lang] = path
    if any(found2.values()):
        _check_same_counts(found2, task2, lang)
        for split, paths in found2.items():
            split_files[split].comparable[lang] = paths


def _stems(splits: Mapping[str, Multi30kSplit], task: str, tasks: Sequence[str]) -> list[tuple[str, str]]:
    """(split, stem) for every split that names a stem for ``task``; none when the task is not read."""
    if task not in tasks:
        return []
    return [(split, stem) for split, stems in splits.items() if (stem := stems.stem(task)) is not None]


def _find(prefix: Path, suffix: str) -> Path | None:
    """The file ``<prefix>.<suffix>``, gzipped or plain, or None."""
    for name in (f"{prefix.name}.{suffix}.gz", f"{prefix.name}.{suffix}"):
        if (prefix.parent / name).is_file():
            return prefix.parent / name
    return None


def _task2_files(prefix: Path, lang: str) -> list[Path]:
    """The files ``<prefix>.<n>.<lang>[.gz]`` for n = 1..N; a gap in the numbering is an error."""
    pattern = re.compile(rf"{re.escape(prefix.name)}\.([1-9][0-9]*)\.{re.escape(lang)}(?:\.gz)?")
    names = os.listdir(prefix.parent) if prefix.parent.is_dir() else []
    numbers = sorted({int(match.group(1)) for name in names if (match := pattern.fullmatch(name))})
    if numbers != list(range(1, len(numbers) + 1)):
        raise InputError(f"{prefix}.<n>.{lang}: caption files numbered {numbers}; expected 1..N without gaps")
    return [path for number in numbers if (path := _find(prefix, f"{number}.{lang}")) is not None]


def _check_same_counts(found: Mapping[str, list[Path]], prefixes: Mapping[str, Path], lang: str) -> None:
    # Evaluation assumes the same number of comparable captions per image in every split.
    if len({len(paths) for paths in found.values()}) > 1:
        shown = "; ".join(f"{split}: {len(paths)} files {prefixes[split]}.<n>.{lang}" for split, paths in found.items())
        raise InputError(f"language {lang!r}: the number of task2 caption files differs between splits ({shown})")


def _read_captions(path: Path, list_path: Path, count: int, clean: TextCleaner) -> list[str]:
    lines = read_lines(path)
    if len(lines) != count:
        raise InputError(
            f"caption file {path} has {len(lines)} lines, but its image list {list_path} has {count} lines"
        )
    return [clean(line.strip(), f"{path}:{number}") for number, line in enumerate(lines, start=1)]


def _add_split_captions(captions: HumanCaptions, split: str, files: _SplitFiles, clean: TextCleaner) -> None:
    count = len(files.images)
    translations = {
        lang: _read_captions(path, files.list_path, count, clean) for lang, path in files.translation.items()
    }
    comparable = {
        lang: [_read_captions(path, files.list_path, count, clean) for path in paths]
        for lang, paths in files.comparable.items()
    }
    for row, image in enumerate(files.images):
        for lang, lines in translations.items():
            captions.add_translation(image.image_id, split, lang, lines[row])
        for lang, numbered in comparable.items():
            for number, lines in enumerate(numbered, start=1):
                captions.add_comparable(image.image_id, split, lang, number, lines[row])


def _read_image_dependent(
    layout: _Layout,
    splits: Mapping[str, Multi30kSplit],
    split_files: Mapping[str, _SplitFiles],
    images: pa.Table,
    clean: TextCleaner,
) -> pa.Table | None:
    """The image-dependent words of every task1 caption, or None when the corpus has no such files."""
    prefixes = {
        split: layout.root / "task1" / "image_dependent" / stem
        for split, stems in splits.items()
        if (stem := stems.task1) is not None
    }
    wanted = [(split, lang) for split, files in split_files.items() for lang in files.translation]
    found = {(split, lang): _find(prefixes[split], lang) for split, lang in wanted}
    if not any(found.values()):
        return None
    missing = [(split, lang) for (split, lang), path in found.items() if path is None]
    if missing:
        split, lang = missing[0]
        raise InputError(
            f"{prefixes[split]}.{lang}: image-dependent word file not found, gzipped or plain (other "
            "task1 caption files have one: every one needs it)"
        )
    rows: list[tuple[str, str, str, list[str]]] = []  # split, image_id, lang, words
    for split, lang in wanted:
        files = split_files[split]
        path, caption_path = found[(split, lang)], files.translation[lang]
        assert path is not None  # missing files were reported above
        captions = _read_captions(caption_path, files.list_path, len(files.images), clean)
        words_per_line = _read_words(path, caption_path, captions, layout.tokenized, clean)
        for image, words in zip(files.images, words_per_line, strict=True):
            if words:
                rows.append((split, image.image_id, lang, words))
    return image_dependent_table(_columns(IMAGE_DEPENDENT_SCHEMA.names, rows), images)


def _read_words(
    path: Path, caption_path: Path, captions: Sequence[str], lowercase: bool, clean: TextCleaner
) -> list[list[str]]:
    """The words of each line of ``path``, each checked to be a token of the caption on the same line."""
    lines = read_lines(path, allow_empty=True)
    if len(lines) != len(captions):
        raise InputError(
            f"image-dependent word file {path} has {len(lines)} lines, but its caption file "
            f"{caption_path} has {len(captions)} lines"
        )
    result = []
    for number, (raw, caption) in enumerate(zip(lines, captions, strict=True), start=1):
        line = clean(raw, f"{path}:{number}")  # the caption's words are NFC: so are these
        words = [word.lower() for word in line.split()] if lowercase else line.split()  # tok captions are lowercased
        tokens = set(_TOKENIZE_13A(caption).split())
        stray = [word for word in words if word not in tokens]
        if stray:
            raise InputError(
                f"{path}:{number}: {stray[0]!r} is not a word of the caption on the same line of "
                f"{caption_path} ({caption!r})"
            )
        result.append(words)
    return result


def _read_contrastive(
    layout: _Layout,
    splits: Mapping[str, Multi30kSplit],
    split_files: Mapping[str, _SplitFiles],
    languages: Sequence[str],
    images: pa.Table,
    clean: TextCleaner,
) -> pa.Table | None:
    """The contrastive items of every pair of requested languages, or None when the test split has none."""
    if "test" not in split_files or splits["test"].task1 is None or not split_files["test"].translation:
        return None
    prefix = layout.root / "task1" / "contrastive" / splits["test"].task1
    test = split_files["test"]
    test_images = {image.image_id for image in test.images}
    rows: list[tuple[str, ...]] = []  # in the order of CONTRASTIVE_SCHEMA
    found = False
    for src in languages:
        for tgt in languages:
            path = _find(prefix, f"{src}-{tgt}.jsonl") if src != tgt else None
            if path is None:
                continue
            found = True
            for number, line in enumerate(read_lines(path), start=1):
                item = _contrastive_item(line, f"{path}:{number}", test_images, test.list_path, clean)
                rows.append((src, tgt, *item))
    return contrastive_table(_columns(CONTRASTIVE_SCHEMA.names, rows), images) if found else None


def _contrastive_item(
    line: str, where: str, test_images: set[str], list_path: Path, clean: TextCleaner
) -> tuple[str, str, str, str, str]:
    """(source, image a, image b, translation a, translation b) of one JSON line, checked, its sentences cleaned."""
    item = parse_json(line, where)
    if not isinstance(item, dict):
        raise InputError(f"{where}: expected a JSON object with source, image_ids and translations")
    source = item.get("source")
    if not isinstance(source, str) or not source.strip():
        raise InputError(f"{where}: source must be a non-empty string, got {source!r}")
    pairs = []
    for key in ("image_ids", "translations"):
        value = item.get(key)
        if not (isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) and v.strip() for v in value)):
            raise InputError(f"{where}: {key} must be a list of two non-empty strings, got {value!r}")
        if value[0] == value[1]:
            raise InputError(f"{where}: the two {key} are the same ({value[0]!r}): nothing to contrast")
        pairs.append(value)
    (image_a, image_b), (translation_a, translation_b) = pairs
    for image_id in (image_a, image_b):
        if image_id not in test_images:
            raise InputError(f"{where}: image {image_id!r} is not an image of the test split (listed in {list_path})")
    return (
        clean(source, f"{where}: source"),
        image_a,
        image_b,
        clean(translation_a, f"{where}: translations[0]"),
        clean(translation_b, f"{where}: translations[1]"),
    )


def _columns(names: Sequence[str], rows: Sequence[Sequence[Any]]) -> dict[str, list[Any]]:
    return {name: [row[index] for row in rows] for index, name in enumerate(names)}
