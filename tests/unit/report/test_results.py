"""The results tables: run names, row order, the role column, fold headings and translate-search."""

from __future__ import annotations

from typing import Any

import pytest

from report.results import diversity_markdown, results_html, results_markdown, split_run, translation_markdown

LABELS = {"none": "-", "mt_f": "MT(f)", "mmt_f": "MMT(f)"}


def _metrics(r1: float) -> dict[str, Any]:
    recalls = {"r1": r1, "r5": 50.0, "r10": 60.0, "medr": 2.0, "meanr": 3.0}
    return {"i2t": dict(recalls), "t2i": dict(recalls), "rsum": 2 * (r1 + 110.0), "mr": (r1 + 110.0) / 3}


def test_split_run_names_model_variant_and_role() -> None:
    assert split_run("parallel_embn-mmt_fb-discard_human_targets") == (
        "parallel_embn",
        "mmt_fb",
        "discard_human_targets",
    )
    with pytest.raises(ValueError, match=r"^'san-mmt_f' is not a run name <model>-<variant>-<role>$"):
        split_run("san-mmt_f")


def test_markdown_rows_are_ordered_by_model_variant_and_role() -> None:
    results = {
        "vsepp-none-all": {"en": _metrics(1.0)},
        "san-mmt_f-all": {"en": _metrics(2.0)},
        "san-none-pivot_only": {"en": _metrics(3.0)},
        "san-none-all": {"en": _metrics(4.0), "de": _metrics(5.0)},
    }
    lines = results_markdown(results, LABELS).splitlines()
    rows = [line for line in lines if line.startswith("| san") or line.startswith("| vsepp")]
    assert [row.split(" | ")[:3] for row in rows[:4]] == [
        ["| san", "-", "all"],
        ["| san", "-", "pivot_only"],
        ["| san", "MMT(f)", "all"],
        ["| vsepp", "-", "all"],
    ]
    assert rows[0] == "| san | - | all | 4.0 | 50.0 | 60.0 | 4.0 | 50.0 | 60.0 | 228.0 | 38.0 | - |"
    assert (
        rows[2] == "| san | MMT(f) | all | 2.0 | 50.0 | 60.0 | 2.0 | 50.0 | 60.0 | 224.0 | 37.3 | -4.0 |"
    )  # vs san - all
    assert lines.index("## en") < lines.index("## de")
    header = (
        "| model | variant | role | t2i R@1 | t2i R@5 | t2i R@10 | i2t R@1 | i2t R@5 | i2t R@10 | rsum | mR | Δ rsum |"
    )
    assert header in lines


def test_fold_means_and_translate_search_get_their_own_tables() -> None:
    results = {
        "san-mmt_f-all": {"en": _metrics(1.0), "en-folds": _metrics(2.0), "translate_search": {"de": _metrics(3.0)}}
    }
    markdown = results_markdown(results, LABELS)
    assert "## en, mean over test folds" in markdown
    assert "## translate-search: de queries translated to the pivot (Table 5)" in markdown
    assert "| san | MMT(f) | all | 3.0 |" in markdown
    page = results_html(results, [], LABELS)
    assert "<h2>en, mean over test folds</h2>" in page and page.count("<svg") == 3  # en, en-folds, translate-search
    table5 = page[page.index("<h2>translate-search: de queries translated to the pivot (Table 5)</h2>") :]
    assert "<td>3.0</td>" in table5.split("</table>")[0]  # its own R@1, not the direct search's 1.0 or 2.0
    assert 'aria-label="rsum per run, de queries translated to the pivot"' in table5


def test_diversity_tables_follow_the_variant_order_and_show_percent_changed() -> None:
    diversity = {
        "mmt_f": {"token_types": {"en": 10, "de": 12}, "bigrams": {"en": 20, "de": 25}},
        "none": {"token_types": {"en": 10}, "bigrams": {"en": 18}},
    }
    round_trips = {
        "de": {
            "mt": {"hop2": {"captions": 40, "changed": 0.125}},  # metrics from before types were recorded
            "mmt": {"hop2": {"captions": 40, "changed": 0.5, "token_types": 30, "new_types": 2}},
        }
    }
    lines = diversity_markdown(diversity, round_trips, LABELS)
    assert lines[lines.index("| variant | language | token types | bigrams |") + 2 :][:3] == [
        "| - | en | 10 | 18 |",
        "| MMT(f) | de | 12 | 25 |",
        "| MMT(f) | en | 10 | 20 |",
    ]
    assert "| de | mt | 2 | 40 | 12.5 | - | - |" in lines and "| de | mmt | 2 | 40 | 50.0 | 30 | 2 |" in lines
    page = results_html({"san-none-all": {"en": _metrics(1.0)}}, [], LABELS, lines)
    assert "<h2>Caption diversity (train split)</h2>" in page and "<td>12.5</td>" in page
    assert diversity_markdown({}, {}, LABELS) == []


