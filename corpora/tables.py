"""The canonical image, caption and parallel-text tables (Parquet), validated on write and on read.

Every adapter, the synthetic generator and every later stage exchange data only through these tables:
- ``images.parquet``: one row per image (id, split, path relative to the image root, size, dataset).
  ``split`` is a canonical split (train, val, test) or ``eval:<name>``, an extra evaluation set scored beside
  ``test`` (:func:`eval_split`); ``test`` stays the primary test set.
- ``captions.parquet``: one row per caption, human or synthesized, with its provenance.
- ``parallel/<src>-<tgt>.parquet``: text-only sentence pairs for MT pre-training.
- ``image_dependent.parquet`` (optional, evaluation only): per translation caption, the words whose form the image
  decides (the pivot caption leaves them open), for captions with at least one.
- ``contrastive.parquet`` (optional, evaluation only): an ambiguous pivot sentence, two images, and the right
  translation with each.

Row order is kept as written: for COCO the Karpathy test order defines the five 1K folds.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from common.checks import SettingError
from common.errors import InputError
from common.files import atomic_path
from common.text_input import UNWANTED_PATTERN, quoted
from corpora.languages import ISO_639_1

SPLITS = ("train", "val", "test")
ORIGINS = ("human", "mt", "mmt")
KINDS = ("comparable", "translation")
EVAL_SPLIT_PREFIX = "eval:"  # the split value of an extra evaluation set: eval:<name>
# a name that can be a key of a metrics file (no dot, which DVC's flattened keys use) and part of a heading
_EVAL_SET_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")


def eval_split(name: str) -> str:
    """The split value of the extra evaluation set ``name`` in the images and captions tables: ``eval:<name>``."""
    return f"{EVAL_SPLIT_PREFIX}{name}"


def eval_set_name(split: str) -> str | None:
    """The evaluation set ``eval:<name>`` names, or None for a canonical split."""
    return split.removeprefix(EVAL_SPLIT_PREFIX) if split.startswith(EVAL_SPLIT_PREFIX) else None


def check_eval_set_names(key: str, names: Mapping[str, object]) -> None:
    """A setting that maps evaluation set names to something: lowercase identifiers, none a canonical split name."""
    for name in names:
        if name in SPLITS or not _EVAL_SET_NAME.fullmatch(name):
            raise SettingError(
                f"{key}.{name}",
                "an evaluation set name is a lowercase identifier ([a-z][a-z0-9_]*, at most 40 characters) other "
                f"than {', '.join(SPLITS)}",
            )


def check_split_keys(key: str, splits: Mapping[str, object]) -> None:
    """A setting that maps canonical split names to something: at least one, and only train/val/test."""
    unknown = sorted(set(splits) - set(SPLITS))
    if unknown:
        raise SettingError(f"{key}.{unknown[0]}", f"unknown split; allowed: {', '.join(SPLITS)}")
    if not splits:
        raise SettingError(key, "at least one split is needed")


IMAGES_SCHEMA = pa.schema(
    [
        pa.field("image_id", pa.string(), nullable=False),
        pa.field("split", pa.string(), nullable=False),
        pa.field("path", pa.string(), nullable=False),
        pa.field("width", pa.int32()),  # null when the images were not opened (text-only preparation)
        pa.field("height", pa.int32()),
        pa.field("dataset", pa.string(), nullable=False),
    ]
)

CAPTIONS_SCHEMA = pa.schema(
    [
        pa.field("caption_id", pa.string(), nullable=False),
        pa.field("image_id", pa.string(), nullable=False),
        pa.field("split", pa.string(), nullable=False),
        pa.field("lang", pa.string(), nullable=False),
        pa.field("text", pa.string(), nullable=False),
        pa.field("origin", pa.string(), nullable=False),
        pa.field("system", pa.string()),
        pa.field("hop", pa.int32(), nullable=False),
        pa.field("parent_id", pa.string()),
        pa.field("kind", pa.string(), nullable=False),
    ]
)

PARALLEL_SCHEMA = pa.schema(
    [
        pa.field("split", pa.string(), nullable=False),
        pa.field("src", pa.string(), nullable=False),
        pa.field("tgt", pa.string(), nullable=False),
    ]
)


IMAGE_DEPENDENT_SCHEMA = pa.schema(
    [
        pa.field("split", pa.string(), nullable=False),
        pa.field("image_id", pa.string(), nullable=False),
        pa.field("lang", pa.string(), nullable=False),
        pa.field("words", pa.list_(pa.string()), nullable=False),  # in caption order, repeats kept
    ]
)

CONTRASTIVE_SCHEMA = pa.schema(
    [
        pa.field("src_lang", pa.string(), nullable=False),
        pa.field("tgt_lang", pa.string(), nullable=False),
        pa.field("source", pa.string(), nullable=False),
        pa.field("image_a", pa.string(), nullable=False),
        pa.field("image_b", pa.string(), nullable=False),
        pa.field("translation_a", pa.string(), nullable=False),  # right with image_a
        pa.field("translation_b", pa.string(), nullable=False),  # right with image_b
    ]
)


def images_table(columns: Mapping[str, Sequence[Any]]) -> pa.Table:
    """Build an images table from columns (``width``/``height`` may be None) and validate it."""
    table = _from_columns(columns, IMAGES_SCHEMA, "images table")
    validate_images(table, source="images table")
    return table


def captions_table(columns: Mapping[str, Sequence[Any]], images: pa.Table | None = None) -> pa.Table:
    """Build a captions table from columns and validate it (against ``images`` when given)."""
    table = _from_columns(columns, CAPTIONS_SCHEMA, "captions table")
    validate_captions(table, images=images, source="captions table")
    return table


def parallel_table(columns: Mapping[str, Sequence[Any]]) -> pa.Table:
    """Build a parallel-text table from ``split``, ``src``, ``tgt`` columns and validate it."""
    table = _from_columns(columns, PARALLEL_SCHEMA, "parallel table")
    validate_parallel(table, source="parallel table")
    return table


def image_dependent_table(columns: Mapping[str, Sequence[Any]], images: pa.Table | None = None) -> pa.Table:
    """Build an image-dependent words table from columns and validate it (against ``images`` when given)."""
    table = _from_columns(columns, IMAGE_DEPENDENT_SCHEMA, "image-dependent words table")
    validate_image_dependent(table, images=images, source="image-dependent words table")
    return table


def contrastive_table(columns: Mapping[str, Sequence[Any]], images: pa.Table | None = None) -> pa.Table:
    """Build a contrastive-items table from columns and validate it (against ``images`` when given)."""
    table = _from_columns(columns, CONTRASTIVE_SCHEMA, "contrastive table")
    validate_contrastive(table, images=images, source="contrastive table")
    return table


def _from_columns(columns: Mapping[str, Sequence[Any]], schema: pa.Schema, source: str) -> pa.Table:
    missing = [name for name in schema.names if name not in columns]
    unknown = [name for name in columns if name not in schema.names]
    if missing or unknown:
        raise InputError(f"{source}: missing columns {missing}, unknown columns {unknown}; expected {schema.names}")
    try:
        return pa.table({name: columns[name] for name in schema.names}, schema=schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as error:
        raise InputError(f"{source}: {error}") from None


def _check_schema(table: pa.Table, schema: pa.Schema, source: str) -> None:
    missing = [name for name in schema.names if name not in table.column_names]
    if missing:
        raise InputError(f"{source}: missing column(s) {missing}; expected columns {schema.names}")
    unknown = [name for name in table.column_names if name not in schema.names]
    if unknown:
        raise InputError(f"{source}: unknown column(s) {unknown}; expected columns {schema.names}")
    for field in schema:
        actual = table.schema.field(field.name).type
        if actual != field.type:
            raise InputError(f"{source}: column {field.name!r} has type {actual}, expected {field.type}")
        if not field.nullable and table.column(field.name).null_count:
            row = _first_row(pc.is_null(table.column(field.name)))
            raise InputError(f"{source}: row {row}: column {field.name!r} is null")


def _first_row(mask: pa.ChunkedArray | pa.Array) -> int:
    """Index of the first true value of a boolean mask (the caller knows there is one)."""
    return int(pc.index(mask, pa.scalar(True)).as_py())


def _check_allowed(table: pa.Table, column: str, allowed: Sequence[str] | frozenset[str], source: str) -> None:
    values = table.column(column)
    bad = pc.invert(pc.fill_null(pc.is_in(values, value_set=pa.array(sorted(allowed))), True))
    if pc.any(bad).as_py():
        row = _first_row(bad)
        shown = sorted(allowed) if len(allowed) < 10 else "ISO 639-1 codes"
        raise InputError(f"{source}: row {row}: {column} = {values[row].as_py()!r} is not one of {shown}")


def _check_splits(table: pa.Table, source: str) -> None:
    """Every split is a canonical one or ``eval:<name>`` with a valid name."""
    values = table.column("split")
    canonical = pc.fill_null(pc.is_in(values, value_set=pa.array(SPLITS)), False)
    named = pc.fill_null(pc.match_substring_regex(values, rf"^{EVAL_SPLIT_PREFIX}{_EVAL_SET_NAME.pattern}$"), False)
    bad = pc.invert(pc.or_(canonical, named))
    if pc.any(bad).as_py():
        row = _first_row(bad)
        raise InputError(
            f"{source}: row {row}: split = {values[row].as_py()!r} is not one of {list(SPLITS)} or "
            f"{EVAL_SPLIT_PREFIX}<name> (an evaluation set)"
        )


def _check_unique(table: pa.Table, column: str, source: str) -> None:
    values = table.column(column)
    if pc.count_distinct(values).as_py() != len(values):
        counts = pc.value_counts(values)
        duplicated = pc.filter(counts.field("values"), pc.greater(counts.field("counts"), 1))
        first = duplicated[0].as_py()
        rows = pc.indices_nonzero(pc.equal(values, first)).to_pylist()[:5]
        raise InputError(
            f"{source}: duplicate {column} {first!r} at rows {rows} ({len(duplicated)} duplicated values in all)"
        )


def _check_nonempty_text(table: pa.Table, column: str, source: str) -> None:
    blank = pc.equal(pc.utf8_trim_whitespace(table.column(column)), "")
    if pc.any(blank).as_py():
        raise InputError(f"{source}: row {_first_row(blank)}: {column} is empty")


def _check_clean_text(table: pa.Table, column: str, source: str) -> None:
    """Stored text is NFC without control or bidirectional formatting characters (what the readers make of it)."""
    values = table.column(column)
    unwanted = pc.fill_null(pc.match_substring_regex(values, UNWANTED_PATTERN), False)
    if pc.any(unwanted).as_py():
        row = _first_row(unwanted)
        raise InputError(
            f"{source}: row {row}: {column} {quoted(values[row].as_py())} holds a control or bidirectional "
            "formatting character"
        )
    changed = pc.fill_null(pc.not_equal(pc.utf8_normalize(values, form="NFC"), values), False)
    if pc.any(changed).as_py():
        row = _first_row(changed)
        raise InputError(f"{source}: row {row}: {column} {quoted(values[row].as_py())} is not in Unicode NFC")


def validate_images(table: pa.Table, *, source: str) -> None:
    """Check schema, allowed splits, unique ids and non-empty paths; raise InputError naming the row."""
    _check_schema(table, IMAGES_SCHEMA, source)
    _check_splits(table, source)
    _check_unique(table, "image_id", source)
    _check_nonempty_text(table, "image_id", source)
    _check_nonempty_text(table, "path", source)
    for column in ("width", "height"):
        nonpositive = pc.less_equal(table.column(column), 0)
        if pc.any(nonpositive).as_py():
            raise InputError(f"{source}: row {_first_row(nonpositive)}: {column} must be positive")


def validate_captions(
    table: pa.Table, *, images: pa.Table | None = None, source: str, parents_held: bool = True
) -> None:
    """Check schema, vocabularies, provenance rules, unique ids and (with ``images``) image references.
    ``parents_held`` False: the table is one language's part of a caption variant, whose synthesized captions'
    parents are in the other languages' parts (every other rule still holds)."""
    _check_schema(table, CAPTIONS_SCHEMA, source)
    _check_splits(table, source)
    _check_allowed(table, "origin", ORIGINS, source)
    _check_allowed(table, "kind", KINDS, source)
    _check_allowed(table, "lang", ISO_639_1, source)
    _check_unique(table, "caption_id", source)
    _check_nonempty_text(table, "text", source)
    _check_clean_text(table, "text", source)
    _check_provenance(table, source, parents_held=parents_held)
    if images is not None:
        _check_image_references(table, images, source)


