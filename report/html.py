"""The report as one self-contained HTML page: the tables of :mod:`report.tables`, an rsum bar chart under each
(inline SVG), further Markdown sections, and for a few train images a human caption with what the text-only MT and
the MMT synthesized from it, side by side (:mod:`report.samples`).
"""

from __future__ import annotations

import base64
import html
from collections.abc import Mapping, Sequence
from typing import Any

from report.samples import SAMPLED_ORIGINS, Sample
from report.tables import (
    LEGEND,
    ReportContext,
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
    samples: Sequence[Sample],
    variant_labels: Mapping[str, str],
    extra_sections: Sequence[str] = (),
    context: ReportContext = ReportContext(),
) -> str:
    """A self-contained page: the header and legend, the tables (the pivot's first) with their chance levels and an
    rsum bar chart each, the translate-search tables (Table 5) with theirs, a section per extra evaluation set (a
    table per language), ``extra_sections`` (Markdown lines of ``## `` headings and tables, e.g.
    :func:`~report.tables.diversity_markdown`) and synthesized-caption samples."""
    body = [
        "<h1>Retrieval results</h1>",
        *(f"<p>{html.escape(line)}</p>" for line in context.header),
        f"<p>{html.escape(LEGEND)}</p>",
    ]
    for lang in languages_of(results, context.pivot):
        rows = language_rows(results, lang)
        body += [f"<h2>{html.escape(language_heading(lang))}</h2>", _html_table(rows, variant_labels)]
        if lang in context.test_images:
            body.append(f"<p>{html.escape(chance_line(context.test_images[lang]))}</p>")
        body.append(rsum_chart(rows, variant_labels, title=f"rsum per run, {language_heading(lang)}"))
    for lang, rows in translate_search_rows(results).items():
        title = f"rsum per run, {lang} queries translated to the pivot"
        body += [
            f"<h2>{html.escape(search_heading(lang))}</h2>",
            _html_table(rows, variant_labels),
            rsum_chart(rows, variant_labels, title=title),
        ]
    for eval_set in eval_set_tables(results, context.pivot):
        body += [f"<h2>{html.escape(eval_set_heading(eval_set.name))}</h2>", f"<p>{html.escape(eval_set.summary)}</p>"]
        for lang, rows in eval_set.languages.items():
            body += [f"<h3>{html.escape(language_heading(lang))}</h3>", _html_table(rows, variant_labels)]
            if not lang.endswith("-folds"):
                body.append(f"<p>{html.escape(chance_line(eval_set.images))}</p>")
    body += _markdown_html(extra_sections)
    if samples:
        body.append("<h2>Synthesized captions</h2>")
        body += [_sample_html(sample) for sample in samples]
    style = (
        "body{font-family:sans-serif;max-width:70em;margin:2em auto}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:.2em .5em;text-align:right}.sample{display:flex;gap:1em;margin:1em 0}"
        ".sample img{width:160px;height:160px}.sample td{text-align:left;vertical-align:top}"
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>Retrieval results</title><style>{style}</style>"
        f"</head><body>{''.join(body)}</body></html>\n"
    )


def _markdown_html(lines: Sequence[str]) -> list[str]:
    """``## `` headings and pipe tables (header, rule, rows) as HTML."""
    parts: list[str] = []
    table: list[str] = []
    for line in [*lines, ""]:
        if line.startswith("|"):
            table.append(line)
            continue
        if table:
            parts.append(_table_html(table))
            table = []
        if line.startswith("## "):
            parts.append(f"<h2>{html.escape(line[3:])}</h2>")
    return parts


def _html_table(rows: Mapping[str, Mapping[str, Any]], variant_labels: Mapping[str, str]) -> str:
    return _table_html(run_table(rows, variant_labels))


def _table_html(lines: Sequence[str]) -> str:
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    out = ["<table><tr>" + "".join(f"<th>{html.escape(cell)}</th>" for cell in header) + "</tr>"]
    for line in lines[2:]:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        out.append("<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in cells) + "</tr>")
    return "".join(out) + "</table>"


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


def _sample_html(sample: Sample) -> str:
    """The image, its human caption, then one column per system with its captions hop after hop."""
    image = base64.b64encode(sample.png).decode()
    label, text = sample.human
    heads = "".join(f"<th>{html.escape(SAMPLED_ORIGINS[origin])}</th>" for origin, _ in sample.chains)
    cells = "".join(
        "<td><ul>"
        + "".join(f"<li><b>{html.escape(hop)}</b>: {html.escape(words)}</li>" for hop, words in chain)
        + "</ul></td>"
        for _, chain in sample.chains
    )
    return (
        f'<div class="sample"><img src="data:image/png;base64,{image}" alt="{html.escape(sample.image_id)}">'
        f"<div><p><b>{html.escape(label)}</b>: {html.escape(text)}</p>"
        f"<table><tr>{heads}</tr><tr>{cells}</tr></table></div></div>"
    )
