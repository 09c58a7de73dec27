"""The Markdown tables: run names, row order, the role column, fold headings and translate-search, replicates, the
header, legend and chance lines, the marks of the paired tests, the translation and diversity tables."""

from __future__ import annotations

from typing import Any

import pytest

from report.significance import Significance
from report.tables import (
    ReportContext,
    chance_line,
    comparison_markdown,
    diversity_markdown,
    results_markdown,
    split_run,
    translation_markdown,
)
from retrieval.results import combine_replicates
from retrieval.significance import STATISTICS

LABELS = {"none": "-", "mt_f": "MT(f)", "mmt_f": "MMT(f)"}


def _metrics(r1: float) -> dict[str, Any]:
    recalls = {"r1": r1, "r5": 50.0, "r10": 60.0, "medr": 2.0, "meanr": 3.0}
    return {"i2t": dict(recalls), "t2i": dict(recalls), "rsum": 2 * (r1 + 110.0), "mr": (r1 + 110.0) / 3}


DIVERSITY = {
    "mmt_f": {"token_types": {"en": 10, "de": 12}, "bigrams": {"en": 20, "de": 25}},
    "none": {"token_types": {"en": 10}, "bigrams": {"en": 18}},
}
ROUND_TRIPS = {
    "de": {
        "mt": {"hop2": {"captions": 40, "changed": 0.125}},  # metrics from before types were recorded
        "mmt": {"hop2": {"captions": 40, "changed": 0.5, "token_types": 30, "new_types": 2}},
    }
}
WORDS = {"sentences": 3, "words": 4, "word_accuracy": 0.75, "bleu": 40.04, "chrf": 60.0}
TRANSLATION = {
    "mt-en-de": {
        "bleu": 30.0,
        "chrf": 55.0,
        "image_awareness": None,
        "image_dependent": {**WORDS, "word_accuracy": 0.25},
        "contrastive": {"items": 2, "accuracy": 0.5},
    },
    "mmt-en-de": {
        "bleu": 31.25,
        "chrf": 56.0,
        "meteor": 52.04,
        "image_awareness": 1.5,
        "image_dependent": WORDS,
        "contrastive": {"items": 2, "accuracy": 0.625},
    },
    "mmt-de-en": {
        "bleu": 20.0,
        "chrf": 45.0,
        "image_awareness": -0.5,
        "image_dependent": "no test caption in en has image-dependent words",
        "contrastive": "the corpus has no contrastive items for this direction",
    },
    "mt-de-en": {"bleu": 19.0, "chrf": 44.0, "image_awareness": None},  # written before these measures existed
}


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


def test_report_rows_show_the_variant_labels_in_their_order() -> None:
    """Labelled variants in the order of the labels (presets, then custom ones), a run of another variant by its
    name after them."""
    recall = {"t2i": {"r1": 1.0, "r5": 2.0, "r10": 3.0}, "i2t": {"r1": 4.0, "r5": 5.0, "r10": 6.0}, "rsum": 21.0}
    runs = ["san-stale-all", "san-paraphrases-all", "san-mmt_fbf-all", "san-none-all"]
    results = {name: {"en": recall} for name in runs}
    labels = {"none": "-", "mmt_fbf": "MMT(f+b+f)", "paraphrases": "MMT(f+b+f; hop 2)"}
    rows = [line.split(" | ")[1] for line in results_markdown(results, labels).splitlines() if line.startswith("| san")]
    assert rows == ["-", "MMT(f+b+f)", "MMT(f+b+f; hop 2)", "stale"]


def test_diversity_tables_follow_the_variant_order_and_show_percent_changed() -> None:
    lines = diversity_markdown(DIVERSITY, ROUND_TRIPS, LABELS)
    assert lines[lines.index("| variant | language | token types | bigrams |") + 2 :][:3] == [
        "| - | en | 10 | 18 |",
        "| MMT(f) | de | 12 | 25 |",
        "| MMT(f) | en | 10 | 20 |",
    ]
    assert "| de | mt | 2 | 40 | 12.5 | - | - |" in lines and "| de | mmt | 2 | 40 | 50.0 | 30 | 2 |" in lines
    assert diversity_markdown({}, {}, LABELS) == []


def test_translation_table_puts_mt_and_mmt_of_a_direction_side_by_side_with_their_difference() -> None:
    lines = translation_markdown(TRANSLATION, pivot="en")
    assert lines[:4] == [
        "## Translation (test captions)",
        "",
        "| direction | system | BLEU | chrF | METEOR | image awareness | image-dependent words (%) | "
        "BLEU, sentences with them | contrastive (%) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    assert lines[4:] == [
        "| en→de | MT | 30.0 | 55.0 | - | - | 25.0 | 40.0 | 50.0 |",
        "| en→de | MMT | 31.2 | 56.0 | 52.0 | 1.5 | 75.0 | 40.0 | 62.5 |",
        "| en→de | Δ MMT − MT | +1.2 | +1.0 | - | - | +50.0 | 0.0 | +12.5 |",
        "| de→en | MT | 19.0 | 44.0 | - | - | - | - | - |",
        "| de→en | MMT | 20.0 | 45.0 | - | -0.5 | - | - | - |",
        "| de→en | Δ MMT − MT | +1.0 | +1.0 | - | - | - | - | - |",
        "",
    ]
    assert (
        translation_markdown(TRANSLATION)[4] == "| de→en | MT | 19.0 | 44.0 | - | - | - | - | - |"
    )  # no pivot: sorted
    only_mmt = translation_markdown({"mmt-en-de": TRANSLATION["mmt-en-de"]})
    assert only_mmt[4:] == ["| en→de | MMT | 31.2 | 56.0 | 52.0 | 1.5 | 75.0 | 40.0 | 62.5 |", ""]  # no Δ row
    assert translation_markdown({}) == []
    with pytest.raises(ValueError, match=r"^'mmt-en' is not a translation system name <system>-<src>-<tgt>$"):
        translation_markdown({"mmt-en": TRANSLATION["mmt-en-de"]})


