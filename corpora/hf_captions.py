"""An image-caption dataset in Hugging Face form (:mod:`corpora.hf_source`) -> canonical tables (format ``hf``).

Columns are named in ``prepare.hf.columns``; the defaults are those of our own export (:mod:`corpora.hf_dataset`),
so an exported variant reads back as it was prepared.

- Rows: one per caption (a string caption column; an image's rows may be anywhere in its split) or one per image
  (a list-of-strings caption column). Images keep the order of their first row, splits in train, val, test order.
- image_id: the ``image_id`` column (numbers are kept in their string form); without one, the file stem of the
  image's path.
- split: the dataset's own splits, or the values of a ``split`` column, mapped to canonical splits by
  ``prepare.hf.splits`` (canonical -> the dataset's name); rows of other splits are left out.
- lang: the ``language`` column, or ``prepare.hf.language`` for every caption.
- kind: the ``kind`` column (comparable or translation), or comparable for every caption.
- image: a column of paths relative to the corpus's ``images`` folder, or embedded images (``datasets.Image``: a
  struct of ``bytes`` and ``path``). Embedded images are written to the corpus's ``images`` folder as
  ``<image_id><suffix>`` (the suffix of the stored path, or of the format Pillow reads in the bytes), the folder
  replaced as a whole and atomically on every run, so the feature stage reads them as it reads any image folder.
  To keep a folder of other files from being replaced, the folder must be new or one this adapter wrote (it holds
  :data:`WRITTEN_MARK`), and it may not be, hold or sit inside the dataset's folder. Without an image folder
  (``prepare.read_image_sizes: false``) nothing is written and the sizes stay null.

Errors name the dataset, the column and the row (its index within the dataset's split).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
from PIL import Image

from common.checks import SettingError, check
from common.errors import InputError
from common.files import atomic_dir
from common.text_input import TextCleaner
from corpora.hf_source import load_splits
from corpora.human_captions import HumanCaptions
from corpora.image_files import ListedImage, build_images_table
from corpora.languages import ISO_639_1
from corpora.prepared import Corpus
from corpora.tables import KINDS, SPLITS, check_split_keys

WRITTEN_MARK = ".embedded-images"  # in an image folder this adapter wrote, so a rerun may replace it
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
ROW_COLUMN = "__row__"  # added to the rows read: each row's index in its dataset split, for error messages
BATCH_ROWS = 512  # rows turned into Python values at a time (with embedded images: their bytes)
PIL_SUFFIX = {"JPEG": ".jpg", "PNG": ".png", "GIF": ".gif", "BMP": ".bmp", "WEBP": ".webp", "TIFF": ".tif"}


@dataclass(frozen=True)
class HfColumns:
    """The dataset's column names (None: the dataset has no such column).

    Attributes:
        image: Image paths relative to the corpus's images folder, or embedded images (datasets.Image).
        caption: One caption per row (string), or an image's captions (list of strings).
        image_id: The image's id; None: the file stem of the image's path.
        language: The caption's ISO 639-1 code; None: ``language`` for every caption.
        split: The row's split name; None: the dataset's own splits.
        kind: comparable or translation; None: comparable for every caption.
    """

    image: str = "image_path"
    caption: str = "text"
    image_id: str | None = "image_id"
    language: str | None = "lang"
    split: str | None = None
    kind: str | None = "kind"

    def __post_init__(self) -> None:
        roles = (self.image, self.caption, self.image_id, self.language, self.split, self.kind)
        given = [name for name in roles if name is not None]
        for key in ("image", "caption"):
            check(bool(getattr(self, key)), key, getattr(self, key), "a column name")
        repeated = sorted({name for name in given if given.count(name) > 1})
        if repeated:
            raise SettingError("columns", f"column {repeated[0]!r} is named for two roles")


@dataclass(frozen=True)
class HfConfig:
    """How to read a Hugging Face dataset (the `prepare.hf` section of params.yaml).

    Attributes:
        columns: Which column holds what.
        splits: Canonical split -> the dataset's split name (or value of the split column).
        language: The captions' language when there is no language column.
        cache_dir: None: a corpus's ``source`` is a dataset folder. Set: it is a dataset id (owner/name) in this
            folder of the ``datasets`` cache, read offline.
    """

    columns: HfColumns = field(default_factory=HfColumns)
    splits: dict[str, str] = field(default_factory=lambda: {"train": "train", "val": "validation", "test": "test"})
    language: str = "en"
    cache_dir: str | None = None

    def __post_init__(self) -> None:
        check_split_keys("splits", self.splits)
        check(self.language in ISO_639_1, "language", self.language, "an ISO 639-1 code such as en")
        first_of: dict[str, str] = {}
        for split, name in self.splits.items():
            if first_of.setdefault(name, split) != split:
                raise SettingError(
                    f"splits.{split}", f"{name!r} is already the dataset split of splits.{first_of[name]}"
                )


@dataclass
class _Image:
    listed: ListedImage
    digest: str | None  # SHA-256 of the embedded bytes; None for a path


class _EmbeddedImages:
    """Where embedded images go: the corpus's image folder, swapped in whole once every row was read."""

    def __init__(self, folder: Path | None, source: str | None, stack: contextlib.ExitStack) -> None:
        self.folder, self.source, self.stack = folder, source, stack
        self.tmp: Path | None = None

    def write(self, name: str, data: bytes) -> None:
        if self.folder is None:
            return  # text-only preparation: nothing reads the images
        if self.tmp is None:
            _check_replaceable(self.folder, self.source)
            self.tmp = self.stack.enter_context(atomic_dir(self.folder))
            (self.tmp / WRITTEN_MARK).write_text("written by the hf corpus adapter from the dataset's image column\n")
        (self.tmp / name).write_bytes(data)


