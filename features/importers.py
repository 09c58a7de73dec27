"""Import region features users already hold into a FeatureStore, without re-extracting them.

Two formats:
    SCAN precomp ``{stem}_ims.npy``: (N, 36, 2048) float32 (or float16) in the order of the split's images;
        no boxes and no image sizes. The array holds no ids: :func:`import_scan_splits` first checks the release's
        ``{stem}_ids.txt`` (or ``{stem}_caps.txt``) against the prepared images (:mod:`features.scan_pairing`).
        An array may repeat every image once per caption (5 N rows, the reference loaders' ``im_div``); then every
        5th row is kept.
    Bottom-up-attention TSV (the Caffe ``generate_tsv.py`` output): no header, six tab-separated fields
        image_id, image_w, image_h, num_boxes, boxes, features, the last two base64 float32 arrays
        (num_boxes, 4) and (num_boxes, D). COCO image ids are integers and are kept in their string form.

Memory: both importers stream. A SCAN array is copied ``chunk_rows`` images at a time; a TSV is read twice,
first for the ids alone (features are not decoded), then one decoded line at a time. Peak RSS stays at a
few hundred MB for a Flickr30K-sized input (8.5 GB of float32); see ``bench/importer_rss.py``.
"""

from __future__ import annotations

import base64
import binascii
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from common.checks import check
from common.errors import InputError
from corpora.languages import ISO_639_1
from corpora.tables import check_split_keys
from features.npy import NpyLayout, read_layout, read_rows
from features.regions import ImageRegions
from features.scan_pairing import check_pairing
from features.store import FeatureStoreWriter

log = logging.getLogger(__name__)

PathLike = str | os.PathLike[str]
SCAN_REPEAT = 5  # rows per image in SCAN's f30k train array: one per caption
TSV_FIELDS = ("image_id", "image_w", "image_h", "num_boxes", "boxes", "features")


@dataclass(frozen=True)
class ImportConfig:
    """What to import (the `features.imported` section of params.yaml).

    Attributes:
        tsv_files: butd-tsv: files in the feature inputs folder, in order.
        scan_splits: scan-npy: canonical split -> stem of ``<stem>_ims.npy`` in the feature inputs folder.
        caption_lang: scan-npy: the language of ``<stem>_caps.txt``, whose prepared captions it is checked against
            when the split has no ``<stem>_ids.txt``.
    """

    tsv_files: tuple[str, ...] = ()
    scan_splits: dict[str, str] = field(default_factory=lambda: {"train": "train", "val": "dev", "test": "test"})
    caption_lang: str = "en"

    def __post_init__(self) -> None:
        check_split_keys("scan_splits", self.scan_splits)
        check(self.caption_lang in ISO_639_1, "caption_lang", self.caption_lang, "an ISO 639-1 code such as en")


@dataclass(frozen=True)
class _ScanArray:
    """A SCAN ``_ims.npy`` file and how its rows map to images."""

    path: Path
    layout: NpyLayout
    images: int
    step: int  # rows per image: 1, or SCAN_REPEAT


def import_scan_npy(
    ims_path: PathLike,
    *,
    image_ids: Sequence[str],
    out_dir: PathLike,
    extractor: str = "scan-precomp",
    widths: Sequence[int | None] | None = None,
    heights: Sequence[int | None] | None = None,
    chunk_rows: int = 256,
) -> None:
    """Import one SCAN ``{split}_ims.npy`` whose rows follow ``image_ids``.

    Every image gets K valid regions (the array has no padding) and zero boxes (SCAN keeps no boxes).
    Image sizes are stored as null unless ``widths``/``heights`` are given: the precomp release has none,
    and null cannot be mistaken for a real size the way 0 could.

    Raises:
        InputError: the file is missing or not a 3-D float array, its row count is neither
            ``len(image_ids)`` nor 5 times that (names both counts), or a row holds NaN/Inf or values
            beyond the float16 range (names the image).
    """
    source = _open_scan_array(Path(ims_path), len(image_ids))
    with _scan_writer([source], image_ids, out_dir, extractor) as writer:
        _copy_scan_array(source, writer, 0, widths, heights, chunk_rows)


