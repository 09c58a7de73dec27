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
import re
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from common.errors import RESOURCE_ERRNOS, InputError, StorageError, os_errno
from common.text_input import shown


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# Read once: os.umask can only be read by setting it, which is not safe while other threads create files.
_UMASK = _current_umask()
FILE_MODE, DIR_MODE = 0o666 & ~_UMASK, 0o777 & ~_UMASK  # what open() and mkdir() would give; mkstemp gives 0600


def storage_error(action: str, path: str | os.PathLike[str], error: BaseException) -> StorageError | None:
    """``error`` as a :class:`StorageError` naming ``path`` (its final name, never a temporary), if it is a
    resource fault (:data:`RESOURCE_ERRNOS`); else None."""
    number = os_errno(error)
    if isinstance(error, StorageError) or number not in RESOURCE_ERRNOS:
        return None
    return StorageError(action, final_path(path), number, os.strerror(number))


def _writing_fault(error: BaseException, target: Path, temporary: Path | None) -> StorageError | None:
    """A resource fault met while writing ``target`` as a :class:`StorageError`: naming the file it hit when that
    is in the temporary (by its final name), else ``target`` (its folder could not be made, or a writer library
    named no file). A fault on another file (an input read inside the block) stays as it is, for the entry point
    to name that file."""
    filename = getattr(error, "filename", None) if isinstance(error, OSError) else None
    if filename is None:
        return storage_error("write", target, error)
    culprit = Path(os.fsdecode(filename))
    if temporary is not None and (culprit == temporary or temporary in culprit.parents):
        return storage_error("write", culprit, error)
    temporary_sibling = culprit.parent == target.parent and culprit.name.startswith(f".{target.name}.")
    if culprit == target or temporary_sibling or culprit in target.parents:  # target, its temporary, its folders
        return storage_error("write", target, error)
    return None


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary file path beside ``path``; rename it onto ``path`` only on success.

    Raises:
        StorageError: the disk is full, the folder read-only or not writable (:data:`RESOURCE_ERRNOS`), also when
            a writer library inside the block wraps that error in its own type; the temporary is removed and an
            existing ``path`` stays as it was.
    """
    target = Path(path)
    tmp: Path | None = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        os.close(fd)
        tmp = Path(tmp_name)
        yield tmp
        if tmp.is_file():
            os.chmod(tmp, FILE_MODE)
        os.replace(tmp, target)
    except Exception as error:
        fault = _writing_fault(error, target, tmp)
        if fault is None:
            raise
        raise fault from error
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary folder beside ``path``; swap it in for ``path`` only on success.

    An existing ``path`` is replaced as a whole, so stale files of an earlier run never survive.

    Raises:
        StorageError: a resource fault while writing (as :func:`atomic_path`); the temporary folder is removed and
            an existing ``path`` stays as it was.
    """
    target = Path(path)
    tmp: Path | None = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(target)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
        yield tmp
        os.chmod(tmp, DIR_MODE)
        _swap_in(tmp, target)
    except Exception as error:
        fault = _writing_fault(error, target, tmp)
        if fault is None:
            raise
        raise fault from error
    finally:
        if tmp is not None and tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _swap_in(folder: Path, target: Path) -> None:
    """Rename ``folder`` onto ``target``, an existing ``target`` moved aside first and removed after (put back if
    the second rename fails, so ``target`` is never lost)."""
    if not target.exists():
        os.replace(folder, target)
        return
    trash = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    os.replace(target, trash / target.name)
    try:
        os.replace(folder, target)
    except BaseException:
        os.replace(trash / target.name, target)
        raise
    finally:
        shutil.rmtree(trash, ignore_errors=True)