def read_hf(
    source: str,
    config: HfConfig,
    *,
    image_root: Path | None,
    dataset: str,
    text: TextCleaner | None = None,
    outside_allowed: bool = False,
) -> Corpus:
    """Read the dataset at ``source`` (a folder, or an id in ``config.cache_dir``) into a validated corpus, every
    caption cleaned by ``text`` (default: NFC, control characters refused); ``outside_allowed``: the image path column
    may lead out of ``image_root``.

    Raises:
        InputError: the dataset cannot be read, a named column is missing or of the wrong type, a row has an empty
            caption or one with a control character, an unknown language or kind, an image id in two splits or with
            two different images, or the image folder cannot be written or read.
    """
    cache_dir = Path(config.cache_dir) if config.cache_dir else None
    where = f"{source} (in {cache_dir})" if cache_dir else source
    loaded = load_splits(source, cache_dir=cache_dir)
    images: dict[str, _Image] = {}
    captions = _Captions(text or TextCleaner())
    with contextlib.ExitStack() as stack:
        sink = _EmbeddedImages(image_root, None if cache_dir else source, stack)
        for split in SPLITS:
            if split not in config.splits:
                continue
            for name, rows in _split_rows(loaded, config, split, where).items():
                _read_rows(rows, f"{where}: split {name}", split, config, images, captions, sink)
        if not images:
            raise InputError(
                f"{where}: no rows in the splits {sorted(config.splits.values())} (found {sorted(loaded)})"
            )
    listed = [image.listed for image in images.values()]
    table = build_images_table(listed, image_root=image_root, dataset=dataset, outside_allowed=outside_allowed)
    return Corpus(images=table, captions=captions.table(table))


def _split_rows(loaded: Mapping[str, pa.Table], config: HfConfig, split: str, where: str) -> dict[str, pa.Table]:
    """The rows of canonical ``split``: a whole dataset split, or the rows of every split whose split column says so."""
    wanted = config.splits[split]
    column = config.columns.split
    if column is None:
        return {wanted: loaded[wanted]} if wanted in loaded else {}
    found = {}
    for name, rows in loaded.items():
        values = _column(rows, column, f"{where}: split {name}").to_pylist()
        keep = [index for index, value in enumerate(values) if value == wanted]
        if keep:
            found[name] = rows.take(keep).append_column(ROW_COLUMN, pa.array(keep, pa.int64()))
    return found


def _column(rows: pa.Table, name: str, where: str) -> pa.ChunkedArray:
    if name not in rows.column_names:
        raise InputError(f"{where}: no column {name!r} (columns: {', '.join(rows.column_names)})")
    return rows.column(name)


class _Captions:
    """Human captions in row order; comparable ones numbered per image and language, one translation per both."""

    def __init__(self, clean: TextCleaner) -> None:
        self.clean = clean
        self.rows = HumanCaptions()
        self.numbers: dict[tuple[str, str], int] = {}
        self.translated: set[tuple[str, str]] = set()

    def add(self, image_id: str, split: str, lang: str, kind: str, text: str, where: str) -> None:
        text = self.clean(text, where)
        if kind == "translation":
            if (image_id, lang) in self.translated:
                raise InputError(f"{where}: a second {lang} translation caption of image {image_id!r}")
            self.translated.add((image_id, lang))
            self.rows.add_translation(image_id, split, lang, text)
            return
        number = self.numbers.get((image_id, lang), 0) + 1
        self.numbers[(image_id, lang)] = number
        self.rows.add_comparable(image_id, split, lang, number, text)

    def table(self, images: pa.Table) -> pa.Table:
        return self.rows.table(images)


