"""Text-only parallel corpora (WMT data, the synthetic stand-in) -> canonical parallel tables.

Layout: ``<root>/<src>-<tgt>/<stem>.<lang>`` with one sentence per line, plain or ``.gz``, or a WMT test
set ``<stem>.<lang>.sgm`` (see :mod:`corpora.sgm`). A split is optional: when neither side has a file for
its stem the split is left out, but one side without the other is an error. Sentences are kept in file
order, stripped of surrounding whitespace and cleaned (:mod:`common.text_input`: NFC, control characters refused or
removed); Moses escapes in plain files (``&apos;``) are kept as written.
Plain and ``.gz`` files are streamed: :func:`write_parallel_pair` writes a WMT-size pair's table in row groups
without holding its sentences.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from common.errors import InputError
from common.files import atomic_path, iter_parallel_lines, read_parallel_lines, remove_stale_temporaries
from common.text_input import TextCleaner
from corpora.languages import check_language
from corpora.sgm import read_sgm_pair
from corpora.tables import PARALLEL_SCHEMA, SPLITS, check_split_keys, parallel_table

SUFFIXES = ("", ".gz", ".sgm")
BATCH_ROWS = 100_000  # rows per Parquet row group when a pair is streamed to its table


@dataclass(frozen=True)
class ParallelConfig:
    """How to read a text-only parallel corpus (the `prepare.parallel` section of params.yaml).

    Attributes:
        splits: Canonical split -> file stem in each ``<src>-<tgt>/`` folder (e.g. val: newstest2013).
    """

    splits: dict[str, str] = field(default_factory=lambda: {split: split for split in SPLITS})

    def __post_init__(self) -> None:
        check_split_keys("splits", self.splits)


def read_parallel_corpus(
    root: Path, *, pairs: Sequence[tuple[str, str]], splits: Mapping[str, str], text: TextCleaner | None = None
) -> dict[str, pa.Table]:
    """Read every language pair's split files into parallel tables.

    Args:
        root: The folder holding one ``<src>-<tgt>`` folder per pair.
        pairs: (source, target) ISO 639-1 codes.
        splits: Canonical split -> file stem, e.g. ``{"train": "train", "val": "newstest2013"}``.
        text: Cleans every sentence (default: NFC, control characters refused).

    Returns:
        "<src>-<tgt>" -> table with columns split, src, tgt (splits in train, val, test order).

    Raises:
        InputError: a bad language or split, a split file on one side only, two files for one side
            (e.g. ``.en`` and ``.en.gz``), a line-count or segment mismatch, a sentence with a control character, or
            a pair without any file.
    """
    if not splits or any(split not in SPLITS for split in splits):
        raise InputError(f"parallel splits: {list(splits)}; expected a non-empty subset of {list(SPLITS)}")
    tables: dict[str, pa.Table] = {}
    for src, tgt in pairs:
        check_language(src, where="parallel pairs")
        check_language(tgt, where="parallel pairs")
        name = f"{src}-{tgt}"  # the pair's folder here and its table name in data/prepared/parallel/
        tables[name] = _read_pair_folder(Path(root) / name, src, tgt, splits, text or TextCleaner())
    return tables


def _read_pair_folder(folder: Path, src: str, tgt: str, splits: Mapping[str, str], text: TextCleaner) -> pa.Table:
    columns: dict[str, list[str]] = {"split": [], "src": [], "tgt": []}
    for split, src_text, tgt_text in iter_pair_rows(folder, src, tgt, splits, text):
        columns["split"].append(split)
        columns["src"].append(src_text)
        columns["tgt"].append(tgt_text)
    return parallel_table(columns)


def iter_pair_rows(
    folder: Path, src: str, tgt: str, splits: Mapping[str, str], text: TextCleaner | None = None
) -> Iterator[tuple[str, str, str]]:
    """The (split, src, tgt) rows of one pair folder in train, val, test order, plain and ``.gz`` files streamed
    line by line (``.sgm`` test sets are read whole), each sentence cleaned by ``text`` (default: NFC, control
    characters refused). Every split's files are found before the first row.

    Raises:
        InputError: as :func:`read_parallel_corpus`.
    """
    present = {
        split: paths for split in SPLITS if split in splits and (paths := _split_files(folder, splits[split], src, tgt))
    }
    if not present:
        stems = sorted(set(splits.values()))
        raise InputError(f"{folder}: no parallel files for stems {stems} (expected <stem>.{src} and <stem>.{tgt})")
    clean = text or TextCleaner()
    for split, (src_path, tgt_path) in present.items():
        for src_text, tgt_text in _iter_pair(src_path, tgt_path, clean):
            yield split, src_text, tgt_text


def write_parallel_pair(
    root: Path,
    *,
    pair: tuple[str, str],
    splits: Mapping[str, str],
    out: Path,
    batch_rows: int = BATCH_ROWS,
    text: TextCleaner | None = None,
) -> dict[str, int]:
    """Stream one pair's split files into the Parquet table ``out`` (columns split, src, tgt), ``batch_rows`` rows
    per row group, so memory stays flat in the corpus size; written atomically (the temporary file a killed run
    left beside it is removed first). Below ``batch_rows`` rows the file is the one :func:`read_parallel_corpus`
    and :func:`corpora.prepared.write_parallel_table` write.

    Returns:
        Split -> sentence pairs written, in train, val, test order.

    Raises:
        InputError: as :func:`read_parallel_corpus`.
    """
    src, tgt = pair
    check_language(src, where="parallel pairs")
    check_language(tgt, where="parallel pairs")
    if not splits or any(split not in SPLITS for split in splits):
        raise InputError(f"parallel splits: {list(splits)}; expected a non-empty subset of {list(SPLITS)}")
    rows = iter_pair_rows(Path(root) / f"{src}-{tgt}", src, tgt, splits, text)
    counts: dict[str, int] = {}
    remove_stale_temporaries(Path(out))
    with atomic_path(out) as tmp, pq.ParquetWriter(tmp, PARALLEL_SCHEMA, compression="zstd") as writer:
        columns: dict[str, list[str]] = {"split": [], "src": [], "tgt": []}
        for split, src_text, tgt_text in rows:  # never blank: the readers reject blank lines and segments
            columns["split"].append(split)
            columns["src"].append(src_text)
            columns["tgt"].append(tgt_text)
            counts[split] = counts.get(split, 0) + 1
            if len(columns["split"]) == batch_rows:
                writer.write_table(pa.table(columns, schema=PARALLEL_SCHEMA))
                columns = {name: [] for name in columns}
        if columns["split"]:
            writer.write_table(pa.table(columns, schema=PARALLEL_SCHEMA))
    return counts


def _split_files(folder: Path, stem: str, src: str, tgt: str) -> tuple[Path, Path] | None:
    """The split's (src, tgt) files, or None when neither side has a file."""
    src_path, tgt_path = _side_file(folder, stem, src), _side_file(folder, stem, tgt)
    if src_path is None and tgt_path is None:
        return None
    if src_path is None or tgt_path is None:
        missing, present = (src, tgt_path) if src_path is None else (tgt, src_path)
        raise InputError(f"{folder / f'{stem}.{missing}'}: file not found (nor .gz/.sgm), but {present} exists")
    return src_path, tgt_path


