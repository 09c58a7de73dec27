"""The report page: the Markdown rendered (tables, inline code, bold), an rsum chart per table, further sections, the
header, chance lines and the examples beside their images."""

from __future__ import annotations

from pathlib import Path

from report.html import results_html
from report.samples import differing_examples
from report.tables import ReportContext, diversity_markdown, translation_markdown
from tests.unit.report.test_samples import _write
from tests.unit.report.test_tables import DIVERSITY, LABELS, ROUND_TRIPS, TRANSLATION, _metrics


def test_fold_means_and_translate_search_get_their_own_tables_and_charts() -> None:
    results = {
        "san-mmt_f-all": {"en": _metrics(1.0), "en-folds": _metrics(2.0), "translate_search": {"de": _metrics(3.0)}}
    }
    page = results_html(results, [], LABELS)
    assert "<h2>en, mean over test folds</h2>" in page and page.count("<svg") == 3  # en, en-folds, translate-search
    table5 = page[page.index("<h2>translate-search: de queries translated to the pivot (Table 5)</h2>") :]
    assert "<td>3.0</td>" in table5.split("</table>")[0]  # its own R@1, not the direct search's 1.0 or 2.0
    assert 'aria-label="rsum per run, de queries translated to the pivot"' in table5


def test_the_chart_shows_the_variant_labels_in_the_order_of_the_rows() -> None:
    """The bars in the order of the table's rows: labelled variants in the order of the labels (presets, then custom
    ones), a run of another variant by its name after them."""
    recall = {"t2i": {"r1": 1.0, "r5": 2.0, "r10": 3.0}, "i2t": {"r1": 4.0, "r5": 5.0, "r10": 6.0}, "rsum": 21.0}
    runs = ["san-stale-all", "san-paraphrases-all", "san-mmt_fbf-all", "san-none-all"]
    results = {name: {"en": recall} for name in runs}
    labels = {"none": "-", "mmt_fbf": "MMT(f+b+f)", "paraphrases": "MMT(f+b+f; hop 2)"}
    chart = results_html(results, [], labels).split("<svg", 1)[1]  # the bars are labelled model, variant, role
    assert chart.index(">san - all<") < chart.index(">san MMT(f+b+f) all<") < chart.index(">san MMT(f+b+f; hop 2) all<")
    assert chart.index(">san MMT(f+b+f; hop 2) all<") < chart.index(">san stale all<")


def test_diversity_sections_become_html_tables() -> None:
    lines = diversity_markdown(DIVERSITY, ROUND_TRIPS, LABELS)
    page = results_html({"san-none-all": {"en": _metrics(1.0)}}, [], LABELS, lines)
    assert "<h2>Caption diversity (train split)</h2>" in page and "<td>12.5</td>" in page


def test_translation_sections_become_html_tables() -> None:
    lines = translation_markdown(TRANSLATION)
    page = results_html({"san-none-all": {"en": _metrics(1.0)}}, [], LABELS, lines)
    assert "<h2>Translation (test captions)</h2>" in page and "<th>contrastive (%)</th>" in page


def test_the_page_puts_the_pivot_first_with_header_and_charted_axes() -> None:
    results = {"san-none-all": {"de": _metrics(1.0), "en": _metrics(2.0), "en-folds": _metrics(3.0)}}
    context = ReportContext(
        pivot="en", test_images={"en": 100, "de": 100, "en-folds": 1000}, header=("Commit abc123 (2026-11-25); seed 0",)
    )
    page = results_html(results, [], LABELS, (), context)
    assert page.index("<h2>en</h2>") < page.index("<h2>de</h2>") and "rsum (of 600)</text>" in page
    assert 'aria-label="rsum per run, en"' in page and ">600</text>" in page and "<p>Commit abc123" in page


def test_examples_show_image_source_both_translations_and_the_human_caption_escaped(tmp_path: Path) -> None:
    synthesized, prepared, images = _write(tmp_path)
    page = results_html({}, differing_examples(synthesized, prepared, images, count=2), {})
    assert "<h2>Examples: where the MT and the MMT translate differently</h2>" in page
    section = page[page.index("<h3>en→de</h3>") : page.index("<h3>en→fr</h3>")]
    assert section.count('<div class="sample">') == 2 and section.index('alt="d"') < section.index('alt="a"')
    section = section[section.rindex('<div class="sample">') :]  # image a's, after image d's (a translation caption)
    assert section.index("data:image/png;base64,") < section.index("<th>en (human, translated)</th><td>a red ring</td>")
    assert (
        "<tr><th>MT (text-only)</th><td>ein rotes Rund</td></tr><tr><th>MMT (with the image)</th><td>ein roter Ring"
        in section
    )
    assert "<th>de (human, same image)</th><td>ein roter Ring &lt;b&gt;&amp;&lt;/b&gt;</td>" in section
    assert "<b>&</b>" not in page


def test_markdown_prints_as_html_not_as_literal_markup() -> None:
    """The legend's inline code, the headline's bold and the tables come out as elements; no backtick or ``**``
    is left on the page."""
    page = results_html(
        {"san-none-all": {"en": _metrics(1.0)}},
        [],
        LABELS,
        ["## Translation", "", "| a | b |", "|---|---|", "| `x` | <i>y</i> |", ""],
        headline="**Findings.** MMT(f) beats no augmentation (`-`, 1.0).",
    )
    assert page.index("<h1>Retrieval results</h1>") < page.index("<p><strong>Findings.</strong> MMT(f) beats no ")
    assert "no augmentation (<code>-</code>, 1.0).</p>" in page
    assert "<p>Variants: <code>-</code> the human captions alone;" in page
    assert "<td><code>x</code></td>\n<td>&lt;i&gt;y&lt;/i&gt;</td>" in page
    assert "`" not in page and "**" not in page


def test_the_page_shows_the_papers_layout_before_the_tables_per_language() -> None:
    results = {"san-none-pivot_test": {"en": _metrics(1.0)}, "san-mmt_f-pivot_test": {"en": _metrics(2.0)}}
    page = results_html(results, [], LABELS, (), ReportContext(pivot="en"))
    assert page.index("<h2>In the paper's layout</h2>") < page.index("<h2>en</h2>")
    assert "<h3>Table 1 layout: role pivot_test, en</h3>" in page and "<td>MMT(f) + SAN</td>" in page
