"""The headline: sentences made from the numbers, checked word for word on hand-made metrics (winners, ties, missing
variants, one seed against several, the bootstrap's p on either side of 0.05, retrieval differences with and
without their paired tests)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from report.headline import Score, finding, headline, retrieval_findings, translation_findings
from report.significance import Significance
from retrieval.results import combine_replicates
from tests.unit.report.test_tables import COMPARISONS

LABELS = {"none": "-", "mt_f": "MT(f)", "mt_fb": "MT(f+b)", "mmt_f": "MMT(f)", "mmt_fb": "MMT(f+b)"}
ORIGINS = {"none": None, "mt_f": "mt", "mt_fb": "mt", "mmt_f": "mmt", "mmt_fb": "mmt"}
ONE_SEED = "one seed; not tested for significance."


def _one(**rsums: float) -> dict[str, Score]:
    return {variant: Score(rsum, None, 1) for variant, rsum in rsums.items()}


def _said(**rsums: float) -> str:
    return finding(_one(**rsums), LABELS, ORIGINS)


def test_the_winner_is_measured_against_the_baseline_and_the_other_systems_best() -> None:
    assert _said(none=300.0, mt_f=290.0, mt_fb=280.0, mmt_f=310.5) == (
        "MMT(f) has the highest rsum, 310.5: +10.5 over no augmentation (`-`, 300.0) and +20.5 over MT(f), the best "
        f"MT variant (290.0); {ONE_SEED}"
    )
    assert _said(none=300.0, mt_f=320.0, mt_fb=315.0, mmt_f=310.0, mmt_fb=312.0) == (
        "MT(f) has the highest rsum, 320.0: +20.0 over no augmentation (`-`, 300.0) and +8.0 over MMT(f+b), the best "
        f"MMT variant (312.0); {ONE_SEED}"
    )


def test_ties_name_every_winner_and_compare_systems_only_when_the_winners_share_one() -> None:
    assert _said(none=300.0, mt_f=310.0, mmt_f=310.0) == (
        f"MT(f) and MMT(f) share the highest rsum, 310.0: +10.0 over no augmentation (`-`, 300.0); {ONE_SEED}"
    )
    assert _said(none=300.0, mt_f=305.0, mmt_f=310.0, mmt_fb=310.0) == (
        "MMT(f) and MMT(f+b) share the highest rsum, 310.0: +10.0 over no augmentation (`-`, 300.0) and +5.0 over "
        f"MT(f), the best MT variant (305.0); {ONE_SEED}"
    )
    assert (
        _said(none=300.0, mmt_f=300.0) == f"no variant beats no augmentation (`-`, 300.0); MMT(f) ties it; {ONE_SEED}"
    )
    assert _said(none=300.0, mt_f=300.0, mmt_f=300.0) == (
        f"no variant beats no augmentation (`-`, 300.0); MT(f) and MMT(f) tie it; {ONE_SEED}"
    )


def test_a_missing_variant_is_said_to_be_missing() -> None:
    assert _said(mt_f=290.0, mmt_f=310.0) == (
        "MMT(f) has the highest rsum, 310.0: no run without augmentation (`-`) to compare with and +20.0 over MT(f), "
        f"the best MT variant (290.0); {ONE_SEED}"
    )
    assert _said(none=300.0, mmt_f=310.0) == (
        "MMT(f) has the highest rsum, 310.0: +10.0 over no augmentation (`-`, 300.0) and no MT variant was run; "
        + ONE_SEED
    )
    assert _said(none=300.0) == f"only no augmentation (`-`, 300.0) was run; {ONE_SEED}"
    custom = finding(_one(none=300.0, paraphrases=310.0), LABELS, ORIGINS)  # a variant of no known origin
    assert custom == f"paraphrases has the highest rsum, 310.0: +10.0 over no augmentation (`-`, 300.0); {ONE_SEED}"


def test_the_baseline_can_win() -> None:
    assert _said(none=300.0, mt_f=280.0, mmt_f=295.0) == (
        f"no variant beats no augmentation (`-`, 300.0); the best, MMT(f), is 5.0 below it (295.0); {ONE_SEED}"
    )


def test_several_seeds_give_mean_and_sd_and_whether_a_difference_exceeds_the_summed_sds() -> None:
    scores = {
        "none": Score(300.0, 3.0, 3),
        "mt_f": Score(308.0, 1.0, 3),
        "mmt_f": Score(310.0, 1.5, 3),
    }
    assert finding(scores, LABELS, ORIGINS) == (
        "MMT(f) has the highest mean rsum over 3 seeds, 310.0 ± 1.5: +10.0 over no augmentation (`-`, 300.0 ± 3.0; "
        "the difference exceeds the summed sds) and +2.0 over MT(f), the best MT variant (308.0 ± 1.0; the "
        "difference is within the summed sds); not tested for significance."
    )
    losing = {"none": Score(300.0, 3.0, 3), "mmt_f": Score(299.0, 2.0, 3)}
    assert finding(losing, LABELS, ORIGINS) == (
        "no variant beats no augmentation (`-`, 300.0 ± 3.0); the best, MMT(f), is 1.0 below it (299.0 ± 2.0; the "
        "difference is within the summed sds); not tested for significance."
    )


def _language(rsum: float) -> dict[str, Any]:
    recalls = {"r1": 1.0, "r5": 2.0, "r10": 3.0}
    return {"t2i": recalls, "i2t": recalls, "rsum": rsum, "mr": rsum / 6}


def test_retrieval_findings_go_per_model_role_and_language_the_pivot_first() -> None:
    results = {
        "san-none-all": {"de": _language(400.0), "en": _language(300.0), "en-folds": _language(1.0)},
        "san-mmt_f-all": {"de": _language(410.0), "en": _language(301.0), "en-folds": _language(2.0)},
        "dan-none-all": {"de-folds": _language(200.0)},
        "dan-mmt_f-all": {"de-folds": _language(190.0)},
    }
    sentences = retrieval_findings(results, LABELS, ORIGINS, pivot="en")
    assert sentences == [
        "Retrieval (dan, role all, de, mean over test folds): no variant beats no augmentation (`-`, 200.0); the "
        f"best, MMT(f), is 10.0 below it (190.0); {ONE_SEED}",
        "Retrieval (san, role all, en): MMT(f) has the highest rsum, 301.0: +1.0 over no augmentation (`-`, 300.0) "
        f"and no MT variant was run; {ONE_SEED}",  # the fold means of en are left out: en has a full-test score
        "Retrieval (san, role all, de): MMT(f) has the highest rsum, 410.0: +10.0 over no augmentation (`-`, 400.0) "
        f"and no MT variant was run; {ONE_SEED}",
    ]


def test_replicates_as_train_retrieval_writes_them_are_read_as_mean_and_sd() -> None:
    def combined(*rsums: float) -> dict[str, Any]:
        return combine_replicates([{"en": _language(rsum)} for rsum in rsums], [0, 1])

    results = {"san-none-all": combined(300.0, 302.0), "san-mt_f-all": combined(320.0, 330.0)}
    (sentence,) = retrieval_findings(results, LABELS, ORIGINS, pivot="en")
    assert sentence == (
        "Retrieval (san, role all, en): MT(f) has the highest mean rsum over 2 seeds, 325.0 ± 7.1: +24.0 over no "
        "augmentation (`-`, 301.0 ± 1.4; the difference exceeds the summed sds) and no MMT variant was run; not "
        "tested for significance."
    )


def test_translation_findings_give_both_bleus_the_delta_and_the_verdict_at_005() -> None:
    assert translation_findings(COMPARISONS, pivot="en") == [
        "Translation (en→de): the MMT scores 76.8 BLEU, the text-only MT 61.8 (+15.0; paired bootstrap p < 0.001, "
        "significant at 0.05).",
        "Translation (de→en): the MMT scores 63.1 BLEU, the text-only MT 63.1 (0.0; paired bootstrap p = 0.397, not "
        "significant at 0.05).",
    ]
    above = {"en-de": {**COMPARISONS["en-de"], "p_value": 0.05}}
    below = {"en-de": {**COMPARISONS["en-de"], "p_value": 0.049}}
    assert translation_findings(above)[0].endswith("(+15.0; paired bootstrap p = 0.050, not significant at 0.05).")
    assert translation_findings(below)[0].endswith("(+15.0; paired bootstrap p = 0.049, significant at 0.05).")
    assert translation_findings({}) == []


def test_the_headline_is_one_bold_led_paragraph_or_nothing() -> None:
    results = {"san-none-all": {"en": _language(300.0)}, "san-mmt_f-all": {"en": _language(310.0)}}
    paragraph = headline(results, {"en-de": COMPARISONS["en-de"]}, LABELS, ORIGINS, pivot="en")
    assert paragraph == (
        "**Findings.** Retrieval (san, role all, en): MMT(f) has the highest rsum, 310.0: +10.0 over no augmentation "
        f"(`-`, 300.0) and no MT variant was run; {ONE_SEED} Translation (en→de): the MMT scores 76.8 BLEU, the "
        "text-only MT 61.8 (+15.0; paired bootstrap p < 0.001, significant at 0.05)."
    )
    assert "\n" not in paragraph
    assert headline({}, {}, LABELS, ORIGINS) == ""


@pytest.mark.parametrize("bad", ["san-none", "san-none-all-extra"])
def test_a_run_name_that_is_not_model_variant_role_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="is not a run name <model>-<variant>-<role>"):
        retrieval_findings({bad: {"en": _language(1.0)}}, LABELS, ORIGINS)


def _p(**p_values: float) -> Callable[[str, str], float | None]:
    """A paired test's p of rsum per pair of variants, given as ``<system>__<baseline>``; other pairs untested."""
    return lambda system, baseline: p_values.get(f"{system}__{baseline}")


