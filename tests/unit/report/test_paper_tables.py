"""The paper's layout: Table 1's grid (one test language), Table 4's row of four directions (several), Table 5's
translate-search beside the multilingual model, their cells (mean ± std, seeds) and marks, line for line."""

from __future__ import annotations

from typing import Any

from report.paper_tables import method, paper_markdown
from report.significance import Significance
from report.tables import ReportContext
from retrieval.results import combine_replicates
from retrieval.significance import STATISTICS

LABELS = {"none": "-", "mt_f": "MT(f)", "mmt_f": "MMT(f)"}
RECALLS = "| text→image R@1 | text→image R@5 | text→image R@10 | image→text R@1 | image→text R@5 | image→text R@10 |"


def _metrics(r1: float) -> dict[str, Any]:
    recalls = {"r1": r1, "r5": 50.0, "r10": 60.0, "medr": 2.0, "meanr": 3.0}
    return {"i2t": dict(recalls), "t2i": dict(recalls), "rsum": 2 * (r1 + 110.0), "mr": (r1 + 110.0) / 3}


def _test(**p_values: float) -> dict[str, Any]:
    """A paired test's result whose statistics all have p 0.5 but those given."""
    stats = {name: {"delta": 1.0, "p_value": p_values.get(name, 0.5), "ci": 1.0} for name in STATISTICS}
    return {**stats, "samples": 1000, "seed": 12345}


def test_rows_are_named_as_the_paper_names_them() -> None:
    assert method("san", "-") == "SAN"
    assert method("dan", "MMT(f+b)") == "MMT(f+b) + DAN"


def test_one_test_language_gives_table_1s_grid_grouped_by_model_with_marks() -> None:
    results = {
        "san-none-pivot_test": {"en": _metrics(40.0)},
        "san-mmt_f-pivot_test": combine_replicates(
            [{"en": _metrics(42.0)}, {"en": _metrics(44.0)}, {"en": _metrics(46.0)}], [0, 1, 2]
        ),
        "dan-none-pivot_test": {"en": _metrics(41.0)},
        "san-mt_f-pivot_test": {"en": _metrics(41.0)},
    }
    tests = {"san-mmt_f-pivot_test/en": {"san-none-pivot_test/en": _test(rsum=0.001, t2i_r1=0.04)}}
    context = ReportContext(pivot="en", significance=Significance(tests, LABELS))
    lines = paper_markdown(results, LABELS, context)
    assert lines[:2] == ["## In the paper's layout", ""]
    table = lines[lines.index("### Table 1 layout: role pivot_test, en") + 2 :]
    assert table[:6] == [
        f"| method | seeds {RECALLS} rsum |",
        "|---|---|---|---|---|---|---|---|---|",
        "| SAN | 1 | 40.0 | 50.0 | 60.0 | 40.0 | 50.0 | 60.0 | 300.0 |",
        "| MT(f) + SAN | 1 | 41.0 | 50.0 | 60.0 | 41.0 | 50.0 | 60.0 | 302.0 |",
        "| MMT(f) + SAN | 3 | 44.0 ± 2.0† | 50.0 ± 0.0 | 60.0 ± 0.0 | 44.0 ± 2.0 | 50.0 ± 0.0 | 60.0 ± 0.0 | "
        "308.0 ± 4.0† |",
        "| DAN | 1 | 41.0 | 50.0 | 60.0 | 41.0 | 50.0 | 60.0 | 302.0 |",
    ]


def test_several_test_languages_give_table_4s_row_of_four_directions_the_pivot_last() -> None:
    results = {
        "san-mt_f-discard_human_targets": {"en": _metrics(30.0), "de": _metrics(20.0)},
        "san-mmt_f-discard_human_targets": {"en": _metrics(31.0), "de": _metrics(22.0)},
    }
    tests = {"san-mmt_f-discard_human_targets/de": {"san-mt_f-discard_human_targets/de": _test(i2t_r10=0.01)}}
    context = ReportContext(pivot="en", significance=Significance(tests, LABELS))
    lines = paper_markdown(results, LABELS, context)
    table = lines[lines.index("### Table 4 layout: role discard_human_targets") + 2 :]
    de, en = (
        f"{lang} text→image R@1 | {lang} text→image R@5 | {lang} text→image R@10 | {lang} image→text R@1 | "
        f"{lang} image→text R@5 | {lang} image→text R@10"
        for lang in ("de", "en")
    )
    assert table[:4] == [
        f"| method | seeds | {de} | {en} |",
        "|" + "---|" * 14,
        "| MT(f) + SAN | 1 | 20.0 | 50.0 | 60.0 | 20.0 | 50.0 | 60.0 | 30.0 | 50.0 | 60.0 | 30.0 | 50.0 | 60.0 |",
        "| MMT(f) + SAN | 1 | 22.0 | 50.0 | 60.0 | 22.0 | 50.0 | 60.0‡ | 31.0 | 50.0 | 60.0 | 31.0 | 50.0 | 60.0 |",
    ]
    assert "Table 1 layout" not in "\n".join(lines)


def test_translate_search_sits_above_the_model_trained_with_the_language() -> None:
    results = {
        "san-mmt_f-pivot_only": {"en": _metrics(30.0), "translate_search": {"de": _metrics(25.0)}},
        "san-mmt_f-discard_human_targets": {"en": _metrics(31.0), "de": _metrics(27.0)},
    }
    tests = {"san-mmt_f-discard_human_targets/de": {"san-mmt_f-pivot_only/translate_search.de": _test(rsum=0.02)}}
    context = ReportContext(pivot="en", significance=Significance(tests, LABELS))
    lines = paper_markdown(results, LABELS, context)
    heading = "### Table 5 layout: de queries, the model trained with them against translate-search"
    table = lines[lines.index(heading) + 2 :]
    recalls = RECALLS.replace("| text", "| de text").replace("| image", "| de image")
    assert table[:4] == [
        f"| method | seeds {recalls} rsum |",
        "|" + "---|" * 9,
        "| SAN (pivot_only, translate-search) | 1 | 25.0 | 50.0 | 60.0 | 25.0 | 50.0 | 60.0 | 270.0 |",
        "| MMT(f) + SAN (discard_human_targets) | 1 | 27.0 | 50.0 | 60.0 | 27.0 | 50.0 | 60.0 | 274.0§ |",
    ]
    assert "### Table 1 layout: role pivot_only, en" in lines  # the English-only model alone, too


def test_runs_that_fill_no_paper_table_give_no_section() -> None:
    assert paper_markdown({}, LABELS, ReportContext(pivot="en")) == []