def _check_provenance(table: pa.Table, source: str, *, parents_held: bool) -> None:
    human = pc.equal(table.column("origin"), "human")
    hop_zero = pc.equal(table.column("hop"), 0)
    rules = [
        (pc.xor(human, hop_zero), "hop must be 0 exactly for human captions"),
        (pc.less(table.column("hop"), 0), "hop must not be negative"),
        (pc.and_(human, pc.is_valid(table.column("parent_id"))), "a human caption has no parent_id"),
        (pc.and_(human, pc.is_valid(table.column("system"))), "a human caption has no system"),
        (pc.and_(pc.invert(human), pc.is_null(table.column("parent_id"))), "a synthesized caption needs a parent_id"),
        (pc.and_(pc.invert(human), pc.is_null(table.column("system"))), "a synthesized caption needs a system"),
    ]
    for violated, rule in rules:
        if pc.any(violated).as_py():
            row = _first_row(violated)
            raise InputError(f"{source}: row {row} (caption {table.column('caption_id')[row].as_py()!r}): {rule}")
    if not parents_held:
        return
    parents = table.column("parent_id").drop_null()
    unknown = pc.invert(pc.is_in(parents, value_set=table.column("caption_id")))
    if len(parents) and pc.any(unknown).as_py():
        raise InputError(
            f"{source}: parent_id {parents[_first_row(unknown)].as_py()!r} is not a caption_id of the table"
        )


