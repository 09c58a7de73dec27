"""The report's paired tests of retrieval runs, and the marks they put on the tables' cells.

From each run's per-query ranks (``<run>.ranks.npz``, :mod:`retrieval.significance`), :func:`run_tests` tests, for
each model, role and test set (``en``, ``en-folds``, ...), every variant against every variant listed before it (so
each against ``-``, the human captions alone, and each MMT variant against the MT variant of the same passes), and
for Table 5 the model tested in a language against the same model and variant of another role that searched that
language's queries translated into the pivot (translate-search). A test is keyed by its two test sets,
``<run>/<key>``: ``tests[system][baseline]``, where ``system`` is the later variant (or the multilingual model).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from common.bootstrap import ALPHA, SAMPLES
from common.errors import InputError
from report.runs import split_run
from retrieval.significance import QueryRanks, paired_test

BASELINE = "none"  # the variant every other is marked against: the human captions alone
SEARCH_PREFIX = "translate_search."  # a ranks key of queries translated into the pivot: translate_search.<lang>
MARKS = {"baseline": "†", "system": "‡", "search": "§"}  # against `-`; MMT against MT; against translate-search


def ref(run: str, key: str) -> str:
    """A test set of a run, as the tests name it: ``san-mmt_f-all/en``."""
    return f"{run}/{key}"


def run_tests(
    ranks: Mapping[str, Mapping[str, QueryRanks]], variant_labels: Mapping[str, str], *, samples: int = SAMPLES
) -> dict[str, dict[str, dict[str, Any]]]:
    """Every comparison the report makes (see the module's doc): ``{system ref: {baseline ref: test}}``, each test
    :func:`~retrieval.significance.paired_test`'s result.

    Args:
        ranks: Run name -> its test sets' ranks (runs without a ranks file left out).
        variant_labels: Variant name -> label, in the order of the report's rows (which variant is the later).
        samples: Resamples of each test.

    Raises:
        InputError: two runs to compare were tested on different queries.
    """
    order = {variant: index for index, variant in enumerate(variant_labels)}
    groups: dict[tuple[str, str], list[str]] = {}
    for run in ranks:
        model, _, role = split_run(run)
        groups.setdefault((model, role), []).append(run)
    tests: dict[str, dict[str, dict[str, Any]]] = {}

    def add(system: tuple[str, str], baseline: tuple[str, str]) -> None:
        try:
            result = paired_test(ranks[baseline[0]][baseline[1]], ranks[system[0]][system[1]], samples=samples)
        except ValueError as error:  # ranks files of different test data: one of the runs is older than the data
            raise InputError(f"{ref(*system)} against {ref(*baseline)}: {error}") from None
        tests.setdefault(ref(*system), {})[ref(*baseline)] = result

    for runs in groups.values():
        runs.sort(key=lambda run: (order.get(split_run(run)[1], len(order)), run))
        for later, run in enumerate(runs):
            for earlier in runs[:later]:
                for key in ranks[run]:
                    if not key.startswith(SEARCH_PREFIX) and key in ranks[earlier]:
                        add((run, key), (earlier, key))
    for run, sets in ranks.items():  # Table 5: the model searched in a language against translate-search
        model, variant, role = split_run(run)
        for searched in [key for key in sets if key.startswith(SEARCH_PREFIX)]:
            lang = searched.removeprefix(SEARCH_PREFIX)
            for other in ranks:
                other_model, other_variant, other_role = split_run(other)
                if (other_model, other_variant) == (model, variant) and other_role != role and lang in ranks[other]:
                    add((other, lang), (run, searched))
    return tests


def counterpart(label: str, variant_labels: Mapping[str, str]) -> str | None:
    """The MT variant of an MMT variant's passes, by their labels (``MMT(f+b)`` -> the variant labelled
    ``MT(f+b)``); None for any other label or when no variant has that label."""
    if not label.startswith("MMT("):
        return None
    wanted = label.removeprefix("M")
    return next((name for name, other in variant_labels.items() if other == wanted), None)


@dataclass(frozen=True)
class Significance:
    """The report's tests, to mark cells with.

    Attributes:
        tests: ``{system ref: {baseline ref: test}}`` (:func:`run_tests`); empty: nothing was tested (no ranks).
        variant_labels: Variant name -> label (which MT variant an MMT one is marked against).
    """

    tests: Mapping[str, Mapping[str, Mapping[str, Any]]] = field(default_factory=dict)
    variant_labels: Mapping[str, str] = field(default_factory=dict)

    def test(self, system: str, baseline: str) -> Mapping[str, Any] | None:
        """The test of two test sets (refs), in either order (a test's p is the same both ways); None if not run."""
        found = self.tests.get(system, {}).get(baseline)
        return found if found is not None else self.tests.get(baseline, {}).get(system)

    def significant(self, system: str, baseline: str, statistic: str) -> bool:
        found = self.test(system, baseline)
        return found is not None and found[statistic]["p_value"] < ALPHA

    def baselines(self, run: str, key: str) -> dict[str, str]:
        """Mark -> the test set a cell of ``run``'s ``key`` is marked against: ``-`` of the same model and role,
        the MT counterpart of an MMT variant, and for a language's own queries the translate-search of the same
        model and variant in another role (whichever of them was tested)."""
        model, variant, role = split_run(run)
        found = {}
        if variant != BASELINE:
            found[MARKS["baseline"]] = ref(f"{model}-{BASELINE}-{role}", key)
        rival = counterpart(self.variant_labels.get(variant, variant), self.variant_labels)
        if rival is not None:
            found[MARKS["system"]] = ref(f"{model}-{rival}-{role}", key)
        for baseline in self.tests.get(ref(run, key), {}):
            if baseline.partition("/")[2] == f"{SEARCH_PREFIX}{key}":
                found[MARKS["search"]] = baseline
        return {mark: baseline for mark, baseline in found.items() if self.test(ref(run, key), baseline)}

    def marks(self, run: str, key: str, statistic: str) -> str:
        """The marks of one cell: each comparison of :meth:`baselines` significant at :data:`ALPHA` on
        ``statistic`` (``i2t_r1`` .. ``t2i_r10``, ``rsum``)."""
        return "".join(
            mark
            for mark, baseline in self.baselines(run, key).items()
            if self.significant(ref(run, key), baseline, statistic)
        )

    def legend(self, marks: Iterable[str] = tuple(MARKS.values())) -> str:
        """The line that says what the marks mean; empty when nothing was tested."""
        if not self.tests:
            return ""
        samples = sorted({int(test["samples"]) for tests in self.tests.values() for test in tests.values()})
        meaning = {
            MARKS["baseline"]: "against `-` (the same model and role, human captions alone)",
            MARKS["system"]: "MMT against MT of the same passes",
            MARKS["search"]: "the model searched in the queries' language against translate-search",
        }
        said = "; ".join(f"{mark} {meaning[mark]}" for mark in marks)
        return (
            f"Marks: a difference significant at p < {ALPHA:g} (two-sided paired bootstrap over the test images, "
            f"{' / '.join(map(str, samples))} resamples, each query's hits averaged over the run's seeds): {said}."
        )