def user_cache_dir() -> Path:
    """Where readers keep what they may rebuild (never inside a DVC output): ``$MMTR_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/mmtr``, else ``~/.cache/mmtr``."""
    if os.environ.get("MMTR_CACHE_DIR"):
        return Path(os.environ["MMTR_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mmtr"


def remove_stale_temporaries(target: Path) -> None:
    """Remove the temporary siblings (``.<name>.*.tmp``) that a killed writer of ``target`` left behind."""
    for stale in target.parent.glob(f".{target.name}.*.tmp"):
        if stale.is_dir():
            shutil.rmtree(stale, ignore_errors=True)
        else:
            stale.unlink(missing_ok=True)


@contextlib.contextmanager
def staged_children(folder: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary folder inside ``folder``; on success move each of its entries into ``folder``, replacing
    an entry of the same name, by one rename each.

    For a stage whose outputs are several entries of one folder (system folders, metrics files): killed at any
    moment, each output is absent (or the earlier one) or complete, never a half-written one a reader would take.

    Raises:
        StorageError: a resource fault while writing (as :func:`atomic_path`), naming the file it hit.
        Whatever else the block raises; nothing is moved then, and the temporary folder is removed.
    """
    parent = Path(folder)
    tmp: Path | None = None
    try:
        parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(parent / "staged")
        tmp = Path(tempfile.mkdtemp(prefix=".staged.", suffix=".tmp", dir=parent))
        yield tmp
        for entry in sorted(tmp.iterdir()):
            if entry.is_dir():
                os.chmod(entry, DIR_MODE)
                _swap_in(entry, parent / entry.name)
            else:
                os.replace(entry, parent / entry.name)
    except Exception as error:
        fault = _writing_fault(error, parent, tmp)
        if fault is None:
            raise
        raise fault from error
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


_STAGING_FOLDER = re.compile(r"\.staged\.[a-z0-9_]+\.tmp")  # staged_children's folder
_TEMPORARY_SIBLING = re.compile(r"\.(?P<name>.+)\.[a-z0-9_]+\.tmp")  # atomic_dir's and atomic_path's, of <name>


def final_path(path: str | os.PathLike[str]) -> Path:
    """The path that ``path``, written inside a :func:`staged_children` folder or as an :func:`atomic_dir` or
    :func:`atomic_path` temporary, has once its writer succeeds: what messages people read should name.
    ``data/models/.staged.k2j4.tmp/mmt-en-de/src.model`` -> ``data/models/mmt-en-de/src.model``."""
    parts: list[str] = []
    for part in Path(path).parts:
        if _STAGING_FOLDER.fullmatch(part):
            continue
        sibling = _TEMPORARY_SIBLING.fullmatch(part)
        parts.append(sibling.group("name") if sibling else part)
    return Path(*parts) if parts else Path(path)


def parse_json(text: str | bytes, where: str) -> Any:
    """JSON from ``text``, a byte-order mark skipped.

    Raises:
        InputError: invalid JSON or UTF-8, or nesting past Python's recursion limit; the message names ``where``.
    """
    if isinstance(text, bytes):
        try:
            text = text.removeprefix(b"\xef\xbb\xbf").decode("utf-8")
        except UnicodeDecodeError as error:
            raise InputError(f"{where}: not UTF-8 (byte {error.start}: {error.reason})") from None
    try:
        return json.loads(text.removeprefix("\ufeff"))
    except json.JSONDecodeError as error:
        if "\n" not in text.strip():  # one line (a JSON Lines record): ``where`` names the line already
            raise InputError(f"{where}: not valid JSON at column {error.colno} ({error.msg})") from None
        raise InputError(f"{where}:{error.lineno}:{error.colno}: not valid JSON ({error.msg})") from None
    except RecursionError:
        raise InputError(f"{where}: JSON nested too deeply") from None


def read_json(path: str | os.PathLike[str]) -> Any:
    """The JSON file at ``path`` (see :func:`parse_json`); a missing file is an :class:`InputError` too."""
    source = Path(path)
    try:
        data = source.read_bytes()
    except OSError as error:
        raise InputError(f"{source}: cannot read it ({error.strerror or error})") from None
    return parse_json(data, str(source))


def write_tsv(path: str | os.PathLike[str], rows: Sequence[Mapping[str, object]]) -> None:
    """Rows as tab-separated text with a header (the columns of the first row, in order), written atomically: the
    format ``dvc plots`` reads. Floats keep 6 significant digits; a missing value is an empty field.

    Raises:
        ValueError: no rows, or a row with columns the first one lacks.
    """
    if not rows:
        raise ValueError(f"{path}: no rows to write")
    columns = list(rows[0])
    lines = ["\t".join(columns)]
    for index, row in enumerate(rows):
        extra = set(row) - set(columns)
        if extra:
            raise ValueError(f"{path}: row {index} has columns {sorted(extra)} that the first row lacks")
        lines.append("\t".join(_tsv_cell(row.get(column)) for column in columns))
    write_text(path, "\n".join(lines) + "\n")


def _tsv_cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


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
        raise InputError(f"{shown(str(source))}: file not found")
    raw = source.read_bytes()
    if source.suffix == ".gz":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as error:
            raise InputError(f"{shown(str(source))}: not a valid gzip file ({error})") from None
    raw = raw.removeprefix(b"\xef\xbb\xbf")  # a UTF-8 byte-order mark is no part of the first line
    lines = raw.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    decoded: list[str] = []
    for number, line in enumerate(lines, start=1):
        try:
            text = line.decode("utf-8").removesuffix("\r")
        except UnicodeDecodeError as error:
            raise InputError(
                f"{shown(str(source))}:{number}: invalid UTF-8 at byte {error.start} of the line ({line[:60]!r})"
            ) from None
        if not allow_empty and not text.strip():
            raise InputError(f"{shown(str(source))}:{number}: empty line (every line must hold one sentence)")
        decoded.append(text)
    return decoded


def iter_lines(path: str | os.PathLike[str]) -> Iterator[str]:
    """The lines of a UTF-8 text file (plain or ``.gz``) one at a time, with the checks of :func:`read_lines`
    (no empty line), in memory flat in the file's size.

    Raises:
        InputError: as :func:`read_lines`; a damaged gzip stream is reported when the reading reaches it.
    """
    source = Path(path)
    if not source.is_file():
        raise InputError(f"{shown(str(source))}: file not found")
    opened = gzip.open(source, "rb") if source.suffix == ".gz" else open(source, "rb")  # noqa: SIM115
    with opened as stream:
        number = 0
        try:
            for line in stream:
                number += 1
                yield _decoded_line(source, number, line)
        except (OSError, EOFError) as error:  # gzip.BadGzipFile is an OSError; a cut stream an EOFError
            raise InputError(f"{shown(str(source))}: not a valid gzip file ({error})") from None


def _decoded_line(source: Path, number: int, line: bytes) -> str:
    if number == 1:
        line = line.removeprefix(b"\xef\xbb\xbf")  # a UTF-8 byte-order mark is no part of the first line
    line = line.removesuffix(b"\n")
    try:
        text = line.decode("utf-8").removesuffix("\r")
    except UnicodeDecodeError as error:
        raise InputError(
            f"{shown(str(source))}:{number}: invalid UTF-8 at byte {error.start} of the line ({line[:60]!r})"
        ) from None
    if not text.strip():
        raise InputError(f"{shown(str(source))}:{number}: empty line (every line must hold one sentence)")
    return text


def iter_parallel_lines(src_path: Path, tgt_path: Path) -> Iterator[tuple[str, str]]:
    """Aligned lines of two files, streamed (:func:`iter_lines`); a line-count mismatch, found where the shorter
    file ends, reads the longer one to its end to name both files and both counts as :func:`read_parallel_lines`."""
    src, tgt = iter_lines(src_path), iter_lines(tgt_path)
    count = 0
    while (src_line := next(src, None)) is not None:
        tgt_line = next(tgt, None)
        if tgt_line is None:
            src_count, tgt_count = count + 1 + sum(1 for _ in src), count
            break
        count += 1
        yield src_line, tgt_line
    else:
        src_count, tgt_count = count, count + sum(1 for _ in tgt)
    if src_count != tgt_count:
        raise InputError(
            f"parallel files differ in length: {src_path} has {src_count} lines, {tgt_path} has {tgt_count} lines"
        )


def read_parallel_lines(src_path: Path, tgt_path: Path) -> tuple[list[str], list[str]]:
    """Read two line-aligned files; a line-count mismatch names both files and both counts."""
    src, tgt = read_lines(src_path), read_lines(tgt_path)
    if len(src) != len(tgt):
        raise InputError(
            f"parallel files differ in length: {src_path} has {len(src)} lines, {tgt_path} has {len(tgt)} lines"
        )
    return src, tgt
