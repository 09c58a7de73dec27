"""SCAN-style precomputed caption folders (``f30k_precomp``, ``coco_precomp``) -> canonical tables.

Per file stem the folder holds ``<stem>_caps.txt`` (one caption per line, the captions of one image on
consecutive lines: caption k belongs to image k // captions_per_image), ``<stem>_ims.npy`` (features, read
by the feature importer, not here) and optionally ``<stem>_ids.txt``. SCAN's stems are train, dev, test
and, for COCO, testall (the 5,000 Karpathy test images, whose consecutive 1,000-image blocks are the five
1K folds); map them to canonical splits, e.g. ``{"train": "train", "val": "dev", "test": "testall"}``.

image_id: from ``<stem>_ids.txt`` when present. Releases write either one id per image or one id per
caption (the same id repeated for an image's consecutive captions); which one is decided by the line count,
and per-caption ids must agree within each image. Without an ids file the id is ``<stem>-<index>``
(0-based image index, 6 digits), which is also the row of the image in ``<stem>_ims.npy``. No image files
exist, so images.path = image_id and the sizes are null.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from common.checks import check_range
from common.errors import InputError
from common.files import read_lines
from common.text_input import TextCleaner
from corpora.human_captions import comparable_corpus
from corpora.image_files import ListedImage
from corpora.languages import check_language
from corpora.prepared import Corpus
from corpora.tables import SPLITS, check_split_keys


@dataclass(frozen=True)
class ScanCaptionsConfig:
    """How to read a SCAN precomp folder (the `prepare.scan` section of params.yaml).

    Attributes:
        captions_per_image: Consecutive caption lines per image (5).
        splits: Canonical split -> SCAN file stem (train, dev, test; COCO 5K test: testall).
    """

    captions_per_image: int = 5
    splits: dict[str, str] = field(default_factory=lambda: {"train": "train", "val": "dev", "test": "test"})

    def __post_init__(self) -> None:
        check_range("captions_per_image", self.captions_per_image, 1, 20)
        check_split_keys("splits", self.splits)


def read_scan_captions(
    root: Path,
    *,
    splits: Mapping[str, str],
    dataset: str,
    lang: str = "en",
    captions_per_image: int = 5,
    text: TextCleaner | None = None,
    outside_allowed: bool = False,
) -> Corpus:
    """Read SCAN precomp caption files into a validated images + captions corpus.

    Args:
        root: The precomp folder (``<data_path>/<data_name>``).
        splits: Canonical split -> SCAN file stem, e.g. ``{"train": "train", "val": "dev", "test": "test"}``.
        dataset: The name stored in ``images.dataset``.
        lang: The ISO 639-1 code of the captions.
        captions_per_image: Consecutive caption lines per image.
        text: Cleans every caption (default: NFC, control characters refused).
        outside_allowed: Image ids (which are also the images' paths) may lead out of the image folder.

    Raises:
        InputError: a bad argument, a missing caption file, a caption count not divisible by
            ``captions_per_image``, an ids file of the wrong length or with inconsistent per-caption ids,
            a caption with a control character, or a duplicate image id.
    """
    check_language(lang, where=f"{root}: lang")
    if captions_per_image < 1:
        raise InputError(f"captions_per_image must be at least 1, got {captions_per_image}")
    if not splits or any(split not in SPLITS for split in splits):
        raise InputError(f"scan splits: {list(splits)}; expected a non-empty subset of {list(SPLITS)}")
    clean = text or TextCleaner()
    listed: list[ListedImage] = []
    groups: list[list[str]] = []
    for split in [split for split in SPLITS if split in splits]:
        split_images, split_groups = _read_split(Path(root), splits[split], split, captions_per_image, clean)
        listed += split_images
        groups += split_groups
    return comparable_corpus(
        listed, groups, image_root=None, dataset=dataset, lang=lang, outside_allowed=outside_allowed
    )


def _read_split(
    root: Path, stem: str, split: str, per_image: int, clean: TextCleaner
) -> tuple[list[ListedImage], list[list[str]]]:
    caps_path = root / f"{stem}_caps.txt"
    lines = [clean(line.strip(), f"{caps_path}:{number}") for number, line in enumerate(read_lines(caps_path), 1)]
    if len(lines) % per_image:
        raise InputError(f"{caps_path}: {len(lines)} captions is not a multiple of {per_image} captions per image")
    count = len(lines) // per_image
    ids = _image_ids(root, stem, caps_path, count, per_image)
    listed = [ListedImage(image_id=image_id, path=image_id, split=split, where=where) for image_id, where in ids]
    groups = [lines[index * per_image : (index + 1) * per_image] for index in range(count)]
    return listed, groups


def _image_ids(root: Path, stem: str, caps_path: Path, count: int, per_image: int) -> list[tuple[str, str]]:
    """(image_id, where it came from) per image, from ``<stem>_ids.txt`` or made from the image index."""
    ids_path = root / f"{stem}_ids.txt"
    if not ids_path.is_file():
        return [(f"{stem}-{index:06d}", f"{caps_path}:{index * per_image + 1}") for index in range(count)]
    ids = [line.strip() for line in read_lines(ids_path)]
    if len(ids) == count:
        return [(image_id, f"{ids_path}:{line}") for line, image_id in enumerate(ids, start=1)]
    if len(ids) == count * per_image:
        return _per_caption_ids(ids, ids_path, per_image)
    raise InputError(
        f"{ids_path} has {len(ids)} ids; expected one per image ({count}) or one per caption "
        f"({count * per_image}) of {caps_path}"
    )


def _per_caption_ids(ids: list[str], ids_path: Path, per_image: int) -> list[tuple[str, str]]:
    result = []
    for start in range(0, len(ids), per_image):
        group = ids[start : start + per_image]
        if len(set(group)) != 1:
            raise InputError(
                f"{ids_path}:{start + 1}-{start + per_image}: per-caption ids of one image differ ({group})"
            )
        result.append((group[0], f"{ids_path}:{start + 1}"))
    return result
