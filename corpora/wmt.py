"""Text-only parallel corpora (WMT data, the synthetic stand-in) -> canonical parallel tables.

Layout: ``<root>/<src>-<tgt>/<stem>.<lang>`` with one sentence per line, plain or ``.gz``, or a WMT test
set ``<stem>.<lang>.sgm`` (see :mod:`corpora.sgm`). A split is optional: when neither side has a file for
its stem the split is left out, but one side without the other is an error. Sentences are kept in file
order, stripped of surrounding whitespace; Moses escapes in plain files (``&apos;``) are kept as written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from common.errors import InputError
from common.files import read_parallel_lines
from corpora.languages import check_language
from corpora.sgm import read_sgm_pair
from corpora.tables import SPLITS, check_split_keys, parallel_table

SUFFIXES = ("", ".gz", ".sgm")


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
    root: Path, *, pairs: Sequence[tuple[str, str]], splits: Mapping[str, str]
) -> dict[str, pa.Table]:
    """Read every language pair's split files into parallel tables.

    Args:
        root: The folder holding one ``<src>-<tgt>`` folder per pair.
        pairs: (source, target) ISO 639-1 codes.
        splits: Canonical split -> file stem, e.g. ``{"train": "train", "val": "newstest2013"}``.

    Returns:
        "<src>-<tgt>" -> table with columns split, src, tgt (splits in train, val, test order).

    Raises:
        InputError: a bad language or split, a split file on one side only, two files for one side
            (e.g. ``.en`` and ``.en.gz``), a line-count or segment mismatch, or a pair without any file.
    """
    if not splits or any(split not in SPLITS for split in splits):
        raise InputError(f"parallel splits: {list(splits)}; expected a non-empty subset of {list(SPLITS)}")
    tables: dict[str, pa.Table] = {}
    for src, tgt in pairs:
        check_language(src, where="parallel pairs")
        check_language(tgt, where="parallel pairs")
        name = f"{src}-{tgt}"  # the pair's folder here and its table name in data/prepared/parallel/
        tables[name] = _read_pair_folder(Path(root) / name, src, tgt, splits)
    return tables


def _read_pair_folder(folder: Path, src: str, tgt: str, splits: Mapping[str, str]) -> pa.Table:
    columns: dict[str, list[str]] = {"split": [], "src": [], "tgt": []}
    for split in [split for split in SPLITS if split in splits]:
        texts = _read_split(folder, splits[split], src, tgt)
        if texts is None:
            continue
        columns["split"] += [split] * len(texts[0])
        columns["src"] += texts[0]
        columns["tgt"] += texts[1]
    if not columns["split"]:
        stems = sorted(set(splits.values()))
        raise InputError(f"{folder}: no parallel files for stems {stems} (expected <stem>.{src} and <stem>.{tgt})")
    return parallel_table(columns)


def _read_split(folder: Path, stem: str, src: str, tgt: str) -> tuple[list[str], list[str]] | None:
    """The split's (src, tgt) sentences, or None when neither side has a file."""
    src_path, tgt_path = _side_file(folder, stem, src), _side_file(folder, stem, tgt)
    if src_path is None and tgt_path is None:
        return None
    if src_path is None or tgt_path is None:
        missing, present = (src, tgt_path) if src_path is None else (tgt, src_path)
        raise InputError(f"{folder / f'{stem}.{missing}'}: file not found (nor .gz/.sgm), but {present} exists")
    return read_pair(src_path, tgt_path)


def _side_file(folder: Path, stem: str, lang: str) -> Path | None:
    present = [path for suffix in SUFFIXES if (path := folder / f"{stem}.{lang}{suffix}").is_file()]
    if len(present) > 1:
        raise InputError(f"{folder}: {[path.name for path in present]} are the same side twice; keep one")
    return present[0] if present else None


def read_pair(src_path: Path, tgt_path: Path) -> tuple[list[str], list[str]]:
    """Aligned sentences of two files: both ``.sgm`` (matched by segment) or both line-aligned text."""
    src_sgm, tgt_sgm = src_path.suffix == ".sgm", tgt_path.suffix == ".sgm"
    if src_sgm and tgt_sgm:
        return read_sgm_pair(src_path, tgt_path)
    if src_sgm or tgt_sgm:
        raise InputError(f"cannot align {src_path} with {tgt_path}: one is .sgm, the other plain text")
    src, tgt = read_parallel_lines(src_path, tgt_path)
    return [line.strip() for line in src], [line.strip() for line in tgt]


def read_plain_pair(src_path: Path, tgt_path: Path, split: str) -> pa.Table:
    """A parallel table of one split from two line-aligned text files (plain or ``.gz``).

    For corpora outside the ``<src>-<tgt>/<stem>.<lang>`` layout, e.g. OpenNMT's ``src-train.txt`` and
    ``tgt-train.txt``.
    """
    if split not in SPLITS:
        raise InputError(f"split {split!r} is not one of {list(SPLITS)}")
    src, tgt = read_parallel_lines(Path(src_path), Path(tgt_path))
    return parallel_table(
        {"split": [split] * len(src), "src": [line.strip() for line in src], "tgt": [line.strip() for line in tgt]}
    )
