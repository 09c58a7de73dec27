"""Atomic writes, strict text reading and file hashes shared by every adapter and writer.

Every artifact is written to a temporary sibling first and renamed into place, so a killed process
never leaves a half-written file or folder where a reader (or DVC) would take it for a finished one.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


class InputError(ValueError):
    """Bad input data: the message names the file (and line or row) and what was expected."""


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary file path beside ``path``; rename it onto ``path`` only on success."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary folder beside ``path``; swap it in for ``path`` only on success.

    An existing ``path`` is replaced as a whole, so stale files of an earlier run never survive.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    try:
        yield tmp
        if target.exists():
            trash = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".old", dir=target.parent))
            os.replace(target, trash / target.name)
            os.replace(tmp, target)
            shutil.rmtree(trash, ignore_errors=True)
        else:
            os.replace(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def write_json(path: str | os.PathLike[str], data: object) -> None:
    """``data`` as indented JSON with sorted keys (the same data gives the same bytes), written atomically."""
    write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def file_sha256(path: str | os.PathLike[str]) -> str:
    """Hex SHA-256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def file_stamp(path: str | os.PathLike[str]) -> tuple[int, int, int]:
    """(modification time in ns, size, inode) of a file: changes whenever the file is rewritten or replaced,
    without reading it (in-process caches of loaded weights are keyed on it)."""
    stat = os.stat(path)
    return stat.st_mtime_ns, stat.st_size, stat.st_ino


def write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write UTF-8 text atomically; a ``.gz`` suffix writes gzip with a fixed mtime (reproducible bytes)."""
    target = Path(path)
    data = text.encode("utf-8")
    with atomic_path(target) as tmp:
        if target.suffix == ".gz":
            with open(tmp, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as gz:
                gz.write(data)
        else:
            tmp.write_bytes(data)


def read_lines(path: str | os.PathLike[str], *, allow_empty: bool = False) -> list[str]:
    """Read a UTF-8 text file (plain or ``.gz``) as lines without their line ends.

    Raises:
        InputError: the file is missing, is not valid UTF-8 (names the line), or has an empty line
            (names the line) unless ``allow_empty``.
    """
    source = Path(path)
    if not source.is_file():
        raise InputError(f"{source}: file not found")
    raw = source.read_bytes()
    if source.suffix == ".gz":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as error:
            raise InputError(f"{source}: not a valid gzip file ({error})") from None
    lines = raw.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    decoded: list[str] = []
    for number, line in enumerate(lines, start=1):
        try:
            text = line.decode("utf-8").removesuffix("\r")
        except UnicodeDecodeError as error:
            raise InputError(
                f"{source}:{number}: invalid UTF-8 at byte {error.start} of the line ({line[:60]!r})"
            ) from None
        if not allow_empty and not text.strip():
            raise InputError(f"{source}:{number}: empty line (every line must hold one sentence)")
        decoded.append(text)
    return decoded


def read_parallel_lines(src_path: Path, tgt_path: Path) -> tuple[list[str], list[str]]:
    """Read two line-aligned files; a line-count mismatch names both files and both counts."""
    src, tgt = read_lines(src_path), read_lines(tgt_path)
    if len(src) != len(tgt):
        raise InputError(
            f"parallel files differ in length: {src_path} has {len(src)} lines, {tgt_path} has {len(tgt)} lines"
        )
    return src, tgt
