"""The images an adapter found in its split lists: uniqueness, presence on disk, sizes, images table.

Every image adapter first lists its images as :class:`ListedImage` rows (in corpus order, each with the
place that named it), then calls :func:`build_images_table`. With an image root every listed file must
exist and is measured from its header; without one the sizes stay null (text-only preparation). Every listed path
must stay inside the image root (:func:`~common.paths.inside_root`) unless ``prepare.images_outside_root`` allows
paths that lead out of it.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
from PIL import Image

from common.errors import InputError
from common.paths import inside_root, relative_inside
from common.text_input import shown
from corpora.tables import images_table

MAX_SHOWN = 5  # how many offending images an error message lists
OUTSIDE_SETTING = "prepare.images_outside_root"  # the opt-in to image paths that lead out of the image folder


@dataclass(frozen=True)
class ListedImage:
    """One image as named by a split list.

    Attributes:
        image_id: The canonical id (file name without extension; COCO: the cocoid).
        path: The file path relative to the image root.
        split: The canonical split ("train", "val" or "test").
        where: The place that named it, for error messages ("<list file>:<line>" or "<json>: images[i]").
    """

    image_id: str
    path: str
    split: str
    where: str


def check_unique(listed: Sequence[ListedImage]) -> None:
    """Raise an InputError naming both places when two listed images share an id.

    Two names with the same id (``a.jpg`` and ``a.png``) would make captions ambiguous, so the id is
    the key, not the file name.
    """
    seen: dict[str, ListedImage] = {}
    for image in listed:
        first = seen.setdefault(image.image_id, image)
        if first is not image:
            raise InputError(
                f"duplicate image {image.image_id!r}: {first.path!r} is listed at {shown(first.where)} "
                f"and {image.path!r} again at {shown(image.where)}"
            )


def check_inside(listed: Sequence[ListedImage], image_root: Path | None, *, outside_allowed: bool = False) -> None:
    """Raise an InputError naming the list and line of the first path that leads out of the image root.

    Without a root (text-only preparation, SCAN's ids) only the spelling is checked: later stages join these paths
    to the image folder.
    """
    for image in listed:
        if image_root is not None:
            inside_root(image_root, image.path, image.where, outside_allowed=outside_allowed, setting=OUTSIDE_SETTING)
        elif not outside_allowed:
            relative_inside(image.path, image.where, root="the image folder", setting=OUTSIDE_SETTING)


def check_present(listed: Sequence[ListedImage], image_root: Path) -> None:
    """Raise an InputError naming the root, the count and the first missing files with their lists."""
    if not image_root.is_dir():
        raise InputError(f"{image_root}: image folder not found")
    missing = [image for image in listed if not (image_root / image.path).is_file()]
    if missing:
        first = "; ".join(f"{shown(image.path)} (listed at {shown(image.where)})" for image in missing[:MAX_SHOWN])
        raise InputError(
            f"{shown(str(image_root))}: {len(missing)} of {len(listed)} listed images are missing, first: {first}"
        )


def read_size(path: Path) -> tuple[int, int]:
    """Width and height from the image header; Pillow opens lazily, so no pixels are decoded.

    An image of more pixels than Pillow's limit is a bad image here as in the feature stage (a decompression bomb).
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(path) as image:
                return image.size
    except (Image.DecompressionBombWarning, Image.DecompressionBombError) as error:
        raise InputError(f"{path}: too many pixels, a possible decompression bomb ({error})") from None
    except OSError as error:  # UnidentifiedImageError is an OSError
        raise InputError(f"{shown(str(path))}: not a readable image ({error})") from None


def build_images_table(
    listed: Sequence[ListedImage], *, image_root: Path | None, dataset: str, outside_allowed: bool = False
) -> pa.Table:
    """Check the listed images and turn them into a validated images table (corpus order kept).

    Args:
        listed: The images in corpus order.
        image_root: The folder the paths are relative to; None leaves width and height null.
        dataset: The dataset name stored in every row.
        outside_allowed: Paths may lead out of ``image_root`` (``prepare.images_outside_root``).

    Raises:
        InputError: a duplicate id, a path that leads out of the image root, a missing file or a file that is not
            an image.
    """
    check_unique(listed)
    check_inside(listed, image_root, outside_allowed=outside_allowed)
    if image_root is None:
        widths: list[int | None] = [None] * len(listed)
        heights: list[int | None] = [None] * len(listed)
    else:
        check_present(listed, image_root)
        sizes = [read_size(image_root / image.path) for image in listed]
        widths = [width for width, _ in sizes]
        heights = [height for _, height in sizes]
    return images_table(
        {
            "image_id": [image.image_id for image in listed],
            "split": [image.split for image in listed],
            "path": [image.path for image in listed],
            "width": widths,
            "height": heights,
            "dataset": [dataset] * len(listed),
        }
    )