def _side_file(folder: Path, stem: str, lang: str) -> Path | None:
    present = [path for suffix in SUFFIXES if (path := folder / f"{stem}.{lang}{suffix}").is_file()]
    if len(present) > 1:
        raise InputError(f"{folder}: {[path.name for path in present]} are the same side twice; keep one")
    return present[0] if present else None


def _iter_pair(src_path: Path, tgt_path: Path, clean: TextCleaner) -> Iterator[tuple[str, str]]:
    """Aligned, stripped, cleaned sentences of two files: both ``.sgm`` (read whole) or both line-aligned text
    (streamed)."""
    if src_path.suffix == ".sgm" or tgt_path.suffix == ".sgm":
        for number, (src_text, tgt_text) in enumerate(zip(*read_pair(src_path, tgt_path), strict=True), start=1):
            yield clean(src_text, f"{src_path}: segment {number}"), clean(tgt_text, f"{tgt_path}: segment {number}")
        return
    for number, (src_line, tgt_line) in enumerate(iter_parallel_lines(src_path, tgt_path), start=1):
        yield clean(src_line.strip(), f"{src_path}:{number}"), clean(tgt_line.strip(), f"{tgt_path}:{number}")


def read_pair(src_path: Path, tgt_path: Path) -> tuple[list[str], list[str]]:
    """Aligned sentences of two files: both ``.sgm`` (matched by segment) or both line-aligned text."""
    src_sgm, tgt_sgm = src_path.suffix == ".sgm", tgt_path.suffix == ".sgm"
    if src_sgm and tgt_sgm:
        return read_sgm_pair(src_path, tgt_path)
    if src_sgm or tgt_sgm:
        raise InputError(f"cannot align {src_path} with {tgt_path}: one is .sgm, the other plain text")
    src, tgt = read_parallel_lines(src_path, tgt_path)
    return [line.strip() for line in src], [line.strip() for line in tgt]


def read_plain_pair(src_path: Path, tgt_path: Path, split: str, text: TextCleaner | None = None) -> pa.Table:
    """A parallel table of one split from two line-aligned text files (plain or ``.gz``), each sentence cleaned by
    ``text`` (default: NFC, control characters refused).

    For corpora outside the ``<src>-<tgt>/<stem>.<lang>`` layout, e.g. OpenNMT's ``src-train.txt`` and
    ``tgt-train.txt``.
    """
    if split not in SPLITS:
        raise InputError(f"split {split!r} is not one of {list(SPLITS)}")
    clean = text or TextCleaner()
    src, tgt = read_parallel_lines(Path(src_path), Path(tgt_path))
    src = [clean(line.strip(), f"{src_path}:{number}") for number, line in enumerate(src, start=1)]
    tgt = [clean(line.strip(), f"{tgt_path}:{number}") for number, line in enumerate(tgt, start=1)]
    return parallel_table({"split": [split] * len(src), "src": src, "tgt": tgt})
