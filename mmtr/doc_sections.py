"""Generated sections of the docs: text between two marker lines, rewritten by the command that owns it.

A bench or a results command writes its table into a page between ``<!-- <name>:start -->`` and
``<!-- <name>:end -->``, so the figures in the docs always come from the file the command read, never from typing.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common.files import read_json, write_text


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


def add_section_arguments(parser: argparse.ArgumentParser) -> None:
    """``--markdown JSON`` and ``--into MD``: a bench's way to put a finished run's figures into the docs."""
    parser.add_argument(
        "--markdown", type=Path, metavar="JSON", help="print the docs section of a finished run and exit"
    )
    parser.add_argument("--into", type=Path, metavar="MD", help="with --markdown: write it into that page's section")


def publish_section(args: argparse.Namespace, name: str, render: Callable[[Any], str]) -> bool:
    """With ``--markdown``: the section ``render`` makes of that JSON record, written into the page ``--into`` names
    (section ``name``) or printed; False when there is no ``--markdown`` (the bench runs instead).

    Raises:
        SystemExit: ``--into`` without ``--markdown``.
    """
    if args.into and not args.markdown:
        raise SystemExit("--into goes with --markdown")
    if not args.markdown:
        return False
    text = render(read_json(args.markdown))
    if args.into:
        replace_section(args.into, name, text)
    else:
        print(text, end="")
    return True