def import_scan_splits(
    root: PathLike,
    splits: Mapping[str, str],
    image_ids_by_split: Mapping[str, Sequence[str]],
    out_dir: PathLike,
    *,
    captions_by_split: Mapping[str, Sequence[Sequence[str]]],
    extractor: str = "scan-precomp",
    chunk_rows: int = 256,
) -> None:
    """Import ``{stem}_ims.npy`` of several splits into one store, splits in the order of ``splits``, after checking
    that each array's rows follow the split's images (:mod:`features.scan_pairing`: ``<stem>_ids.txt``, or without
    one ``<stem>_caps.txt``).

    Args:
        root: The precomp folder.
        splits: Canonical split -> SCAN file stem, e.g. ``{"train": "train", "val": "dev", "test": "test"}``.
        image_ids_by_split: Canonical split -> image ids in the row order of that split's array.
        out_dir: The store folder.
        captions_by_split: Canonical split -> per image of ``image_ids_by_split``, its prepared human captions in
            the language of ``<stem>_caps.txt`` (compared when the split has no ids file).
        extractor: The name recorded in meta.json.
        chunk_rows: Images copied per block.

    Raises:
        InputError: as :func:`import_scan_npy`, plus splits without ids (or ids without a split), arrays whose
            K or D differ between splits, and an ids or captions file that does not follow the images (names the
            file and its first differing line), or neither file.
    """
    if set(splits) != set(image_ids_by_split):
        raise InputError(f"splits {sorted(splits)} and the splits with image ids {sorted(image_ids_by_split)} differ")
    sources = [_open_scan_array(Path(root) / f"{splits[s]}_ims.npy", len(image_ids_by_split[s])) for s in splits]
    for source in sources[1:]:
        if source.layout.shape[1:] != sources[0].layout.shape[1:]:
            raise InputError(
                f"{source.path}: regions of shape {source.layout.shape[1:]}, but {sources[0].path} has "
                f"{sources[0].layout.shape[1:]}"
            )
    for split, stem in splits.items():
        check_pairing(Path(root), stem, image_ids_by_split[split], captions_by_split.get(split, ()))
    image_ids = [image_id for split in splits for image_id in image_ids_by_split[split]]
    with _scan_writer(sources, image_ids, out_dir, extractor) as writer:
        start = 0
        for source in sources:
            _copy_scan_array(source, writer, start, None, None, chunk_rows)
            start += source.images


def _open_scan_array(path: Path, images: int) -> _ScanArray:
    layout = read_layout(path)
    if len(layout.shape) != 3 or layout.dtype not in (np.float32, np.float16):
        raise InputError(f"{path}: {layout.dtype} array of shape {layout.shape}; expected (N, K, D) float32 or float16")
    rows = layout.shape[0]
    if rows == images:
        return _ScanArray(path, layout, images, 1)
    if rows != SCAN_REPEAT * images:
        raise InputError(
            f"{path}: {rows} feature rows for {images} image ids; expected {images}, or {SCAN_REPEAT * images} "
            f"when each image is repeated once per caption (SCAN's f30k train)"
        )
    first = read_rows(path, layout, 0, SCAN_REPEAT)
    if not (first == first[0]).all():
        raise InputError(
            f"{path}: {rows} rows for {images} images, but rows 0..{SCAN_REPEAT - 1} are not one repeated image"
        )
    log.info(
        "%s: %d rows for %d images, each repeated %d times; keeping every %dth row",
        path,
        rows,
        images,
        SCAN_REPEAT,
        SCAN_REPEAT,
    )
    return _ScanArray(path, layout, images, SCAN_REPEAT)


