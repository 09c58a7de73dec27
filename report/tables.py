"""Paper-style results tables from the retrieval metrics files, as Markdown, and the translation and diversity tables.

Rows are model x variant x language role, columns R@1/5/10 of text->image and image->text per language, plus
rsum (like Tables 1-4 of Huang et al. 2020). Each extra evaluation set of the runs (``eval_sets.<name>`` of their
metrics) gets its own section after them, a table per language it was scored in; without such sets the report is as
it was. Variants are shown by the labels the caller passes (the paper's
notation, e.g. ``MMT(f+b)``), rows in the order of those labels; a run of a variant without a label shows its name,
after the labelled ones. :mod:`report.html` shows the same tables on a page.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from common.bootstrap import ALPHA
from report.runs import split_run
from report.significance import Significance

KS = (1, 5, 10)


def run_order(variant_labels: Mapping[str, str]) -> Callable[[str], tuple[str, int, str]]:
    """Sort key of run names: by model, then variant in the order of ``variant_labels`` (others last), then role."""
    positions = {variant: index for index, variant in enumerate(variant_labels)}

    def key(name: str) -> tuple[str, int, str]:
        model, variant, role = split_run(name)
        return model, positions.get(variant, len(positions)), role

    return key


def languages_of(results: Mapping[str, Mapping[str, Any]], pivot: str | None = None) -> list[str]:
    """The language keys of the metrics (``en``, ``en-folds``, ...), the pivot's first, then in order of appearance."""
    langs: list[str] = []
    for metrics in results.values():
        langs += [key for key, value in metrics.items() if isinstance(value, dict) and "t2i" in value]
    unique = list(dict.fromkeys(langs))
    return sorted(unique, key=lambda key: key.partition("-")[0] != pivot)  # stable: the pivot's keys first


@dataclass(frozen=True)
class ReportContext:
    """What the tables say around the numbers.

    Attributes:
        pivot: The pivot language: its tables come first.
        test_images: Images each test language is ranked against (``<lang>-folds``: one fold's), for the chance
            line under each table; absent keys get none.
        header: Lines under the title (the settings the tables depend on).
        origins: Variant name -> the system whose captions it adds (``mt``, ``mmt``; None: none), for the
            headline's comparison of the two systems' variants.
        significance: The paired tests of the runs (:mod:`report.significance`), whose outcomes mark the cells;
            None: no marks.
    """

    pivot: str | None = None
    test_images: Mapping[str, int] = field(default_factory=dict)
    header: Sequence[str] = ()
    origins: Mapping[str, str | None] = field(default_factory=dict)
    significance: Significance | None = None

    def marker(self, key: str) -> Marks | None:
        """The marks of the cells of test set ``key`` (run, statistic -> marks); None without tests."""
        tests = self.significance
        if tests is None or not tests.tests:
            return None
        return lambda run, statistic: tests.marks(run, key, statistic)

    def legends(self) -> list[str]:
        """The legend of the variants and roles, and of the marks when there are tests."""
        marks = self.significance.legend() if self.significance is not None else ""
        return [LEGEND, *(["", marks] if marks else [])]


Marks = Callable[[str, str], str]  # (run, statistic: i2t_r1 .. t2i_r10 or rsum) -> the marks of that cell


LEGEND = (
    "Variants: `-` the human captions alone; MT(f) / MMT(f) adds the target-language captions the text-only "
    "MT / the multimodal MMT translated from them (forward); (f+b) adds, in their place, those translated back "
    "into the pivot (paraphrases), (f+b+f) and (f+b+f+b) the third and fourth pass alone; (f)+(f+b) adds the first "
    "two passes together. Roles: which captions a run trains on and which languages "
    "it is tested on (docs/retrieval.md, language roles). mR = rsum / 6. Δ rsum: against the same model and role "
    "trained on `-` (human captions alone)."
)


def chance_line(images: int) -> str:
    """Text-to-image recall of a ranking that ignores the query: R@K = K / N."""
    recalls = ", ".join(f"R@{k} {min(100.0, 100.0 * k / images):.1f}" for k in KS)
    return f"Chance (text->image, {images} images): {recalls}."


