"""The report's Markdown as HTML: the constructs the report uses become elements, raw HTML stays text, and a caption
escaped with :func:`literal` prints exactly as written."""

from __future__ import annotations

import html

import pytest

from report.markdown import literal, markdown_html


def test_inline_code_bold_links_and_headings_become_elements() -> None:
    assert markdown_html("**Findings.** `-` wins; see [retrieval](retrieval.md).") == (
        '<p><strong>Findings.</strong> <code>-</code> wins; see <a href="retrieval.md">retrieval</a>.</p>\n'
    )
    assert markdown_html("## Translation (test captions)") == "<h2>Translation (test captions)</h2>\n"


def test_pipe_tables_become_html_tables() -> None:
    assert markdown_html("| a | b |\n|---|---|\n| 1.0 | `x` |") == (
        "<table>\n<thead>\n<tr>\n<th>a</th>\n<th>b</th>\n</tr>\n</thead>\n<tbody>\n<tr>\n<td>1.0</td>\n"
        "<td><code>x</code></td>\n</tr>\n</tbody>\n</table>\n"
    )


def test_raw_html_and_unsafe_links_are_not_passed_through() -> None:
    assert markdown_html("<script>alert(1)</script> & <b>") == (
        "<p>&lt;script&gt;alert(1)&lt;/script&gt; &amp; &lt;b&gt;</p>\n"
    )
    assert "href" not in markdown_html("[click](javascript:alert(1))")


@pytest.mark.parametrize(
    "caption",
    [
        "a red | circle",
        "ein *roter* Kreis",
        "un `cercle` _rouge_",
        "<b>bold</b> & [link](x)",
        r"a back\slash # hash !",
    ],
)
def test_an_escaped_caption_prints_as_written_even_in_a_table_cell(caption: str) -> None:
    assert markdown_html(literal(caption)) == f"<p>{html.escape(caption, quote=False)}</p>\n"
    cell = markdown_html(f"| caption |\n|---|\n| {literal(caption)} |")
    assert f"<td>{html.escape(caption, quote=False)}</td>" in cell


def test_literal_puts_a_caption_on_one_line() -> None:
    assert literal("two\nlines \t here ") == "two lines here"