def _copy_scan_array(
    source: _ScanArray,
    writer: FeatureStoreWriter,
    start_row: int,
    widths: Sequence[int | None] | None,
    heights: Sequence[int | None] | None,
    chunk_rows: int,
) -> None:
    """Copy ``source`` into rows ``start_row:start_row + source.images`` of ``writer``, a block at a time."""
    for name, sizes in (("widths", widths), ("heights", heights)):
        if sizes is not None and len(sizes) != source.images:
            raise InputError(f"{source.path}: {len(sizes)} {name} for {source.images} images")
    _, max_regions, _ = source.layout.shape
    for begin in range(0, source.images, chunk_rows):
        end = min(source.images, begin + chunk_rows)
        features = read_rows(source.path, source.layout, begin * source.step, (end - 1) * source.step + 1, source.step)
        boxes = np.zeros((end - begin, max_regions, 4), dtype=np.float32)
        num_regions = np.full(end - begin, max_regions, dtype=np.int32)
        try:
            writer.write_rows(
                start_row + begin,
                features,
                boxes,
                num_regions,
                widths=None if widths is None else widths[begin:end],
                heights=None if heights is None else heights[begin:end],
            )
        except InputError as error:
            raise InputError(f"{source.path}: {error}") from None


def _scan_writer(
    sources: list[_ScanArray], image_ids: Sequence[str], out_dir: PathLike, extractor: str
) -> FeatureStoreWriter:
    _, max_regions, dim = sources[0].layout.shape
    return FeatureStoreWriter(
        out_dir,
        image_ids=image_ids,
        max_regions=max_regions,
        dim=dim,
        extractor=extractor,
        checkpoint_sha256=None,
        config=_scan_config(sources),
    )


def _scan_config(sources: list[_ScanArray]) -> dict[str, object]:
    # File names only: the store must not change when the same files sit in another folder.
    return {"format": "scan-precomp", "files": [{"name": s.path.name, "rows_per_image": s.step} for s in sources]}


def import_butd_tsv(
    tsv_paths: Sequence[PathLike],
    *,
    out_dir: PathLike,
    max_regions: int = 36,
    image_ids: Sequence[str] | None = None,
    extractor: str = "butd-tsv",
) -> None:
    """Import bottom-up-attention TSV files (several, e.g. one per GPU process) into one store.

    Rows follow ``image_ids`` (the prepared images) when given, else the order of the files and lines.
    Images with fewer than ``max_regions`` boxes (the 10-100 adaptive features) are padded.

    Args:
        tsv_paths: The TSV files.
        out_dir: The store folder.
        max_regions: K; 36 for the fixed features, 100 for the adaptive ones.
        image_ids: The ids to import; TSV ids outside it are ignored (their count is logged).
        extractor: The name recorded in meta.json.

    Raises:
        InputError: a line with the wrong number of fields, a non-integer size or count, more than
            ``max_regions`` boxes, bad base64 or the wrong byte length (all name file:line), a duplicate
            id (names both lines), or ids of ``image_ids`` missing from the TSV (names the first few).
    """
    paths = [Path(path) for path in tsv_paths]
    found, dim = _index_tsv(paths)
    ids = list(found) if image_ids is None else _wanted_ids(image_ids, found, paths)
    for image_id in ids:  # before writing anything; lines of ignored images may hold any number of boxes
        _check_box_count(*found[image_id], max_regions)
    wanted = set(ids)
    config = {"format": "butd-tsv", "files": [path.name for path in paths], "max_regions": max_regions}
    with FeatureStoreWriter(
        out_dir,
        image_ids=ids,
        max_regions=max_regions,
        dim=dim,
        extractor=extractor,
        checkpoint_sha256=None,
        config=config,
    ) as writer:
        for where, fields in _tsv_lines(paths):
            image_id, width, height, count = _parse_head(where, fields)
            if image_id not in wanted:
                continue
            features = _decode(where, "features", fields[5], (count, dim))
            boxes = _decode(where, "boxes", fields[4], (count, 4))
            try:
                writer.write(image_id, ImageRegions(features=features, boxes=boxes), width=width, height=height)
            except InputError as error:
                raise InputError(f"{where}: {error}") from None