def _check_image_references(table: pa.Table, images: pa.Table, source: str) -> None:
    image_ids = table.column("image_id")
    position = pc.index_in(image_ids, value_set=images.column("image_id"))
    unknown = pc.is_null(position)
    if pc.any(unknown).as_py():
        row = _first_row(unknown)
        raise InputError(f"{source}: row {row}: caption points at unknown image_id {image_ids[row].as_py()!r}")
    image_split = pc.take(images.column("split"), position)
    wrong = pc.not_equal(table.column("split"), image_split)
    if pc.any(wrong).as_py():
        row = _first_row(wrong)
        raise InputError(
            f"{source}: row {row}: caption split {table.column('split')[row].as_py()!r} differs from the split "
            f"{image_split[row].as_py()!r} of its image {image_ids[row].as_py()!r}"
        )


def validate_parallel(table: pa.Table, *, source: str) -> None:
    """Check schema, splits and non-empty sentences of a parallel-text table."""
    _check_schema(table, PARALLEL_SCHEMA, source)
    _check_allowed(table, "split", SPLITS, source)
    for column in ("src", "tgt"):
        _check_nonempty_text(table, column, source)
        _check_clean_text(table, column, source)


def validate_image_dependent(table: pa.Table, *, images: pa.Table | None = None, source: str) -> None:
    """Check schema, vocabularies, one row per (image, language), at least one non-empty word per row and (with
    ``images``) that every image exists in that split."""
    _check_schema(table, IMAGE_DEPENDENT_SCHEMA, source)
    _check_splits(table, source)
    _check_allowed(table, "lang", ISO_639_1, source)
    keys = pc.binary_join_element_wise(table.column("image_id"), table.column("lang"), "|")
    _check_unique(table.append_column("image_id|lang", keys), "image_id|lang", source)
    words = table.column("words").combine_chunks()  # list_parent_indices counts rows per chunk otherwise
    no_words = pc.equal(pc.list_value_length(words), 0)
    if pc.any(no_words).as_py():
        raise InputError(
            f"{source}: row {_first_row(no_words)}: words is empty (rows are only for captions with words)"
        )
    rows = pc.list_parent_indices(words)
    flat = pc.list_flatten(words)
    bad = pc.fill_null(pc.match_substring_regex(flat, r"^$|\s"), True)  # empty, null, or more than one word
    if pc.any(bad).as_py():
        row = rows[_first_row(bad)].as_py()
        raise InputError(f"{source}: row {row}: words {words[row].as_py()!r} holds an empty word or one with a space")
    if images is not None:
        _check_image_references(table, images, source)


