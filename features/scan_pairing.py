"""Check that the rows of a SCAN ``<stem>_ims.npy`` belong to the prepared images they are paired with.

The array holds no ids, so its rows are paired with the prepared images of the split by order. Before any row is
copied, the files the release ships next to the array must agree with that order:

- ``<stem>_ids.txt`` (COCO precomp): one id per image, or one per caption (the id repeated on an image's
  consecutive lines); line by line equal to the prepared image ids of the split. COCO precomp ids are the numeric
  COCO image ids, which is how the karpathy adapter names COCO images (``str(cocoid)``); the scan adapter takes the
  ids from this same file.
- else ``<stem>_caps.txt`` (Flickr30K precomp has no ids file): captions_per_image consecutive lines per image,
  line by line equal to the prepared human comparable captions of each image in the caption language, compared
  after lowercasing and keeping only the words (SCAN's files are tokenised: ``yard .`` for Karpathy's ``yard.``).

A release with neither file is refused: nothing would tie a row to an image. A mismatch names the file and the first
differing line (its number, the expected and the found value).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from common.errors import InputError
from common.files import read_lines

WORD = re.compile(r"\w+")


def pairing_files(root: Path, stem: str) -> list[Path]:
    """The files the import of ``stem`` reads: ``<stem>_ims.npy``, then ``<stem>_ids.txt`` or else ``_caps.txt``."""
    ids_path = root / f"{stem}_ids.txt"
    return [root / f"{stem}_ims.npy", ids_path if ids_path.is_file() else root / f"{stem}_caps.txt"]


def check_pairing(root: Path, stem: str, image_ids: Sequence[str], captions: Sequence[Sequence[str]]) -> None:
    """Raise an InputError unless ``<stem>_ids.txt`` (or, without one, ``<stem>_caps.txt``) follows the images.

    Args:
        root: The precomp folder.
        stem: The split's file stem.
        image_ids: The prepared image ids of the split, in the array's row order.
        captions: Per image of ``image_ids``, its prepared human captions in the caption language, in order.
    """
    ids_path, caps_path = root / f"{stem}_ids.txt", root / f"{stem}_caps.txt"
    if ids_path.is_file():
        check_ids(ids_path, image_ids)
    elif caps_path.is_file():
        check_captions(caps_path, image_ids, captions)
    else:
        raise InputError(
            f"{root}: neither {ids_path.name} nor {caps_path.name} next to {stem}_ims.npy; one of them is needed to "
            f"check that the feature rows follow the prepared images"
        )


def check_ids(ids_path: Path, image_ids: Sequence[str]) -> None:
    """``ids_path`` lists ``image_ids`` in order, once per image or repeated on consecutive lines per caption."""
    found = [line.strip() for line in read_lines(ids_path)]
    repeat = _lines_per_image(ids_path, len(found), len(image_ids), "ids")
    for line, value in enumerate(found):
        expected = image_ids[line // repeat]
        if value != expected:
            raise InputError(
                f"{ids_path}: line {line + 1}: expected image id {expected!r} (prepared image {line // repeat} of the "
                f"split), found {value!r}"
            )


def check_captions(caps_path: Path, image_ids: Sequence[str], captions: Sequence[Sequence[str]]) -> None:
    """``caps_path`` holds each image's prepared captions on consecutive lines, word for word."""
    found = read_lines(caps_path)
    per_image = _lines_per_image(caps_path, len(found), len(image_ids), "captions")
    for line, text in enumerate(found):
        image, number = divmod(line, per_image)
        own = captions[image] if image < len(captions) else ()
        expected = own[number] if number < len(own) else None
        if expected is None or words(text) != words(expected):
            shown = f"{expected!r}" if expected is not None else f"no caption {number + 1} (the image has {len(own)})"
            raise InputError(
                f"{caps_path}: line {line + 1}: expected {shown} (caption {number + 1} of prepared image "
                f"{image_ids[image]!r}), found {text.strip()!r}"
            )


def words(text: str) -> list[str]:
    """The lowercased words of a caption: what the captions check compares."""
    return WORD.findall(text.lower())


def _lines_per_image(path: Path, lines: int, images: int, what: str) -> int:
    if images == 0 or lines % images or lines == 0:
        raise InputError(
            f"{path}: {lines} {what} lines for {images} prepared images; expected a whole number of lines per image"
        )
    return lines // images
