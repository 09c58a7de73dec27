"""The report's Markdown as HTML, and text made safe to put into that Markdown.

Rendering is CommonMark with pipe tables (markdown-it-py): inline code, emphasis, links, headings, paragraphs and
tables come out as their HTML elements, and raw HTML in the text is shown as text, never passed through.
"""

from __future__ import annotations

import re

from markdown_it import MarkdownIt

_RENDERER = MarkdownIt("commonmark", {"html": False}).enable("table")

# the characters CommonMark (and a pipe table's cell) could read as markup, and the backslash itself
_MARKUP = re.compile(r"([\\`*_\[\]<>|&#!])")


def markdown_html(markdown: str) -> str:
    """``markdown`` (CommonMark with pipe tables) as HTML; raw HTML in it is escaped."""
    return _RENDERER.render(markdown)


def literal(text: str) -> str:
    """``text`` as Markdown that renders as exactly that text, on one line (a caption in a table cell): markup
    characters backslash-escaped, line breaks as spaces."""
    return _MARKUP.sub(r"\\\1", " ".join(text.split()))