def test_tested_differences_carry_their_p_and_verdict() -> None:
    scores = _one(none=300.0, mt_f=290.0, mmt_f=310.5)
    assert finding(scores, LABELS, ORIGINS, _p(mmt_f__none=0.0009, mmt_f__mt_f=0.2)) == (
        "MMT(f) has the highest rsum, 310.5: +10.5 over no augmentation (`-`, 300.0; p < 0.001, significant) and "
        "+20.5 over MT(f), the best MT variant (290.0; p = 0.200, not significant); one seed; paired bootstrap of "
        "rsum over the test images, significant at p < 0.05."
    )
    losing = {"none": Score(300.0, 3.0, 3), "mmt_f": Score(299.0, 2.0, 3)}
    assert finding(losing, LABELS, ORIGINS, _p(mmt_f__none=0.5)) == (
        "no variant beats no augmentation (`-`, 300.0 ± 3.0); the best, MMT(f), is 1.0 below it (299.0 ± 2.0; the "
        "difference is within the summed sds; p = 0.500, not significant); paired bootstrap of rsum over the test "
        "images, significant at p < 0.05."
    )
    assert finding(scores, LABELS, ORIGINS, _p(mmt_f__none=0.01)).endswith(
        "(290.0; not tested); one seed; paired bootstrap of rsum over the test images, significant at p < 0.05."
    )


def test_retrieval_findings_read_the_reports_tests() -> None:
    results = {"san-none-all": {"en": _language(300.0)}, "san-mmt_f-all": {"en": _language(310.0)}}
    rsum = {"rsum": {"p_value": 0.03}, "samples": 1000}
    significance = Significance({"san-mmt_f-all/en": {"san-none-all/en": rsum}}, LABELS)
    (sentence,) = retrieval_findings(results, LABELS, ORIGINS, "en", significance)
    assert sentence == (
        "Retrieval (san, role all, en): MMT(f) has the highest rsum, 310.0: +10.0 over no augmentation (`-`, 300.0; "
        "p = 0.030, significant) and no MT variant was run; one seed; paired bootstrap of rsum over the test images, "
        "significant at p < 0.05."
    )
    (untested,) = retrieval_findings(results, LABELS, ORIGINS, "en", Significance({}, LABELS))
    assert untested.endswith(ONE_SEED)
