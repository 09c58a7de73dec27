"""The report's headline: what the numbers say, as sentences made from them.

Retrieval: per model, role and test language, which caption variant has the highest rsum, by how much it beats the
variant ``none`` (the human captions alone) and the best variant of the other translation system (MT for an MMT
variant, MMT for an MT one). With several seeds it gives each rsum as mean ± sample standard deviation and says
whether a difference exceeds the two standard deviations summed (their mean ± sd ranges do not overlap). Where the
runs' per-query ranks were tested (:mod:`report.significance`), each difference it names comes with the paired
bootstrap's p-value of rsum and its verdict at :data:`ALPHA`; without them a sentence says it was not tested.

Translation: per direction, the MMT's and the text-only MT's test BLEU, their difference and the paired bootstrap's
p-value (train_mmt's ``mmt-vs-mt-<src>-<tgt>`` files), significant when p < :data:`ALPHA`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from common.bootstrap import ALPHA
from report.runs import split_run
from report.significance import Significance, ref
from report.tables import arrow, direction_order, language_heading, languages_of, p_value, signed

BASELINE = "none"  # the variant every other is measured against: the human captions alone
SYSTEMS = {"mt": "MT", "mmt": "MMT"}  # a variant's origin -> how the sentences name its system
Tested = Callable[[str, str], float | None]  # (variant, variant) -> the paired test's p of rsum; None: not tested


@dataclass(frozen=True)
class Score:
    """One run's rsum in one test language.

    Attributes:
        rsum: The rsum (the mean over seeds when there are several).
        sd: Its sample standard deviation over the seeds; None for one seed.
        seeds: How many seeds the run was trained with.
    """

    rsum: float
    sd: float | None
    seeds: int


def headline(
    results: Mapping[str, Mapping[str, Any]],
    comparisons: Mapping[str, Mapping[str, Any]],
    variant_labels: Mapping[str, str],
    origins: Mapping[str, str | None],
    pivot: str | None = None,
    significance: Significance | None = None,
) -> str:
    """The headline paragraph: :func:`retrieval_findings` then :func:`translation_findings`; empty without either."""
    sentences = [
        *retrieval_findings(results, variant_labels, origins, pivot, significance),
        *translation_findings(comparisons, pivot),
    ]
    return "**Findings.** " + " ".join(sentences) if sentences else ""


def retrieval_findings(
    results: Mapping[str, Mapping[str, Any]],
    variant_labels: Mapping[str, str],
    origins: Mapping[str, str | None],
    pivot: str | None = None,
    significance: Significance | None = None,
) -> list[str]:
    """A sentence per model, role and test language (models and roles sorted, the pivot's language first; the mean
    over test folds only where a language has no full-test score).

    Args:
        results: Run name (``<model>-<variant>-<role>``) -> its metrics (with ``std`` and ``seeds`` for several
            seeds).
        variant_labels: Variant name -> how the report shows it.
        origins: Variant name -> the system whose captions it adds (``mt``, ``mmt``; None: none). A variant not in it
            is compared with the baseline only.
        pivot: The pivot language.
        significance: The paired tests of the runs; None or none run: the sentences say so.
    """
    groups: dict[tuple[str, str], dict[str, Mapping[str, Any]]] = {}
    for name, metrics in results.items():
        model, variant, role = split_run(name)
        groups.setdefault((model, role), {})[variant] = metrics
    sentences = []
    for (model, role), runs in sorted(groups.items()):
        keys = languages_of(runs, pivot)
        for key in [key for key in keys if not (key.endswith("-folds") and key.removesuffix("-folds") in keys)]:
            scores = {variant: _score(metrics, key) for variant, metrics in runs.items() if key in metrics}
            prefix = f"Retrieval ({model}, role {role}, {language_heading(key)}): "
            tested = _tested(significance, model, role, key)
            sentences.append(prefix + finding(scores, variant_labels, origins, tested))
    return sentences


def _tested(significance: Significance | None, model: str, role: str, key: str) -> Tested | None:
    """The p of rsum of two variants of ``model`` and ``role`` on ``key``; None when none of them was tested there."""
    if significance is None:
        return None
    refs = {ref for system, baselines in significance.tests.items() for ref in (system, *baselines)}
    if not any(ref.startswith(f"{model}-") and ref.endswith(f"-{role}/{key}") for ref in refs):
        return None
    tests = significance

    def p_of(system: str, baseline: str) -> float | None:
        found = tests.test(ref(f"{model}-{system}-{role}", key), ref(f"{model}-{baseline}-{role}", key))
        return None if found is None else float(found["rsum"]["p_value"])

    return p_of


def _score(metrics: Mapping[str, Any], key: str) -> Score:
    spread = metrics.get("std", {}).get(key)
    return Score(float(metrics[key]["rsum"]), float(spread["rsum"]) if spread else None, len(metrics.get("seeds", [0])))


def finding(
    scores: Mapping[str, Score],
    variant_labels: Mapping[str, str],
    origins: Mapping[str, str | None],
    tested: Tested | None = None,
) -> str:
    """One test language's sentence (without its model, role and language): the variant of the highest rsum, its
    lead over the baseline and over the other system's best variant, and how far the numbers can be trusted: each
    difference's paired test (``tested``; None: the sentence says nothing was tested)."""

    def label(name: str) -> str:
        return variant_labels.get(name, name)

    order = {name: index for index, name in enumerate(variant_labels)}
    ranked = sorted(scores, key=lambda name: (-scores[name].rsum, order.get(name, len(order)), name))
    winners = [name for name in ranked if scores[name].rsum == scores[ranked[0]].rsum]
    leader = scores[winners[0]]
    several = max(score.seeds for score in scores.values()) > 1
    if tested is None:
        caveat = "not tested for significance." if several else "one seed; not tested for significance."
    else:
        test = f"paired bootstrap of rsum over the test images, significant at p < {ALPHA:g}."
        caveat = test if several else f"one seed; {test}"

    def verdict(system: str, baseline: str) -> str:
        """The paired test of two variants, for the parentheses after a difference; nothing without tests."""
        if tested is None:
            return ""
        p = tested(system, baseline)
        if p is None:
            return "; not tested"
        return f"; {p_value(p)}, {'significant' if p < ALPHA else 'not significant'}"

    baseline = scores.get(BASELINE)
    if baseline is not None and BASELINE in winners:
        others = [name for name in ranked if name != BASELINE]
        if not others:
            return f"only {_base(baseline)} was run; {caveat}"
        if len(winners) > 1:
            tied = _joined([label(name) for name in winners if name != BASELINE])
            return f"no variant beats {_base(baseline)}; {tied} {'ties' if len(winners) == 2 else 'tie'} it; {caveat}"
        best = scores[others[0]]
        note = _spread_note(baseline, best) + verdict(others[0], BASELINE)
        below = f"{baseline.rsum - best.rsum:.1f} below it ({_value(best)}{note})"
        return f"no variant beats {_base(baseline)}; the best, {label(others[0])}, is {below}; {caveat}"
    measure = f"mean rsum over {leader.seeds} seeds" if several else "rsum"
    verb = "has" if len(winners) == 1 else "share"
    claim = f"{_joined([label(name) for name in winners])} {verb} the highest {measure}, {_value(leader)}"
    if baseline is None:
        clauses = ["no run without augmentation (`-`) to compare with"]
    else:
        note = _spread_note(leader, baseline) + (verdict(winners[0], BASELINE) if len(winners) == 1 else "")
        clauses = [f"{_lead(leader, baseline)} over {_base(baseline, note)}"]
    systems = {origins.get(name) for name in winners}
    origin = next(iter(systems)) if len(systems) == 1 else None
    if origin in SYSTEMS:
        other = next(key for key in SYSTEMS if key != origin)
        rivals = [name for name in ranked if origins.get(name) == other]
        if rivals:
            rival = scores[rivals[0]]
            note = _spread_note(leader, rival) + (verdict(winners[0], rivals[0]) if len(winners) == 1 else "")
            clauses.append(
                f"{_lead(leader, rival)} over {label(rivals[0])}, the best {SYSTEMS[other]} variant "
                f"({_value(rival)}{note})"
            )
        else:
            clauses.append(f"no {SYSTEMS[other]} variant was run")
    return f"{claim}: {' and '.join(clauses)}; {caveat}"