def validate_contrastive(table: pa.Table, *, images: pa.Table | None = None, source: str) -> None:
    """Check schema, languages, non-empty sentences, two different images and translations per item and (with
    ``images``) that both images exist."""
    _check_schema(table, CONTRASTIVE_SCHEMA, source)
    for column in ("src_lang", "tgt_lang"):
        _check_allowed(table, column, ISO_639_1, source)
    for column in ("source", "image_a", "image_b", "translation_a", "translation_b"):
        _check_nonempty_text(table, column, source)
    for column in ("source", "translation_a", "translation_b"):
        _check_clean_text(table, column, source)
    for first, second in (("image_a", "image_b"), ("translation_a", "translation_b")):
        same = pc.equal(table.column(first), table.column(second))
        if pc.any(same).as_py():
            raise InputError(
                f"{source}: row {_first_row(same)}: {first} and {second} are the same (nothing to contrast)"
            )
    if images is not None:
        for column in ("image_a", "image_b"):
            unknown = pc.invert(pc.is_in(table.column(column), value_set=images.column("image_id")))
            if pc.any(unknown).as_py():
                row = _first_row(unknown)
                raise InputError(f"{source}: row {row}: {column} {table.column(column)[row].as_py()!r} is not an image")


def write_parquet(table: pa.Table, path: str | os.PathLike[str]) -> None:
    """Write a table atomically (temp file + rename); the caller validates first."""
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd")