def _read_rows(
    rows: pa.Table,
    where: str,
    split: str,
    config: HfConfig,
    images: dict[str, _Image],
    captions: _Captions,
    sink: _EmbeddedImages,
) -> None:
    columns = config.columns
    embedded = pa.types.is_struct(_column(rows, columns.image, where).type)
    _column(rows, columns.caption, where)
    if ROW_COLUMN not in rows.column_names:
        rows = rows.append_column(ROW_COLUMN, pa.array(range(rows.num_rows), pa.int64()))
    for start in range(0, rows.num_rows, BATCH_ROWS):
        batch = rows.slice(start, BATCH_ROWS)
        ids = _optional(batch, columns.image_id, where)
        langs = _optional(batch, columns.language, where)
        kinds = _optional(batch, columns.kind, where)
        values = zip(
            batch.column(ROW_COLUMN).to_pylist(),
            batch.column(columns.image).to_pylist(),
            batch.column(columns.caption).to_pylist(),
            strict=True,
        )
        for index, (row, image, caption) in enumerate(values):
            at = f"{where}: row {row}"
            path, data = _image_of(image, embedded, columns.image, at)
            image_id = _image_id(ids[index] if ids else None, path, columns.image_id, at)
            lang = langs[index] if langs else config.language
            kind = kinds[index] if kinds else "comparable"
            if lang not in ISO_639_1:
                raise InputError(f"{at}: column {columns.language!r}: {lang!r} is not an ISO 639-1 code")
            if kind not in KINDS:
                raise InputError(f"{at}: column {columns.kind!r}: {kind!r} is not one of {list(KINDS)}")
            if data is None:
                _add_image(images, image_id, path, split, None, at)
            else:
                if not SAFE_NAME.match(image_id):
                    raise InputError(f"{at}: image id {image_id!r} cannot name an image file (letters, digits, ._-)")
                name = _file_name(image_id, path, data, at)
                if _add_image(images, image_id, name, split, hashlib.sha256(data).hexdigest(), at):
                    sink.write(name, data)
            for text in _texts(caption, columns.caption, at):
                captions.add(image_id, split, lang, kind, text, f"{at}: column {columns.caption!r}")


def _optional(rows: pa.Table, name: str | None, where: str) -> list[Any] | None:
    if name is None:
        return None
    return [None if value is None else str(value) for value in _column(rows, name, where).to_pylist()]


def _image_of(value: Any, embedded: bool, column: str, at: str) -> tuple[str, bytes | None]:
    """(path, bytes): a relative path and no bytes, or the stored path (maybe empty) and the embedded bytes."""
    if not embedded:
        if not isinstance(value, str) or not value.strip():
            raise InputError(f"{at}: column {column!r}: {value!r} is not an image path")
        return value, None
    data = value.get("bytes") if isinstance(value, dict) else None
    if not data:
        raise InputError(f"{at}: column {column!r}: no embedded image bytes (a path-only image column is not read)")
    return str(value.get("path") or ""), bytes(data)


def _image_id(value: str | None, path: str, column: str | None, at: str) -> str:
    image_id = value if column is not None else Path(path).stem
    if not image_id or not image_id.strip():
        named = f"column {column!r}" if column else "the image path's file stem"
        raise InputError(f"{at}: {named} gives no image id")
    return image_id


def _file_name(image_id: str, stored: str, data: bytes | None, at: str) -> str:
    suffix = Path(stored).suffix.lower()
    if not suffix:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error", Image.DecompressionBombWarning)
                with Image.open(io.BytesIO(data or b"")) as image:
                    suffix = PIL_SUFFIX.get(str(image.format), f".{str(image.format).lower()}")
        except (Image.DecompressionBombWarning, Image.DecompressionBombError) as error:
            reason = f"too many pixels, a possible decompression bomb ({error})"
            raise InputError(f"{at}: the embedded image: {reason}") from None
        except OSError as error:
            raise InputError(f"{at}: the embedded image is not readable ({error})") from None
    return f"{image_id}{suffix}"


def _add_image(images: dict[str, _Image], image_id: str, path: str, split: str, digest: str | None, at: str) -> bool:
    """Record the image of a row; True the first time its id is seen."""
    seen = images.get(image_id)
    if seen is None:
        images[image_id] = _Image(ListedImage(image_id=image_id, path=path, split=split, where=at), digest)
        return True
    if seen.listed.split != split:
        raise InputError(
            f"{at}: image {image_id!r} is in split {split}, but in {seen.listed.split} at {seen.listed.where}"
        )
    if seen.listed.path != path or seen.digest != digest:
        raise InputError(f"{at}: image {image_id!r} differs from the image of the same id at {seen.listed.where}")
    return False


def _texts(value: Any, column: str, at: str) -> list[str]:
    texts = value if isinstance(value, list) else [value]
    if not texts:
        raise InputError(f"{at}: column {column!r}: an image without captions")
    for number, text in enumerate(texts):
        if not isinstance(text, str) or not text.strip():
            shown = f"caption {number}" if isinstance(value, list) else "the caption"
            raise InputError(f"{at}: column {column!r}: {shown} is empty or not text ({text!r})")
    return [text.strip() for text in texts]


def _check_replaceable(folder: Path, source: str | None) -> None:
    """The embedded images may replace ``folder`` only if it is new, empty or theirs, and apart from the dataset."""
    if source is not None:
        data, target = Path(source).resolve(), folder.resolve()
        if target == data or data.is_relative_to(target) or target.is_relative_to(data):
            raise InputError(
                f"{folder}: the folder for the embedded images may not be, hold or sit inside the dataset {source}"
            )
    ours_or_empty = (folder / WRITTEN_MARK).is_file() or (folder.is_dir() and not any(folder.iterdir()))
    if folder.exists() and not ours_or_empty:
        raise InputError(
            f"{folder}: the embedded images would replace this folder, which they did not write "
            f"(no {WRITTEN_MARK}); name a new or empty folder in the corpus's `images`"
        )