def _base(score: Score, note: str = "") -> str:
    return f"no augmentation (`-`, {_value(score)}{note})"


def _value(score: Score) -> str:
    return f"{score.rsum:.1f}" if score.sd is None else f"{score.rsum:.1f} ± {score.sd:.1f}"


def _lead(first: Score, second: Score) -> str:
    return f"{first.rsum - second.rsum:+.1f}"


def _spread_note(first: Score, second: Score) -> str:
    """Whether the difference of two means exceeds their standard deviations summed; nothing for one seed."""
    if first.sd is None or second.sd is None:
        return ""
    beyond = abs(first.rsum - second.rsum) > first.sd + second.sd
    return "; the difference exceeds the summed sds" if beyond else "; the difference is within the summed sds"


def _joined(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def translation_findings(comparisons: Mapping[str, Mapping[str, Any]], pivot: str | None = None) -> list[str]:
    """A sentence per direction (from the pivot first, then sorted): both systems' BLEU, the difference and the
    paired bootstrap's verdict.

    Args:
        comparisons: Direction (``en-de``) -> train_mmt's ``mmt-vs-mt-<direction>`` file (``system`` the MMT's BLEU,
            ``baseline`` the MT's, ``delta``, ``p_value``).
        pivot: The pivot language.
    """
    sentences = []
    for direction in sorted(comparisons, key=direction_order(pivot)):
        row = comparisons[direction]
        verdict = "significant" if row["p_value"] < ALPHA else "not significant"
        sentences.append(
            f"Translation ({arrow(direction)}): the MMT scores {row['system']:.1f} BLEU, the text-only MT "
            f"{row['baseline']:.1f} ({signed(row['delta'])}; paired bootstrap {p_value(row['p_value'])}, "
            f"{verdict} at {ALPHA:g})."
        )
    return sentences
