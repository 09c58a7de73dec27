"""WMT ``.sgm`` test sets: segments in document order, and their alignment across the two sides.

The files are SGML, not well-formed XML (a bare ``&`` is common), so they are scanned with regular
expressions instead of an XML parser::

    <refset ...><doc docid="1012-bbc" ...>
    <seg id="1">Text with &amp; escapes</seg>
    </doc></refset>

The two sides of a test set are matched by (document id, segment id) in document order, so a segment
missing on one side is an error rather than a silent shift of every later pair.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from common.errors import InputError
from common.files import read_lines

_TAG = re.compile(r"<doc\b(?P<doc>[^>]*)>|<seg\b(?P<seg>[^>]*)>(?P<text>.*?)</seg\s*>", re.DOTALL | re.IGNORECASE)
_SEG_OPEN = re.compile(r"<seg\b", re.IGNORECASE)
_ENTITY = re.compile(r"&(amp|lt|gt|quot|apos|#[0-9]+|#[xX][0-9a-fA-F]+);")
_NAMED = {"amp": "&", "lt": "<", "gt": ">", "quot": '"', "apos": "'"}


@dataclass(frozen=True)
class Segment:
    """One ``<seg>``: its document id, segment id, unescaped text and the line it starts on."""

    doc: str
    seg: str
    text: str
    line: int


def unescape(text: str) -> str:
    """Replace the XML entities (``&amp; &lt; &gt; &quot; &apos;`` and numeric references) in one pass.

    One pass matters: ``&amp;lt;`` must become ``&lt;``, not ``<``.
    """
    return _ENTITY.sub(_replace_entity, text)


def _replace_entity(match: re.Match[str]) -> str:
    name = match.group(1)
    if name in _NAMED:
        return _NAMED[name]
    try:
        return chr(int(name[2:], 16) if name[1] in "xX" else int(name[1:]))
    except (ValueError, OverflowError):  # not a valid code point: leave the text as written
        return match.group(0)


def _attribute(attributes: str, name: str) -> str | None:
    found = re.search(rf"""\b{name}\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s>]+))""", attributes, re.IGNORECASE)
    if found is None:
        return None
    return next(group for group in found.groups() if group is not None)


def read_segments(path: Path) -> list[Segment]:
    """The segments of one ``.sgm`` file in document order.

    Raises:
        InputError: invalid UTF-8, no segments, a segment without an id, an empty or unterminated segment.
    """
    text = "\n".join(read_lines(path, allow_empty=True))  # strict UTF-8 with file:line errors
    segments: list[Segment] = []
    doc, line, scanned = "", 1, 0
    for match in _TAG.finditer(text):
        line += text.count("\n", scanned, match.start())
        scanned = match.start()
        if match.group("doc") is not None:
            doc = _attribute(match.group("doc"), "docid") or ""
            continue
        segments.append(_segment(path, doc, match, line))
    if not segments:
        raise InputError(f"{path}: no <seg> elements found (expected a WMT .sgm file)")
    if len(_SEG_OPEN.findall(text)) != len(segments):
        raise InputError(f"{path}: {len(_SEG_OPEN.findall(text))} <seg> tags but {len(segments)} closed segments")
    return segments


def _segment(path: Path, doc: str, match: re.Match[str], line: int) -> Segment:
    seg = _attribute(match.group("seg"), "id")
    if seg is None:
        raise InputError(f"{path}:{line}: <seg> without an id attribute")
    raw = match.group("text")
    if _SEG_OPEN.search(raw):
        raise InputError(f"{path}:{line}: <seg id={seg!r}> is not closed before the next <seg>")
    text = unescape(raw).strip()
    if not text:
        raise InputError(f"{path}:{line}: <seg id={seg!r}> is empty")
    return Segment(doc=doc, seg=seg, text=text, line=line)


def read_sgm_pair(src_path: Path, tgt_path: Path) -> tuple[list[str], list[str]]:
    """The aligned texts of two ``.sgm`` sides; raises naming the first unmatched (document, segment)."""
    src, tgt = read_segments(src_path), read_segments(tgt_path)
    for a, b in zip(src, tgt, strict=False):
        if (a.doc, a.seg) != (b.doc, b.seg):
            raise InputError(
                f"segments differ: {src_path}:{a.line} has doc {a.doc!r} seg {a.seg!r}, "
                f"{tgt_path}:{b.line} has doc {b.doc!r} seg {b.seg!r}"
            )
    if len(src) != len(tgt):
        if len(src) > len(tgt):
            longer, shorter, extra = src_path, tgt_path, src[len(tgt)]
        else:
            longer, shorter, extra = tgt_path, src_path, tgt[len(src)]
        raise InputError(
            f"{shorter} is missing doc {extra.doc!r} seg {extra.seg!r} (present at {longer}:{extra.line}); "
            f"{src_path} has {len(src)} segments, {tgt_path} has {len(tgt)}"
        )
    return [segment.text for segment in src], [segment.text for segment in tgt]