def language_rows(results: Mapping[str, Mapping[str, Any]], lang: str) -> dict[str, dict[str, Any]]:
    """Run name -> the metrics of ``lang`` (its key ``std`` the replicates' standard deviations, when there are)."""
    rows = {}
    for name, metrics in results.items():
        if lang in metrics:
            spread = metrics.get("std", {}).get(lang)
            rows[name] = {**metrics[lang], **({"std": spread} if spread else {})}
    return rows


def results_markdown(
    results: Mapping[str, Mapping[str, Any]],
    variant_labels: Mapping[str, str],
    context: ReportContext = ReportContext(),
    headline: str = "",
    before_tables: Sequence[str] = (),
) -> str:
    """One table per language (the pivot's first; then per translate-search language), rows sorted by model,
    variant, role, each with its chance level and the marks of the paired tests; ``headline``, ``context.header``,
    the legends and the lines ``before_tables`` (the paper's layout, :mod:`report.paper_tables`) above them.

    Args:
        results: Run name (``<model>-<variant>-<role>``) -> its metrics.
        variant_labels: Variant name -> how the tables show it, in the order of their rows.
        context: The pivot, the test images per language and the header lines.
        headline: A paragraph under the title (:func:`report.headline.headline`); empty: none.
    """
    lines = [
        "# Retrieval results",
        "",
        *([headline, ""] if headline else []),
        *context.header,
        *([""] if context.header else []),
        "Test split, recall in percent (R@K), rsum = the six recalls summed; runs of several seeds show mean ± "
        "sample standard deviation.",
        "",
        *context.legends(),
        "",
        *before_tables,
    ]
    for lang in languages_of(results, context.pivot):
        rows = language_rows(results, lang)
        lines += [f"## {language_heading(lang)}", "", *run_table(rows, variant_labels, context.marker(lang)), ""]
        if lang in context.test_images:
            lines += [chance_line(context.test_images[lang]), ""]
    for lang, rows in translate_search_rows(results).items():
        lines += [f"## {search_heading(lang)}", "", *run_table(rows, variant_labels), ""]
    for eval_set in eval_set_tables(results, context.pivot):
        lines += [f"## {eval_set_heading(eval_set.name)}", "", eval_set.summary, ""]
        for lang, rows in eval_set.languages.items():
            lines += [f"### {language_heading(lang)}", "", *run_table(rows, variant_labels), ""]
            if not lang.endswith("-folds"):
                lines += [chance_line(eval_set.images), ""]
    return "\n".join(lines)


@dataclass(frozen=True)
class EvalSetTable:
    """One extra evaluation set's tables.

    Attributes:
        name: The set's name (``prepare.<format>.eval_sets``).
        images: Its images (the chance level's N).
        summary: A line on its images, the protocol applied and the test languages it lacks.
        languages: Language key (``en``, ``en-folds``) -> run name -> metrics (with ``std`` over replicates).
    """

    name: str
    images: int
    summary: str
    languages: dict[str, dict[str, dict[str, Any]]]


def eval_set_tables(results: Mapping[str, Mapping[str, Any]], pivot: str | None = None) -> list[EvalSetTable]:
    """The extra evaluation sets of the runs' metrics (``eval_sets.<name>``), in order of appearance, each with its
    languages (the pivot's first) and per language every run scored on it."""
    per_set: dict[str, dict[str, dict[str, Any]]] = {}
    for run, metrics in results.items():
        spreads = metrics.get("std", {}).get("eval_sets", {})
        for name, scored in metrics.get("eval_sets", {}).items():
            per_set.setdefault(name, {})[run] = {**scored, **({"std": spreads[name]} if name in spreads else {})}
    tables = []
    for name, runs in per_set.items():
        first = next(iter(runs.values()))
        images = int(first["images"])
        absent = sorted({lang for scored in runs.values() for lang in scored.get("absent", [])})
        summary = f"{images} images, protocol {first['protocol']}" + (
            f"; no captions of {', '.join(absent)} (not scored)." if absent else "."
        )
        languages = {lang: language_rows(runs, lang) for lang in languages_of(runs, pivot)}
        tables.append(EvalSetTable(name, images, summary, languages))
    return tables


