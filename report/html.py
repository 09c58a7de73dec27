"""The report as one self-contained HTML page: the headline, the tables of :mod:`report.tables` with an rsum bar chart
under each (inline SVG), further Markdown sections, and the examples of :mod:`report.samples` beside their images.
The Markdown is rendered by :mod:`report.markdown`; every text put into HTML here is escaped.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Mapping, Sequence
from typing import Any

from report.markdown import markdown_html
from report.paper_tables import paper_markdown
from report.samples import EXAMPLES_HEADING, EXAMPLES_NOTE, Example
from report.tables import (
    Marks,
    ReportContext,
    arrow,
    chance_line,
    eval_set_heading,
    eval_set_tables,
    language_heading,
    language_rows,
    languages_of,
    run_order,
    run_table,
    search_heading,
    split_run,
    translate_search_rows,
)


def results_html(
    results: Mapping[str, Mapping[str, Any]],
    examples: Sequence[Example],
    variant_labels: Mapping[str, str],
    extra_sections: Sequence[str] = (),
    context: ReportContext = ReportContext(),
    headline: str = "",
) -> str:
    """A self-contained page: the title, ``headline``, the header and legends, the tables in the paper's layout
    (:mod:`report.paper_tables`), the tables per language (the pivot's first) with
    their chance levels and an rsum bar chart each, the translate-search tables (Table 5) with theirs, a section per
    extra evaluation set (a table per language), ``extra_sections`` (Markdown, e.g.
    :func:`~report.tables.diversity_markdown`) and the examples beside their images. Every piece of Markdown is
    rendered by :func:`~report.markdown.markdown_html`."""
    body = [
        "<h1>Retrieval results</h1>",
        *([markdown_html(headline)] if headline else []),
        *(markdown_html(line) for line in context.header),
        *(markdown_html(line) for line in context.legends() if line),
    ]
    paper = paper_markdown(results, variant_labels, context)
    if paper:
        body.append(markdown_html("\n".join(paper)))
    for lang in languages_of(results, context.pivot):
        rows = language_rows(results, lang)
        body += [
            f"<h2>{html.escape(language_heading(lang))}</h2>",
            _html_table(rows, variant_labels, context.marker(lang)),
        ]
        if lang in context.test_images:
            body.append(markdown_html(chance_line(context.test_images[lang])))
        body.append(rsum_chart(rows, variant_labels, title=f"rsum per run, {language_heading(lang)}"))
    for lang, rows in translate_search_rows(results).items():
        title = f"rsum per run, {lang} queries translated to the pivot"
        body += [
            f"<h2>{html.escape(search_heading(lang))}</h2>",
            _html_table(rows, variant_labels),
            rsum_chart(rows, variant_labels, title=title),
        ]
    for eval_set in eval_set_tables(results, context.pivot):
        body += [f"<h2>{html.escape(eval_set_heading(eval_set.name))}</h2>", markdown_html(eval_set.summary)]
        for lang, rows in eval_set.languages.items():
            body += [f"<h3>{html.escape(language_heading(lang))}</h3>", _html_table(rows, variant_labels)]
            if not lang.endswith("-folds"):
                body.append(markdown_html(chance_line(eval_set.images)))
    if extra_sections:
        body.append(markdown_html("\n".join(extra_sections)))
    body += examples_html(examples)
    style = (
        "body{font-family:sans-serif;max-width:70em;margin:2em auto}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:.2em .5em;text-align:right}.sample{display:flex;gap:1em;margin:1em 0}"
        ".sample img{width:160px;height:160px}.sample td,.sample th{text-align:left;vertical-align:top}"
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>Retrieval results</title><style>{style}</style>"
        f"</head><body>{''.join(body)}</body></html>\n"
    )


def _html_table(
    rows: Mapping[str, Mapping[str, Any]], variant_labels: Mapping[str, str], marks: Marks | None = None
) -> str:
    return markdown_html("\n".join(run_table(rows, variant_labels, marks)))


def rsum_chart(rows: Mapping[str, Mapping[str, Any]], variant_labels: Mapping[str, str], *, title: str) -> str:
    """Horizontal bars of rsum on a 0-600 axis, one per run in the table's order, as inline SVG with a title and
    an axis."""
    names = sorted(rows, key=run_order(variant_labels))
    top, left, scale = 24, 230, 0.5  # 600 rsum -> 300 px
    height = top + 22 * len(names) + 34
    parts = [f'<text x="{left}" y="14" font-size="13" font-weight="bold">{html.escape(title)}</text>']
    for index, name in enumerate(names):
        model, variant, role = split_run(name)
        rsum = float(rows[name]["rsum"])
        y = top + 22 * index
        label = f"{model} {variant_labels.get(variant, variant)} {role}"
        end = left + rsum * scale
        parts.append(
            f'<text x="0" y="{y + 13}" font-size="12">{html.escape(label)}</text>'
            f'<rect x="{left}" y="{y}" width="{rsum * scale:.1f}" height="16" fill="#4a7ab8"/>'
            f'<text x="{end + 5:.1f}" y="{y + 13}" font-size="11">{rsum:.1f}</text>'
        )
    axis = top + 22 * len(names) + 4
    parts.append(f'<line x1="{left}" y1="{axis}" x2="{left + 600 * scale}" y2="{axis}" stroke="#333"/>')
    for tick in range(0, 601, 100):
        x = left + tick * scale
        parts.append(
            f'<line x1="{x}" y1="{axis}" x2="{x}" y2="{axis + 4}" stroke="#333"/>'
            f'<text x="{x}" y="{axis + 16}" font-size="10" text-anchor="middle">{tick}</text>'
        )
    parts.append(
        f'<text x="{left + 300 * scale}" y="{axis + 29}" font-size="11" text-anchor="middle">rsum (of 600)</text>'
    )
    return (
        f'<svg width="{left + 360}" height="{height}" role="img" aria-label="{html.escape(title)}">'
        f"{''.join(parts)}</svg>"
    )


def examples_html(examples: Sequence[Example]) -> list[str]:
    """The examples section (the heading and note of :func:`~report.samples.examples_markdown`), a heading per direction
    and per example its image beside the source caption, both translations and the human target caption."""
    if not examples:
        return []
    parts = [f"<h2>{html.escape(EXAMPLES_HEADING)}</h2>", markdown_html(EXAMPLES_NOTE)]
    direction = ""
    for example in examples:
        if f"{example.source_lang}-{example.target_lang}" != direction:
            direction = f"{example.source_lang}-{example.target_lang}"
            parts.append(f"<h3>{html.escape(arrow(direction))}</h3>")
        parts.append(_example_html(example))
    return parts


def _example_html(example: Example) -> str:
    image = base64.b64encode(example.png).decode()
    rows = (
        (f"{example.source_lang} (human, translated)", example.source),
        ("MT (text-only)", example.mt),
        ("MMT (with the image)", example.mmt),
        (f"{example.target_lang} (human, same image)", example.human or "-"),
    )
    cells = "".join(f"<tr><th>{html.escape(head)}</th><td>{html.escape(text)}</td></tr>" for head, text in rows)
    return (
        f'<div class="sample"><img src="data:image/png;base64,{image}" alt="{html.escape(example.image_id)}">'
        f"<table>{cells}</table></div>"
    )
