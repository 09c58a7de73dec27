"""The errors a user can mend: bad input data or a bad file, named with where it is and what was expected; and a
file the machine refused (disk full, read-only, no permission), named with its path and errno."""

from __future__ import annotations

import errno
import os
import re


class InputError(ValueError):
    """Bad input data: the message names the file (and line or row) and what was expected."""


class StorageError(OSError):
    """The machine refused a file (disk full, a read-only or non-writable folder, a missing permission): the
    message names the path the user knows (never a temporary) and the errno, so the fault can be mended and the
    stage rerun. An OSError, so code that handles those still does."""

    def __init__(self, action: str, path: object, number: int, strerror: str) -> None:
        super().__init__(number, strerror, str(path))
        self.action = action

    def __str__(self) -> str:
        return f"cannot {self.action} {self.filename}: [Errno {self.errno}] {self.strerror}"


# What the machine refuses, not the data: a full disk or quota, a file too large, a read-only file system, a folder
# or file the user may not write or read, a failing device. Each is mended outside the project, then the run redone.
RESOURCE_ERRNOS = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO}
)
# How writer libraries word an OS error they wrap: safetensors ("I/O error: No space left on device (os error 28)
# at path ...", older ones "IoError(Os { code: 28, ..."), Arrow ("... Detail: [errno 28] No space left on device")
_WRAPPED_ERRNO = re.compile(r"\(os error (\d+)\)|Os \{ code: (\d+)|\[errno (\d+)\]", re.IGNORECASE)
_WRAPPED_PATH = re.compile(r'at path "(.+)"')  # the file safetensors names


def os_errno(error: BaseException) -> int | None:
    """The errno behind ``error``: an OSError's own, or the one a writer library (safetensors, Arrow) words in its
    message; None for an error that does not come from the operating system."""
    if isinstance(error, OSError) and error.errno is not None:
        return error.errno
    if not isinstance(error, OSError) and type(error).__name__ != "SafetensorError":
        return None
    found = _WRAPPED_ERRNO.search(str(error))
    return int(next(group for group in found.groups() if group)) if found else None


def resource_fault(error: BaseException) -> StorageError | None:
    """``error`` as a one-line :class:`StorageError` when it is a resource fault (:data:`RESOURCE_ERRNOS`) that no
    writer named yet: an OSError keeps its file (``cannot access <file>``); else None."""
    if isinstance(error, StorageError):
        return error
    number = os_errno(error)
    if number not in RESOURCE_ERRNOS:
        return None
    filename = getattr(error, "filename", None) if isinstance(error, OSError) else None
    named = _WRAPPED_PATH.search(str(error))
    where = os.fsdecode(filename) if filename is not None else named.group(1) if named else "a file"
    return StorageError("access", where, number, os.strerror(number))