def _index_tsv(paths: list[Path]) -> tuple[dict[str, tuple[str, int]], int]:
    """First pass: image_id -> ("file:line", num_boxes) in file order, and D from the first line with boxes.

    Only the first line with boxes has its features decoded; the others are checked in the second pass.
    """
    found: dict[str, tuple[str, int]] = {}
    dim = 0
    for where, fields in _tsv_lines(paths):
        image_id, _, _, count = _parse_head(where, fields)
        if image_id in found:
            raise InputError(f"{where}: image id {image_id!r} again (first at {found[image_id][0]})")
        found[image_id] = (where, count)
        if not dim and count:
            size = len(_decode(where, "features", fields[5], None))
            if size % count:
                raise InputError(f"{where}: {size} feature values do not divide into {count} boxes")
            dim = size // count
    if not found or not dim:
        raise InputError(f"{[str(path) for path in paths]}: no TSV line with at least one box")
    return found, dim


def _wanted_ids(image_ids: Sequence[str], found: dict[str, tuple[str, int]], paths: list[Path]) -> list[str]:
    missing = [image_id for image_id in image_ids if image_id not in found]
    if missing:
        raise InputError(
            f"{len(missing)} of {len(image_ids)} prepared images are not in {[str(p) for p in paths]}, "
            f"e.g. {missing[:5]}; the TSV ids look like {list(found)[:3]}"
        )
    ignored = len(found) - len(set(image_ids))
    if ignored:
        log.info("ignoring %d TSV images that are not among the %d prepared images", ignored, len(image_ids))
    return list(image_ids)


def _tsv_lines(paths: list[Path]) -> Iterator[tuple[str, list[bytes]]]:
    """("file:line", fields) per data line, one line in memory at a time.

    Plain splitting rather than the csv module: the format never quotes (numbers and base64 only), so this
    is exact, needs no raised ``csv.field_size_limit`` and keeps line numbers equal to file lines.
    """
    for path in paths:
        if not path.is_file():
            raise InputError(f"{path}: file not found")
        with open(path, "rb") as handle:
            for number, line in enumerate(handle, start=1):
                fields = line.rstrip(b"\r\n").split(b"\t")
                if fields == [b""] or (number == 1 and fields[0] == b"image_id"):
                    continue  # a blank line, or the header row some converters add
                if len(fields) != len(TSV_FIELDS):
                    raise InputError(
                        f"{path}:{number}: {len(fields)} tab-separated fields, expected {len(TSV_FIELDS)} "
                        f"({', '.join(TSV_FIELDS)}; the 10-field LXMERT layout is not supported)"
                    )
                yield f"{path}:{number}", fields


def _parse_head(where: str, fields: list[bytes]) -> tuple[str, int, int, int]:
    """image_id, width, height, num_boxes of one line."""
    try:
        image_id = fields[0].decode("utf-8")
        width, height, count = (int(field) for field in fields[1:4])
    except (UnicodeDecodeError, ValueError):
        raise InputError(
            f"{where}: image_id, image_w, image_h, num_boxes = {fields[:4]}; expected text and integers"
        ) from None
    if not image_id or min(width, height, count) < 0:
        raise InputError(
            f"{where}: image_id, image_w, image_h, num_boxes = {fields[:4]}; expected an id and sizes >= 0"
        )
    return image_id, width, height, count


def _check_box_count(where: str, count: int, max_regions: int) -> None:
    if count > max_regions:
        raise InputError(
            f"{where}: {count} boxes, more than max_regions={max_regions} "
            f"(set max_regions to the largest box count, e.g. 100 for the 10-100 adaptive features)"
        )


def _decode(where: str, name: str, field: bytes, shape: tuple[int, int] | None) -> np.ndarray:
    """Base64 little-endian float32 -> array of ``shape`` (1-D when None)."""
    try:
        raw = base64.b64decode(field, validate=True)
    except binascii.Error as error:
        raise InputError(f"{where}: {name} is not valid base64 ({error})") from None
    if len(raw) % 4 or (shape is not None and len(raw) != 4 * shape[0] * shape[1]):
        expected = "a multiple of 4" if shape is None else f"{4 * shape[0] * shape[1]} = float32 {shape}"
        raise InputError(f"{where}: {name} holds {len(raw)} bytes, expected {expected}")
    values = np.frombuffer(raw, dtype="<f4")
    return values if shape is None else values.reshape(shape)