COMPARISONS = {
    "de-en": {
        "baseline": 63.14,
        "system": 63.10,
        "delta": -0.04,
        "p_value": 0.3966,
        "mean": 63.13,
        "ci": 3.6,
        "samples": 1000,
        "signature": "nrefs:1|bs:1000|seed:12345",
    },
    "en-de": {
        "baseline": 61.77,
        "system": 76.79,
        "delta": 15.02,
        "p_value": 0.000999,
        "mean": 76.86,
        "ci": 3.54,
        "samples": 1000,
        "signature": "nrefs:1|bs:1000|seed:12345",
    },
}


def test_the_paired_bootstrap_table_gives_both_bleus_the_delta_p_and_the_interval() -> None:
    lines = comparison_markdown(COMPARISONS, pivot="en")
    assert lines[0] == "## The MMT against the text-only MT (paired bootstrap of BLEU)"
    assert lines[2].startswith("Test captions resampled 1000 times with both systems' translations paired: p is ")
    assert lines[4:] == [
        "| direction | MT BLEU | MMT BLEU | Δ BLEU | p | significant (p < 0.05) | MMT BLEU, bootstrap mean ± 95% CI |",
        "|---|---|---|---|---|---|---|",
        "| en→de | 61.8 | 76.8 | +15.0 | < 0.001 | yes | 76.9 ± 3.5 |",
        "| de→en | 63.1 | 63.1 | 0.0 | 0.397 | no | 63.1 ± 3.6 |",
        "",
        "sacreBLEU signature: `nrefs:1|bs:1000|seed:12345`",
        "",
    ]
    edge = {"fr-en": {**COMPARISONS["de-en"], "p_value": 0.05}, "en-fr": {**COMPARISONS["de-en"], "p_value": 0.049}}
    rows = [line for line in comparison_markdown(edge) if line.startswith("| en→fr") or line.startswith("| fr→en")]
    assert rows == [
        "| en→fr | 63.1 | 63.1 | 0.0 | 0.049 | yes | 63.1 ± 3.6 |",
        "| fr→en | 63.1 | 63.1 | 0.0 | 0.050 | no | 63.1 ± 3.6 |",  # significant means p < 0.05
    ]
    assert comparison_markdown({}) == []


def test_replicated_runs_show_mean_and_standard_deviation() -> None:
    """Three seeds of one run, combined as train_retrieval writes them: every recall and rsum is the mean, with the
    sample standard deviation beside it, in the language tables and the translate-search table alike."""
    runs = [
        {"en": _metrics(r1), "translate_search": {"de": _metrics(r1 + 1)}, "protocol": "full"} for r1 in (1.0, 2.0, 6.0)
    ]
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


def test_context_puts_the_pivot_first_with_header_legend_and_chance() -> None:
    results = {"san-none-all": {"de": _metrics(1.0), "en": _metrics(2.0), "en-folds": _metrics(3.0)}}
    context = ReportContext(
        pivot="en", test_images={"en": 100, "de": 100, "en-folds": 1000}, header=("Commit abc123 (2026-11-25); seed 0",)
    )
    lines = results_markdown(results, LABELS, context).splitlines()
    assert lines.index("## en") < lines.index("## en, mean over test folds") < lines.index("## de")
    assert lines[2] == "Commit abc123 (2026-11-25); seed 0"
    assert any(line.startswith("Variants: `-` the human captions alone") for line in lines)
    assert "Chance (text->image, 100 images): R@1 1.0, R@5 5.0, R@10 10.0." in lines
    assert chance_line(1000) == "Chance (text->image, 1000 images): R@1 0.1, R@5 0.5, R@10 1.0."
    assert chance_line(4).endswith("R@5 100.0, R@10 100.0.")  # never above 100


def test_tested_runs_get_marks_in_their_language_tables_and_the_legend_explains_them() -> None:
    results = {"san-none-all": {"en": _metrics(1.0)}, "san-mmt_f-all": {"en": _metrics(9.0)}}
    test = {
        name: {"delta": 8.0, "p_value": 0.01 if name in ("rsum", "i2t_r1") else 0.3, "ci": 1.0} for name in STATISTICS
    }
    tests = {"san-mmt_f-all/en": {"san-none-all/en": {**test, "samples": 1000}}}
    context = ReportContext(pivot="en", significance=Significance(tests, LABELS))
    lines = results_markdown(results, LABELS, context, before_tables=["## Before"]).splitlines()
    assert "| san | MMT(f) | all | 9.0 | 50.0 | 60.0 | 9.0† | 50.0 | 60.0 | 238.0† | 39.7 | +16.0 |" in lines
    assert "| san | - | all | 1.0 | 50.0 | 60.0 | 1.0 | 50.0 | 60.0 | 222.0 | 37.0 | - |" in lines
    legend = next(index for index, line in enumerate(lines) if line.startswith("Variants: `-`"))
    assert lines[legend + 2].startswith("Marks: a difference significant at p < 0.05 (two-sided paired bootstrap")
    assert lines.index("## Before") < lines.index("## en")
    untested = results_markdown(results, LABELS, ReportContext(pivot="en")).splitlines()
    assert not any(line.startswith("Marks:") for line in untested)
    assert "| san | MMT(f) | all | 9.0 | 50.0 | 60.0 | 9.0 | 50.0 | 60.0 | 238.0 | 39.7 | +16.0 |" in untested
