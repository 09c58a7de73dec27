"""The report's sections for extra evaluation sets: one per set, a table per language it was scored in, its images,
protocol and absent languages; replicates with their spread; nothing when the runs have no such sets."""

from __future__ import annotations

from typing import Any

from report.html import results_html
from report.tables import ReportContext, eval_set_tables, results_markdown
from retrieval.results import combine_replicates

LABELS = {"none": "-", "mmt_f": "MMT(f)"}
CONTEXT = ReportContext(pivot="en", test_images={"en": 8, "de": 8})


def _metrics(r1: float) -> dict[str, Any]:
    recalls = {"r1": r1, "r5": 50.0, "r10": 60.0, "medr": 2.0, "meanr": 3.0}
    return {"i2t": dict(recalls), "t2i": dict(recalls), "rsum": 2 * (r1 + 110.0), "mr": (r1 + 110.0) / 3}


def _run(r1: float) -> dict[str, Any]:
    return {
        "en": _metrics(r1),
        "de": _metrics(r1 + 1),
        "eval_sets": {
            "test2018": {"en": _metrics(r1 + 2), "images": 1071, "protocol": "full", "absent": ["de"]},
            "mscoco2017": {"de": _metrics(r1 + 3), "en": _metrics(r1 + 4), "images": 461, "protocol": "full"},
        },
        "protocol": "full",
    }


def test_no_eval_sets_no_sections() -> None:
    results = {"san-none-all": {"en": _metrics(1.0), "protocol": "full"}}
    assert eval_set_tables(results) == []
    markdown = results_markdown(results, LABELS, CONTEXT)
    assert "Evaluation set" not in markdown and "###" not in markdown
    assert "Evaluation set" not in results_html(results, [], LABELS, context=CONTEXT)


def test_a_section_per_set_with_a_table_per_language() -> None:
    results = {"san-none-all": _run(1.0), "san-mmt_f-all": _run(5.0)}
    tables = eval_set_tables(results, "en")
    assert [table.name for table in tables] == ["test2018", "mscoco2017"]
    assert list(tables[1].languages) == ["en", "de"]  # the pivot first
    assert tables[0].summary == "1071 images, protocol full; no captions of de (not scored)."
    lines = results_markdown(results, LABELS, CONTEXT).splitlines()
    start = lines.index("## Evaluation set test2018")
    assert lines.index("## de") < start < lines.index("## Evaluation set mscoco2017")
    assert lines[start + 2] == "1071 images, protocol full; no captions of de (not scored)."
    assert lines[start + 4] == "### en"
    rows = [line for line in lines[start:] if line.startswith("| san |")]
    # test2018 en: r1 = 3.0 (none) and 7.0 (mmt_f), rsum 2 (r1 + 110); Δ rsum against the none run
    assert rows[0] == "| san | - | all | 3.0 | 50.0 | 60.0 | 3.0 | 50.0 | 60.0 | 226.0 | 37.7 | - |"
    assert rows[1] == "| san | MMT(f) | all | 7.0 | 50.0 | 60.0 | 7.0 | 50.0 | 60.0 | 234.0 | 39.0 | +8.0 |"
    assert "Chance (text->image, 461 images): R@1 0.2, R@5 1.1, R@10 2.2." in lines
    coco = lines.index("## Evaluation set mscoco2017")
    assert lines[coco + 2] == "461 images, protocol full."
    assert lines.index("### en", coco) < lines.index("### de", coco)


def test_replicates_show_the_spread_in_the_set_tables() -> None:
    combined = combine_replicates([_run(1.0), _run(3.0)], [0, 1])
    assert combined["eval_sets"]["test2018"]["absent"] == ["de"] and combined["eval_sets"]["test2018"]["images"] == 1071
    markdown = results_markdown({"san-none-all": combined}, LABELS, CONTEXT)
    section = markdown.split("## Evaluation set test2018", 1)[1]
    assert "| san | - | all | 4.0 ± 1.4 |" in section  # r1 3.0 and 5.0


def test_html_shows_the_set_sections() -> None:
    page = results_html({"san-none-all": _run(1.0)}, [], LABELS, context=CONTEXT)
    assert "<h2>Evaluation set test2018</h2><p>1071 images, protocol full; no captions of de (not scored).</p>" in page
    assert page.index("<h2>Evaluation set test2018</h2>") < page.index("<h2>Evaluation set mscoco2017</h2>")
    assert "<h3>de</h3><table>" in page.split("Evaluation set mscoco2017", 1)[1]
