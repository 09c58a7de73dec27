"""Generated sections of the docs: text between two marker lines, rewritten by the command that owns it.

A bench or a results command writes its table into a page between ``<!-- <name>:start -->`` and
``<!-- <name>:end -->``, so the figures in the docs always come from the file the command read, never from typing.
"""

from __future__ import annotations

from pathlib import Path

from common.files import write_text


def markers(name: str) -> tuple[str, str]:
    """The start and end lines of the section ``name``."""
    return f"<!-- {name}:start -->", f"<!-- {name}:end -->"


def replace_section(document: Path, name: str, text: str) -> None:
    """Put ``text`` between the markers of section ``name`` in ``document`` (atomically), in place of what was there.

    Raises:
        SystemExit: ``document`` lacks either marker line, or has them in the wrong order; the message names both.
    """
    start_line, end_line = markers(name)
    content = document.read_text(encoding="utf-8")
    start, end = content.find(start_line), content.find(end_line)
    if start < 0 or end < start:
        raise SystemExit(f"{document}: needs the lines {start_line} and {end_line}, in that order")
    write_text(document, content[: start + len(start_line)] + "\n\n" + text + "\n" + content[end:])
