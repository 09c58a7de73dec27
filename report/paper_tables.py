"""The retrieval results in the layout of Huang et al. 2020's tables, as far as the runs present allow.

- Table 1 (one test language, e.g. role ``pivot_test``): per role and test set, a row per model and variant
  (``SAN``, ``MT(f) + SAN``, ``MMT(f) + SAN``, ... grouped by model), text-to-image then image-to-text R@1/5/10, and
  rsum.
- Table 4 (several test languages, e.g. role ``discard_human_targets``): per role, a row per model and variant, and
  R@1/5/10 of each language's two directions, the pivot's last (the paper: German-to-Image, Image-to-German,
  English-to-Image, Image-to-English).
- Table 5 (translate-search): per language whose queries a run translated into the pivot, per model the run that
  searched the translations (``SAN (pivot_only, translate-search)``) above the same model and variant of another role
  searched in the language itself, its R@1/5/10 both ways and rsum.

Each cell is the mean ± sample standard deviation over the run's seeds (their number in a column), with the marks of
the paired tests (:mod:`report.significance`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from report.runs import split_run
from report.tables import KS, Marks, ReportContext, language_heading, language_rows, languages_of

DIRECTIONS = (("t2i", "text→image"), ("i2t", "image→text"))


def method(model: str, label: str) -> str:
    """A row's name as the paper prints it: ``SAN`` for ``-``, else ``MMT(f) + SAN``."""
    name = model.upper()
    return name if label == "-" else f"{label} + {name}"


def paper_markdown(
    results: Mapping[str, Mapping[str, Any]], variant_labels: Mapping[str, str], context: ReportContext
) -> list[str]:
    """The tables of Tables 1, 4 and 5 the runs allow (none: no lines), under a heading of their own."""
    lines: list[str] = []
    for role, runs in _by_role(results).items():
        keys = languages_of(runs, context.pivot)
        plain = [key for key in keys if "-" not in key]
        if len(plain) == 1:
            for key in keys:
                lines += [
                    f"### Table 1 layout: role {role}, {language_heading(key)}",
                    "",
                    *table1(runs, key, variant_labels, context.marker(key)),
                    "",
                ]
        elif plain:
            ordered = sorted(plain, key=lambda lang: lang == context.pivot)  # the pivot's last, as the paper's
            lines += [f"### Table 4 layout: role {role}", "", *table4(runs, ordered, variant_labels, context), ""]
    for lang, pairs in _searches(results).items():
        lines += [
            f"### Table 5 layout: {lang} queries, the model trained with them against translate-search",
            "",
            *table5(results, lang, pairs, variant_labels, context.marker(lang)),
            "",
        ]
    if not lines:
        return []
    intro = (
        "The tables of Huang et al. 2020 that these runs fill: each cell is the mean ± sample standard deviation "
        "over the run's seeds (their number in the column `seeds`), R@K in percent."
    )
    return ["## In the paper's layout", "", intro, "", *lines]


def _by_role(results: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Mapping[str, Any]]]:
    roles: dict[str, dict[str, Mapping[str, Any]]] = {}
    for name, metrics in results.items():
        roles.setdefault(split_run(name)[2], {})[name] = metrics
    return roles


def _row_order(names: list[str], variant_labels: Mapping[str, str]) -> list[str]:
    """Models in order of first appearance (the params' order), then variants in the order of their labels."""
    models = list(dict.fromkeys(split_run(name)[0] for name in names))
    positions = {variant: index for index, variant in enumerate(variant_labels)}
    return sorted(
        names,
        key=lambda name: (
            models.index(split_run(name)[0]),
            positions.get(split_run(name)[1], len(positions)),
            split_run(name)[1],
        ),
    )


def _seeds(metrics: Mapping[str, Any]) -> str:
    return str(len(metrics.get("seeds", [0])))


def _cell(row: Mapping[str, Any], direction: str, k: int, marks: str) -> str:
    spread = row.get("std")
    mean = row[direction][f"r{k}"]
    text = f"{mean:.1f}" if not spread else f"{mean:.1f} ± {spread[direction][f'r{k}']:.1f}"
    return text + marks


def _rsum(row: Mapping[str, Any], marks: str) -> str:
    spread = row.get("std")
    return (f"{row['rsum']:.1f}" if not spread else f"{row['rsum']:.1f} ± {spread['rsum']:.1f}") + marks


