"""The report's paired tests: which runs are compared (each variant with the earlier ones, the multilingual model
with translate-search), the marks a cell gets and the legend that explains them."""

from __future__ import annotations

import numpy as np
import pytest

from common.errors import InputError
from report.significance import Significance, counterpart, run_tests
from retrieval.significance import QueryRanks

LABELS = {"none": "-", "mt_f": "MT(f)", "mt_fb": "MT(f+b)", "mmt_f": "MMT(f)", "mmt_fb": "MMT(f+b)"}
IMAGES = 50


def _ranks(found: int) -> QueryRanks:
    """50 images of one caption each, the first ``found`` of them (both ways) at rank 0, the others at rank 20."""
    ranks = np.array([[0] * found + [20] * (IMAGES - found)])
    ids = np.array([f"c{index}" for index in range(IMAGES)])
    return QueryRanks(ids, np.array([f"i{index}" for index in range(IMAGES)]), np.arange(IMAGES), ranks, ranks.copy())


def test_each_variant_is_tested_against_the_earlier_ones_and_marked_against_none_and_its_mt() -> None:
    ranks = {
        "san-mmt_f-all": {"en": _ranks(IMAGES)},  # every query found: beats both
        "san-none-all": {"en": _ranks(0)},
        "san-mt_f-all": {"en": _ranks(1)},  # one query better than none: not significant
        "dan-none-all": {"en": _ranks(0)},  # another model: not compared with san's runs
    }
    tests = run_tests(ranks, LABELS, samples=200)
    assert {system: sorted(baselines) for system, baselines in tests.items()} == {
        "san-mt_f-all/en": ["san-none-all/en"],
        "san-mmt_f-all/en": ["san-mt_f-all/en", "san-none-all/en"],
    }
    assert tests["san-mmt_f-all/en"]["san-none-all/en"]["rsum"]["delta"] == 600.0
    significance = Significance(tests, LABELS)
    assert significance.marks("san-mmt_f-all", "en", "rsum") == "†‡"
    assert significance.marks("san-mt_f-all", "en", "rsum") == ""
    assert significance.marks("san-none-all", "en", "rsum") == ""
    assert significance.marks("san-mmt_f-all", "de", "rsum") == ""  # not tested there
    assert significance.test("san-none-all/en", "san-mt_f-all/en") is tests["san-mt_f-all/en"]["san-none-all/en"]


def test_the_multilingual_model_is_tested_against_translate_search_of_the_same_model_and_variant() -> None:
    ranks = {
        "san-mmt_f-pivot_only": {"en": _ranks(10), "translate_search.de": _ranks(5)},
        "san-mmt_f-discard_human_targets": {"en": _ranks(10), "de": _ranks(IMAGES)},
        "dan-mmt_f-discard_human_targets": {"de": _ranks(IMAGES)},
    }
    tests = run_tests(ranks, LABELS, samples=200)
    assert list(tests) == ["san-mmt_f-discard_human_targets/de"]
    assert list(tests["san-mmt_f-discard_human_targets/de"]) == ["san-mmt_f-pivot_only/translate_search.de"]
    significance = Significance(tests, LABELS)
    assert significance.marks("san-mmt_f-discard_human_targets", "de", "t2i_r1") == "§"


def test_an_mmt_variant_is_paired_with_the_mt_variant_of_the_same_passes_by_label() -> None:
    assert counterpart("MMT(f+b)", LABELS) == "mt_fb"
    assert counterpart("MMT(f+b+f)", LABELS) is None  # no MT variant of those passes
    assert counterpart("MT(f)", LABELS) is None and counterpart("-", LABELS) is None


def test_the_legend_names_the_test_and_every_mark_and_is_empty_without_tests() -> None:
    tests = run_tests({"san-none-all": {"en": _ranks(0)}, "san-mt_f-all": {"en": _ranks(3)}}, LABELS, samples=300)
    assert Significance(tests, LABELS).legend() == (
        "Marks: a difference significant at p < 0.05 (two-sided paired bootstrap over the test images, 300 "
        "resamples, each query's hits averaged over the run's seeds): † against `-` (the same model and role, human "
        "captions alone); ‡ MMT against MT of the same passes; § the model searched in the queries' language "
        "against translate-search."
    )
    assert Significance({}, LABELS).legend() == ""


def test_runs_ranked_on_different_queries_are_named() -> None:
    other = _ranks(IMAGES)
    other = QueryRanks(other.caption_ids[:10], other.image_ids[:10], other.caption_image[:10], other.i2t, other.t2i)
    with pytest.raises(
        InputError, match=r"^san-mt_f-all/en against san-none-all/en: the runs were tested on different"
    ):
        run_tests({"san-none-all": {"en": _ranks(0)}, "san-mt_f-all": {"en": other}}, LABELS)