def eval_set_heading(name: str) -> str:
    """The heading of the evaluation set ``name``'s section."""
    return f"Evaluation set {name}"


def translate_search_rows(results: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """Table 5 of the paper: query language -> run name -> the metrics of that language's queries translated into the
    pivot and searched with the run's model (with their ``std`` over replicates, when there are), languages sorted."""
    searched = {
        name: {**m["translate_search"], **({"std": m["std"]["translate_search"]} if "std" in m else {})}
        for name, m in results.items()
        if "translate_search" in m
    }
    langs = sorted({lang for per_lang in searched.values() for lang in per_lang if lang != "std"})
    return {lang: language_rows(searched, lang) for lang in langs}


def search_heading(lang: str) -> str:
    """The heading of the table of ``lang`` queries translated into the pivot."""
    return f"translate-search: {lang} queries translated to the pivot (Table 5)"


def diversity_markdown(
    diversity: Mapping[str, Mapping[str, Any]],
    round_trips: Mapping[str, Mapping[str, Mapping[str, Any]]],
    variant_labels: Mapping[str, str],
) -> list[str]:
    """Section 4.3's measures: distinct tokens and bigrams per variant and language (train split), and per target
    language, system and hop the share of round-trip captions that differ from their source.

    Args:
        diversity: ``augment``'s metrics: variant -> {"token_types": {lang: n}, "bigrams": {lang: n}}.
        round_trips: Target language -> ``synthesize``'s metrics: system -> hop -> {"captions", "changed",
            "token_types", "new_types"} (the last two absent in metrics from before they were recorded).
        variant_labels: Variant name -> how the tables show it, in the order of their rows.
    """
    lines: list[str] = []
    if diversity:
        order = {name: index for index, name in enumerate(variant_labels)}
        lines += [
            "## Caption diversity (train split)",
            "",
            "| variant | language | token types | bigrams |",
            "|---|---|---|---|",
        ]
        for variant in sorted(diversity, key=lambda name: (order.get(name, len(order)), name)):
            counts = diversity[variant]
            for lang in sorted(counts["token_types"]):
                label = variant_labels.get(variant, variant)
                lines.append(f"| {label} | {lang} | {counts['token_types'][lang]} | {counts['bigrams'][lang]} |")
        lines.append("")
    rows = [
        (target, system, hop, numbers)
        for target, systems in sorted(round_trips.items())
        for system, hops in sorted(systems.items())
        for hop, numbers in sorted(hops.items())
    ]
    if rows:
        lines += [
            "## Round trips that changed their source",
            "",
            "| target | system | hop | captions | changed (%) | token types | new token types |",
            "|---|---|---|---|---|---|---|",
        ]
        for target, system, hop, numbers in rows:
            lines.append(
                f"| {target} | {system} | {hop.removeprefix('hop')} | {numbers['captions']} | "
                f"{100 * numbers['changed']:.1f} | {numbers.get('token_types', '-')} | "
                f"{numbers.get('new_types', '-')} |"
            )
        lines.append("")
    return lines


SYSTEM_NAMES = {"mt": "MT", "mmt": "MMT"}  # train_mmt's system folders <system>-<src>-<tgt>, as the tables name them
# a translation table's columns: heading -> the value of one system's metrics (None: not recorded or not applicable)
_TRANSLATION_COLUMNS: dict[str, Callable[[Mapping[str, Any]], float | None]] = {
    "BLEU": lambda m: m["bleu"],
    "chrF": lambda m: m["chrf"],
    "METEOR": lambda m: m.get("meteor"),
    "image awareness": lambda m: m.get("image_awareness"),
    "image-dependent words (%)": lambda m: _scaled(m.get("image_dependent"), "word_accuracy", 100),
    "BLEU, sentences with them": lambda m: _scaled(m.get("image_dependent"), "bleu", 1),
    "contrastive (%)": lambda m: _scaled(m.get("contrastive"), "accuracy", 100),
}


def _scaled(measure: Any, key: str, factor: float) -> float | None:
    """``factor`` x ``measure[key]``; None where the measure holds a note (not measured) or is absent (older files)."""
    return factor * measure[key] if isinstance(measure, dict) else None


def direction_order(pivot: str | None) -> Callable[[str], tuple[bool, str]]:
    """Sort key of directions ``<src>-<tgt>``: those from the pivot first, then by name."""
    return lambda direction: (not direction.startswith(f"{pivot}-"), direction)


def arrow(direction: str) -> str:
    """``en-de`` -> ``en→de``."""
    return direction.replace("-", "→")


def signed(value: float) -> str:
    """A difference with its sign, one decimal; ``0.0`` when it rounds to nothing."""
    text = f"{value:+.1f}"
    return "0.0" if text in ("+0.0", "-0.0") else text


def p_value(value: float) -> str:
    """``p = 0.397``; ``p < 0.001`` below what three decimals show."""
    return "p < 0.001" if value < 0.001 else f"p = {value:.3f}"


def translation_markdown(translation: Mapping[str, Mapping[str, Any]], pivot: str | None = None) -> list[str]:
    """The translation systems' test scores, the text-only MT and the MMT of each direction in adjacent rows and
    a row of their difference under them: BLEU (lowercased, tokenised), chrF, METEOR 1.5 (``-`` where it could not
    run; the metrics file says why, and which modules ran), the MMT's image awareness and, where the corpus records
    them, the image-dependent words found, BLEU on the sentences that have such words, and the contrastive accuracy
    (a text-only system scores 50). ``-`` where a value does not apply or was not recorded.

    Args:
        translation: System folder name (``mmt-en-de``: ``<system>-<src>-<tgt>``) -> its ``train_mmt`` metrics.
        pivot: The pivot language: the directions from it come first.

    Raises:
        ValueError: a system name that is not ``<system>-<src>-<tgt>``.
    """
    if not translation:
        return []
    directions: dict[str, dict[str, Mapping[str, Any]]] = {}
    for name, metrics in translation.items():
        parts = name.split("-")
        if len(parts) != 3:
            raise ValueError(f"{name!r} is not a translation system name <system>-<src>-<tgt>")
        directions.setdefault(f"{parts[1]}-{parts[2]}", {})[parts[0]] = metrics
    header = ["direction", "system", *_TRANSLATION_COLUMNS]
    lines = [
        "## Translation (test captions)",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    order = {system: index for index, system in enumerate(SYSTEM_NAMES)}
    for direction in sorted(directions, key=direction_order(pivot)):
        systems = directions[direction]
        for system in sorted(systems, key=lambda name: (order.get(name, len(order)), name)):
            values = [_cell(column(systems[system])) for column in _TRANSLATION_COLUMNS.values()]
            lines.append(f"| {arrow(direction)} | {SYSTEM_NAMES.get(system, system)} | " + " | ".join(values) + " |")
        if set(SYSTEM_NAMES) <= set(systems):
            differences = [
                _difference(column(systems["mmt"]), column(systems["mt"])) for column in _TRANSLATION_COLUMNS.values()
            ]
            lines.append(f"| {arrow(direction)} | Δ MMT − MT | " + " | ".join(differences) + " |")
    lines.append("")
    return lines


def _difference(mmt: float | None, mt: float | None) -> str:
    return "-" if mmt is None or mt is None else signed(mmt - mt)


def comparison_markdown(comparisons: Mapping[str, Mapping[str, Any]], pivot: str | None = None) -> list[str]:
    """train_mmt's paired bootstrap of BLEU, the MMT against the text-only MT, a row per direction (from the pivot
    first): both systems' BLEU, the difference, the p-value and the verdict at :data:`ALPHA`, and the MMT's BLEU
    over the resamples (mean ± the 95% confidence interval's half-width); then the sacreBLEU signature(s).

    Args:
        comparisons: Direction (``en-de``) -> its ``mmt-vs-mt-<direction>`` file: ``baseline`` (the MT's BLEU),
            ``system`` (the MMT's), ``delta``, ``p_value``, ``mean``, ``ci``, ``samples`` and ``signature`` (the
            last absent from files without their notes).
        pivot: The pivot language.
    """
    if not comparisons:
        return []
    ordered = sorted(comparisons, key=direction_order(pivot))
    resamples = sorted({int(comparisons[direction]["samples"]) for direction in ordered})
    lines = [
        "## The MMT against the text-only MT (paired bootstrap of BLEU)",
        "",
        f"Test captions resampled {' / '.join(map(str, resamples))} times with both systems' translations paired: p "
        "is the share of resamples where chance alone gives a difference as large, were the systems equal; "
        f"significant: p < {ALPHA:g}.",
        "",
        f"| direction | MT BLEU | MMT BLEU | Δ BLEU | p | significant (p < {ALPHA:g}) | "
        "MMT BLEU, bootstrap mean ± 95% CI |",
        "|---|---|---|---|---|---|---|",
    ]
    for direction in ordered:
        row = comparisons[direction]
        p = p_value(row["p_value"]).removeprefix("p = ").removeprefix("p ")
        lines.append(
            f"| {arrow(direction)} | {row['baseline']:.1f} | {row['system']:.1f} | {signed(row['delta'])} | {p} | "
            f"{'yes' if row['p_value'] < ALPHA else 'no'} | {row['mean']:.1f} ± {row['ci']:.1f} |"
        )
    signatures = sorted({str(comparisons[d]["signature"]) for d in ordered if "signature" in comparisons[d]})
    lines.append("")
    for signature in signatures:
        lines += [f"sacreBLEU signature: `{signature}`", ""]
    return lines


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _with_std(mean: float, std: float | None, marks: str = "") -> str:
    return (f"{mean:.1f}" if std is None else f"{mean:.1f} ± {std:.1f}") + marks


def language_heading(key: str) -> str:
    """``en`` -> ``en``; ``en-folds`` (the ``both`` protocol) -> ``en, mean over test folds``."""
    lang, _, folds = key.partition("-")
    return f"{lang}, mean over test folds" if folds == "folds" else key


def run_table(
    rows: Mapping[str, Mapping[str, Any]], variant_labels: Mapping[str, str], marks: Marks | None = None
) -> list[str]:
    """The Markdown lines of one table: a row per run (in :func:`run_order`) with its recalls and rsum (mean ± std
    over replicates where there are, and the ``marks`` of the paired tests), mR, and its rsum against the same model
    and role trained on ``none``."""
    header = [
        "model",
        "variant",
        "role",
        *[f"t2i R@{k}" for k in KS],
        *[f"i2t R@{k}" for k in KS],
        "rsum",
        "mR",
        "Δ rsum",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name in sorted(rows, key=run_order(variant_labels)):
        metrics = rows[name]
        model, variant, role = split_run(name)
        cells = [model, variant_labels.get(variant, variant), role]
        spread = metrics.get("std")
        cells += [
            _with_std(
                metrics[direction][f"r{k}"],
                spread[direction][f"r{k}"] if spread else None,
                marks(name, f"{direction}_r{k}") if marks else "",
            )
            for direction in ("t2i", "i2t")
            for k in KS
        ]
        cells.append(
            _with_std(metrics["rsum"], spread["rsum"] if spread else None, marks(name, "rsum") if marks else "")
        )
        cells.append(f"{metrics['rsum'] / 6:.1f}")
        baseline = rows.get(f"{model}-none-{role}")
        cells.append("-" if baseline is None or variant == "none" else f"{metrics['rsum'] - baseline['rsum']:+.1f}")
        lines.append("| " + " | ".join(cells) + " |")
    return lines
