"""Karpathy split files (``dataset_flickr30k.json``, ``dataset_coco.json``) -> canonical tables.

The file holds ``{"images": [...], "dataset": ...}``; each image entry has ``filename``, ``split`` (train,
val, test or restval), ``sentences`` (each with ``raw`` and ``tokens``), and for COCO also ``filepath``
(``train2014``/``val2014``) and ``cocoid``. Flickr30K has 29,000 / 1,014 / 1,000 train/val/test images;
COCO has 82,783 train + 30,504 restval (usually trained on) and 5,000 val and 5,000 test, all of val/test
carved out of val2014.

- image_id: ``str(cocoid)`` when the entry has one (COCO), else the file name without its extension.
- images.path: ``<filepath>/<filename>`` when the entry has a filepath, else ``<filename>``.
- captions: kind="comparable" (independent descriptions), text = ``raw`` stripped, the first
  ``captions_per_image`` of each image in file order. Some COCO images have 6 or 7 captions; the extra
  ones are dropped so that every image has exactly five, as the 5-captions-per-image evaluation expects.

Row order is the file's: images in entry order, each image's captions consecutive. For COCO the order of
the test images defines the five 1K test folds (fold k = test images 1000k .. 1000k+999, captions in the
same order), so it must never be shuffled or sorted.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from common.checks import check_range
from common.errors import InputError
from common.files import read_json
from common.text_input import TextCleaner, shown
from corpora.human_captions import comparable_corpus
from corpora.image_files import ListedImage
from corpora.languages import check_language
from corpora.prepared import Corpus

KARPATHY_SPLITS = ("train", "val", "test", "restval")


@dataclass(frozen=True)
class KarpathyConfig:
    """How to read a Karpathy split file (the `prepare.karpathy` section of params.yaml).

    Attributes:
        captions_per_image: The first this many captions of each image are kept (5 in every paper).
        restval: COCO's 30,504 restval images join train, or are dropped.
    """

    captions_per_image: int = 5
    restval: Literal["train", "drop"] = "train"

    def __post_init__(self) -> None:
        check_range("captions_per_image", self.captions_per_image, 1, 20)


def read_karpathy(
    json_path: Path,
    *,
    dataset: str,
    image_root: Path | None,
    lang: str = "en",
    captions_per_image: int | None = 5,
    restval: Literal["train", "drop"] = "train",
    text: TextCleaner | None = None,
    outside_allowed: bool = False,
) -> Corpus:
    """Read a Karpathy split file into a validated images + captions corpus.

    Args:
        json_path: ``dataset_flickr30k.json`` or ``dataset_coco.json`` (or the same format).
        dataset: The name stored in ``images.dataset``.
        image_root: The folder the image paths are relative to; None for text-only preparation.
        lang: The ISO 639-1 code of the captions.
        captions_per_image: Keep the first N captions of each image (an image with fewer is an error);
            None keeps all of them.
        restval: "train" adds the restval images to train (the usual COCO setup); "drop" leaves them out.
        text: Cleans every caption (default: NFC, control characters refused).
        outside_allowed: Image paths may lead out of ``image_root`` (``prepare.images_outside_root``).

    Raises:
        InputError: invalid JSON, a missing field, an unknown split, too few or empty captions, a caption with a
            control character or a lone surrogate, a duplicate or missing image, or an unreadable image file.
    """
    check_language(lang, where=f"{json_path}: lang")
    if captions_per_image is not None and captions_per_image < 1:
        raise InputError(f"captions_per_image must be at least 1 or None, got {captions_per_image}")
    if restval not in ("train", "drop"):
        raise InputError(f"restval must be 'train' or 'drop', got {restval!r}")
    clean = text or TextCleaner()
    listed: list[ListedImage] = []
    texts: list[list[str]] = []
    for index, entry in enumerate(_load_entries(json_path)):
        where = f"{json_path}: images[{index}]"
        split = _canonical_split(_field(entry, "split", str, where), restval, where)
        if split is not None:
            listed.append(_listed_image(entry, split, where))
            texts.append(_captions(entry, captions_per_image, where, clean))
    return comparable_corpus(
        listed, texts, image_root=image_root, dataset=dataset, lang=lang, outside_allowed=outside_allowed
    )


def _load_entries(json_path: Path) -> list[dict[str, Any]]:
    path = Path(json_path)
    if not path.is_file():
        raise InputError(f"{path}: file not found")
    data = read_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("images"), list):
        raise InputError(f"{path}: expected an object with an 'images' list (Karpathy split format)")
    for index, entry in enumerate(data["images"]):
        if not isinstance(entry, dict):
            raise InputError(f"{path}: images[{index}] is not an object")
    return data["images"]


def _field(entry: dict[str, Any], key: str, kind: type, where: str) -> Any:
    value = entry.get(key)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise InputError(f"{where}: field {key!r} is missing or not a {kind.__name__} (got {value!r})")
    return value


def _canonical_split(split: str, restval: str, where: str) -> str | None:
    """The canonical split of a Karpathy split name; None for a dropped restval image."""
    if split not in KARPATHY_SPLITS:
        raise InputError(f"{where}: split {split!r} is not one of {list(KARPATHY_SPLITS)}")
    if split == "restval":
        return None if restval == "drop" else "train"
    return split


def _listed_image(entry: dict[str, Any], split: str, where: str) -> ListedImage:
    filename = _field(entry, "filename", str, where)
    if "/" in filename:  # the folder part is `filepath`'s; a slash here could name any file
        raise InputError(f"{where}: filename {filename!r} is a path, not a file name (the folder goes in 'filepath')")
    path = f"{_field(entry, 'filepath', str, where)}/{filename}" if "filepath" in entry else filename
    image_id = str(_field(entry, "cocoid", int, where)) if "cocoid" in entry else Path(filename).stem
    return ListedImage(image_id=image_id, path=path, split=split, where=f"{where} ({shown(filename)})")


def _captions(entry: dict[str, Any], captions_per_image: int | None, where: str, clean: TextCleaner) -> list[str]:
    sentences = _field(entry, "sentences", list, where)
    wanted = len(sentences) if captions_per_image is None else captions_per_image
    if len(sentences) < max(wanted, 1):
        raise InputError(
            f"{where} ({shown(str(entry.get('filename')))}): {len(sentences)} captions, expected at least "
            f"{max(wanted, 1)}"
        )
    texts = []
    for number, sentence in enumerate(sentences[:wanted]):
        raw = sentence.get("raw") if isinstance(sentence, dict) else None
        if not isinstance(raw, str) or not raw.strip():
            raise InputError(f"{where}: sentences[{number}] has no 'raw' text (got {raw!r})")
        texts.append(clean(raw.strip(), f"{where}: sentences[{number}].raw"))
    return texts