def read_parquet(path: str | os.PathLike[str]) -> pa.Table:
    """A Parquet table as it is (the caller validates it); a missing or unreadable file is an InputError."""
    source = Path(path)
    if not source.is_file():
        raise InputError(f"{source}: file not found")
    try:
        return pq.read_table(source)
    except (pa.ArrowInvalid, OSError) as error:
        raise InputError(f"{source}: not a readable Parquet file ({error})") from None


def write_images(table: pa.Table, path: str | os.PathLike[str]) -> None:
    validate_images(table, source=str(path))
    write_parquet(table, path)


def write_captions(table: pa.Table, path: str | os.PathLike[str], *, images: pa.Table | None = None) -> None:
    validate_captions(table, images=images, source=str(path))
    write_parquet(table, path)


def write_parallel(table: pa.Table, path: str | os.PathLike[str]) -> None:
    validate_parallel(table, source=str(path))
    write_parquet(table, path)


def read_images(path: str | os.PathLike[str]) -> pa.Table:
    table = read_parquet(path)
    validate_images(table, source=str(path))
    return table


def read_captions(
    path: str | os.PathLike[str], *, images: pa.Table | None = None, parents_held: bool = True
) -> pa.Table:
    table = read_parquet(path)
    validate_captions(table, images=images, source=str(path), parents_held=parents_held)
    return table


def read_parallel(path: str | os.PathLike[str]) -> pa.Table:
    table = read_parquet(path)
    validate_parallel(table, source=str(path))
    return table


def read_image_dependent(path: str | os.PathLike[str], *, images: pa.Table | None = None) -> pa.Table:
    table = read_parquet(path)
    validate_image_dependent(table, images=images, source=str(path))
    return table


def read_contrastive(path: str | os.PathLike[str], *, images: pa.Table | None = None) -> pa.Table:
    table = read_parquet(path)
    validate_contrastive(table, images=images, source=str(path))
    return table
