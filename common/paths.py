"""Paths named by data files stay inside the folder they are relative to.

An image list, a split file or a dataset's state file names files relative to a declared root. A line such as
``../outside/evil.png``, an absolute path or a symbolic link that leads out of the root would make a stage read (and
record) a file the user never declared, so every such path goes through :func:`inside_root` before it is opened.
A symbolic link whose target stays inside the root is followed. Leaving the root is a setting the caller passes
(``outside_allowed``), named in the refusal so that the user knows how to allow it.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from common.errors import InputError


def relative_inside(relative: str, where: str, *, root: str, setting: str | None = None) -> PurePosixPath:
    """``relative`` as a path that cannot leave its root by its spelling alone: not absolute, no ``..`` that climbs
    above the root, no NUL. Symbolic links are not looked at (see :func:`inside_root`).

    Args:
        relative: The path as the data file gives it.
        where: The file and line (or entry) that named it, for the message.
        root: How the message names the root (a folder, or words such as "the image folder").
        setting: The params key that allows paths outside the root, named in the message; None: nothing allows it.

    Raises:
        InputError: one line naming ``where`` and the path (escaped).
    """
    if "\x00" in relative:
        raise InputError(f"{where}: path {relative!r} holds a NUL character")
    pure = PurePosixPath(relative)
    if pure.is_absolute():
        raise InputError(f"{where}: path {relative!r} is absolute; it must be relative to {root}{_hint(setting)}")
    depth = 0
    for part in pure.parts:
        depth += -1 if part == ".." else 1
        if depth < 0:
            raise InputError(f"{where}: path {relative!r} climbs out of {root} through '..'{_hint(setting)}")
    return pure


def inside_root(
    root: Path, relative: str, where: str, *, outside_allowed: bool = False, setting: str | None = None
) -> Path:
    """``root / relative``, refused unless it stays inside ``root`` once symbolic links are followed.

    Args:
        root: The declared folder the path is relative to.
        relative: The path as the data file gives it.
        where: The file and line (or entry) that named it, for the message.
        outside_allowed: The user's opt-in to paths that lead outside ``root`` (absolute, ``..``, links).
        setting: The params key of that opt-in, named in the message.

    Raises:
        InputError: an absolute path, a ``..`` that climbs out, a NUL, or a link (anywhere on the way) to a place
            outside ``root``; one line naming ``where``, the path (escaped) and the root.
    """
    if outside_allowed:
        if "\x00" in relative:
            raise InputError(f"{where}: path {relative!r} holds a NUL character")
        return root / relative
    relative_inside(relative, where, root=str(root), setting=setting)
    path = root / relative
    # not strict: a missing file (or a link loop) is the caller's "missing" to report, not a way out
    target = Path(os.path.realpath(path))
    real_root = Path(os.path.realpath(root))
    if not target.is_relative_to(real_root):
        raise InputError(
            f"{where}: path {relative!r} is a symbolic link (or passes through one) to {str(target)!r}, outside "
            f"{root}{_hint(setting)}"
        )
    return path


def _hint(setting: str | None) -> str:
    return f" (set {setting}: true to allow paths outside it)" if setting else ""