def _recall_cells(row: Mapping[str, Any], run: str, marks: Marks | None) -> list[str]:
    return [
        _cell(row, direction, k, marks(run, f"{direction}_r{k}") if marks else "")
        for direction, _ in DIRECTIONS
        for k in KS
    ]


def _header(columns: list[str]) -> list[str]:
    return ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]


def _recall_columns(prefix: str = "") -> list[str]:
    return [f"{prefix}{label} R@{k}" for _, label in DIRECTIONS for k in KS]


def table1(
    runs: Mapping[str, Mapping[str, Any]], key: str, variant_labels: Mapping[str, str], marks: Marks | None
) -> list[str]:
    """Table 1's grid of one test set: a row per model and variant, R@1/5/10 both ways and rsum."""
    rows = language_rows(runs, key)
    lines = _header(["method", "seeds", *_recall_columns(), "rsum"])
    for name in _row_order(list(rows), variant_labels):
        model, variant, _ = split_run(name)
        row = rows[name]
        cells = [method(model, variant_labels.get(variant, variant)), _seeds(runs[name])]
        cells += [*_recall_cells(row, name, marks), _rsum(row, marks(name, "rsum") if marks else "")]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def table4(
    runs: Mapping[str, Mapping[str, Any]],
    languages: list[str],
    variant_labels: Mapping[str, str],
    context: ReportContext,
) -> list[str]:
    """Table 4's single row per model and variant: R@1/5/10 of both directions of each of ``languages``."""
    per_language = {lang: language_rows(runs, lang) for lang in languages}
    columns = [column for lang in languages for column in _recall_columns(f"{lang} ")]
    lines = _header(["method", "seeds", *columns])
    for name in _row_order(list(runs), variant_labels):
        model, variant, _ = split_run(name)
        cells = [method(model, variant_labels.get(variant, variant)), _seeds(runs[name])]
        for lang in languages:
            row = per_language[lang].get(name)
            cells += ["-"] * 6 if row is None else _recall_cells(row, name, context.marker(lang))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _searches(results: Mapping[str, Mapping[str, Any]]) -> dict[str, list[tuple[str, str]]]:
    """Query language -> (the run that searched its translations, the same model and variant of another role tested
    in the language), sorted by language."""
    found: dict[str, list[tuple[str, str]]] = {}
    for name, metrics in results.items():
        model, variant, role = split_run(name)
        for lang in sorted(metrics.get("translate_search", {})):
            for other, other_metrics in results.items():
                other_model, other_variant, other_role = split_run(other)
                same = (other_model, other_variant) == (model, variant)
                if same and other_role != role and lang in other_metrics:
                    found.setdefault(lang, []).append((name, other))
    return dict(sorted(found.items()))


def table5(
    results: Mapping[str, Mapping[str, Any]],
    lang: str,
    pairs: list[tuple[str, str]],
    variant_labels: Mapping[str, str],
    marks: Marks | None,
) -> list[str]:
    """Table 5: per pair, the translate-search run's row (``SAN (pivot_only, translate-search)``) above the run
    tested in ``lang`` itself (``MMT(f) + SAN (discard_human_targets)``)."""
    lines = _header(["method", "seeds", *_recall_columns(f"{lang} "), "rsum"])
    for searched, multilingual in pairs:
        model, _, role = split_run(searched)
        metrics = results[searched]
        spread = metrics.get("std", {}).get("translate_search", {}).get(lang)
        row = {**metrics["translate_search"][lang], **({"std": spread} if spread else {})}
        cells = [f"{model.upper()} ({role}, translate-search)", _seeds(metrics)]
        lines.append("| " + " | ".join([*cells, *_recall_cells(row, searched, None), _rsum(row, "")]) + " |")
        _, variant, other_role = split_run(multilingual)
        row = language_rows(results, lang)[multilingual]
        label = f"{method(model, variant_labels.get(variant, variant))} ({other_role})"
        cells = [label, _seeds(results[multilingual])]
        cells += [*_recall_cells(row, multilingual, marks), _rsum(row, marks(multilingual, "rsum") if marks else "")]
        lines.append("| " + " | ".join(cells) + " |")
    return lines