def test_translation_table_shows_the_image_measures_where_recorded() -> None:
    words = {"sentences": 3, "words": 4, "word_accuracy": 0.75, "bleu": 40.04, "chrf": 60.0}
    translation = {
        "mt-en-de": {"bleu": 30.0, "chrf": 55.0, "image_awareness": None, "image_dependent": {**words,
                     "word_accuracy": 0.25}, "contrastive": {"items": 2, "accuracy": 0.5}},
        "mmt-en-de": {"bleu": 31.25, "chrf": 56.0, "meteor": 52.04, "image_awareness": 1.5, "image_dependent": words,
                      "contrastive": {"items": 2, "accuracy": 0.625}},
        "mmt-de-en": {"bleu": 20.0, "chrf": 45.0, "image_awareness": -0.5,
                      "image_dependent": "no test caption in en has image-dependent words",
                      "contrastive": "the corpus has no contrastive items for this direction"},
        "mt-de-en": {"bleu": 19.0, "chrf": 44.0, "image_awareness": None},  # written before these measures existed
    }  # fmt: skip
    lines = translation_markdown(translation)
    assert lines[0] == "## Translation (test captions)"
    assert lines[4:8] == [
        "| mmt-de-en | 20.0 | 45.0 | - | -0.5 | - | - | - |",
        "| mmt-en-de | 31.2 | 56.0 | 52.0 | 1.5 | 75.0 | 40.0 | 62.5 |",
        "| mt-de-en | 19.0 | 44.0 | - | - | - | - | - |",
        "| mt-en-de | 30.0 | 55.0 | - | - | 25.0 | 40.0 | 50.0 |",
    ]
    page = results_html({"san-none-all": {"en": _metrics(1.0)}}, [], LABELS, lines)
    assert "<h2>Translation (test captions)</h2>" in page and "<th>contrastive (%)</th>" in page
    assert translation_markdown({}) == []


def test_replicated_runs_show_mean_and_standard_deviation() -> None:
    """Three seeds of one run, combined as train_retrieval writes them: every recall and rsum is the mean, with the
    sample standard deviation beside it, in the language tables and the translate-search table alike."""
    from retrieval.results import combine_replicates

    runs = [{"en": _metrics(r1), "translate_search": {"de": _metrics(r1 + 1)}, "protocol": "full"}
            for r1 in (1.0, 2.0, 6.0)]  # fmt: skip
    combined = combine_replicates(runs, [0, 1, 2])
    assert combined["en"]["t2i"]["r1"] == 3.0 and combined["std"]["en"]["t2i"]["r1"] == pytest.approx(2.65, abs=0.01)
    assert combined["seeds"] == [0, 1, 2] and combined["protocol"] == "full" and "protocol" not in combined["std"]
    assert combined["std"]["en"]["t2i"]["r5"] == 0.0  # equal in every run
    markdown = results_markdown({"san-none-all": combined}, LABELS)
    # rsum = 2 (r1 + 110): mean 226.0, std 2 x 2.65 = 5.29
    assert (
        "| san | - | all | 3.0 ± 2.6 | 50.0 ± 0.0 | 60.0 ± 0.0 | 3.0 ± 2.6 | 50.0 ± 0.0 | 60.0 ± 0.0 | 226.0 ± 5.3 |"
        in (markdown)
    )
    assert "| san | - | all | 4.0 ± 2.6 |" in markdown  # translate-search
    assert "mean ± sample standard deviation" in markdown


def test_context_puts_the_pivot_first_with_header_legend_chance_and_charted_axes() -> None:
    from report.results import ReportContext, chance_line

    results = {"san-none-all": {"de": _metrics(1.0), "en": _metrics(2.0), "en-folds": _metrics(3.0)}}
    context = ReportContext(pivot="en", test_images={"en": 100, "de": 100, "en-folds": 1000},
                            header=("Commit abc123 (2026-11-25); seed 0",))  # fmt: skip
    lines = results_markdown(results, LABELS, context).splitlines()
    assert lines.index("## en") < lines.index("## en, mean over test folds") < lines.index("## de")
    assert lines[2] == "Commit abc123 (2026-11-25); seed 0"
    assert any(line.startswith("Variants: `-` the human captions alone") for line in lines)
    assert "Chance (text->image, 100 images): R@1 1.0, R@5 5.0, R@10 10.0." in lines
    assert chance_line(1000) == "Chance (text->image, 1000 images): R@1 0.1, R@5 0.5, R@10 1.0."
    assert chance_line(4).endswith("R@5 100.0, R@10 100.0.")  # never above 100
    page = results_html(results, [], LABELS, (), context)
    assert page.index("<h2>en</h2>") < page.index("<h2>de</h2>") and "rsum (of 600)</text>" in page
    assert 'aria-label="rsum per run, en"' in page and ">600</text>" in page and "<p>Commit abc123" in page
