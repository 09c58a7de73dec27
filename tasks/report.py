"""The Prefect task that writes the pipeline's report; what goes into it lives in :mod:`report`."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from common.errors import InputError
from common.files import read_json, write_json, write_text
from common.metrics_files import is_notes_file, read_metrics
from report.headline import headline
from report.html import results_html
from report.paper_tables import paper_markdown
from report.samples import differing_examples, examples_markdown
from report.significance import Significance, run_tests
from report.tables import (
    ReportContext,
    comparison_markdown,
    diversity_markdown,
    results_markdown,
    translation_markdown,
)
from retrieval.significance import ranks_path, read_ranks

COMPARISON_PREFIX = "mmt-vs-mt-"  # train_mmt's paired bootstrap files beside the systems' own metrics


@dataclass(frozen=True)
class ReportInputs:
    """The files a report is made from: the stages' metrics, and the captions and images it samples."""

    metrics_dir: str  # train_retrieval's metrics folder: <run>.json per retrieval run
    synthesized: tuple[str, ...]  # synthesize's caption files, <target>.parquet (missing ones are skipped)
    prepared: str  # the target corpus's prepared folder: its images and human captions tables
    images: str  # the target corpus's image folder (the sampled images)
    diversity: str  # augment's metrics file: token types and bigrams per variant
    round_trips: str  # synthesize's metrics folder: <target>.json, the round trips that changed their source
    translation: str  # train_mmt's metrics folder: <system>.json (test scores), mmt-vs-mt-<src>-<tgt>.json (bootstrap)
    images_outside_root: bool = False  # sampled image paths may lead out of `images` (prepare.images_outside_root)


@task(cache_policy=NO_CACHE, persist_result=False)
def write_report(
    inputs: ReportInputs,
    out_dir: str,
    *,
    samples: int,
    variant_labels: dict[str, str],
    context: ReportContext,
    key: str,
    runs: Sequence[str],
    significance: str,
) -> str:
    """``results.md`` and ``index.html`` from ``<run>.json`` in ``inputs.metrics_dir`` for each of ``runs`` that has
    one (the ``<model>-<variant>-<role>`` runs the params name: files of runs since dropped from them are left out),
    with the translation systems' ``<inputs.translation>/<system>.json`` and the paired bootstraps
    ``mmt-vs-mt-<src>-<tgt>.json`` beside them (train_mmt's), the caption diversity of ``inputs.diversity``
    (augment's metrics), ``<inputs.round_trips>/<target>.json`` (synthesize's), and per target language up to
    ``samples`` captions the two systems translated differently (``inputs.synthesized``: synthesize's caption files),
    all under a headline made from those numbers (:func:`report.headline.headline`); variants are shown by
    ``variant_labels`` (name -> label, in the order of the rows); the Markdown is also the artifact ``key``. The
    paired tests of the runs that have per-query ranks (``<run>.ranks.npz``, :func:`report.significance.run_tests`)
    go to the metrics file ``significance`` (``{}`` when none has) and mark the tables."""
    files = [Path(inputs.metrics_dir) / f"{run}.json" for run in runs]
    found = [path for path in files if path.is_file()]
    if not found:
        raise InputError(
            f"{inputs.metrics_dir}: no retrieval metrics files of the runs the params name (run the "
            f"train_retrieval stages first)"
        )
    if len(found) < len(files):  # a partial grid run by hand: table what is there, say what is not
        missing = [path.stem for path in files if not path.is_file()]
        get_run_logger().warning("No metrics yet for %d of %d runs: %s", len(missing), len(files), ", ".join(missing))
    results = {path.stem: read_metrics(path) for path in found}
    ranked = {path.stem: read_ranks(ranks_path(path)) for path in found if ranks_path(path).is_file()}
    if len(ranked) < len(found):
        unranked = [path.stem for path in found if path.stem not in ranked]
        get_run_logger().warning("No per-query ranks (not tested) for %s", ", ".join(unranked))
    tests = run_tests(ranked, variant_labels)
    write_json(significance, tests)
    context = dataclasses.replace(context, significance=Significance(tests, variant_labels))
    if not Path(inputs.diversity).is_file():
        raise InputError(f"{inputs.diversity}: no augment metrics file (run the augment stage first)")
    lexical = read_json(inputs.diversity)
    changes = {path.stem: read_json(path) for path in sorted(Path(inputs.round_trips).glob("*.json"))}
    systems, comparisons = read_translation(Path(inputs.translation))
    pivot = context.pivot
    synthesized = [Path(path) for path in inputs.synthesized]
    examples = differing_examples(
        synthesized, Path(inputs.prepared), Path(inputs.images), samples, outside_allowed=inputs.images_outside_root
    )
    sections = [
        *translation_markdown(systems, pivot),
        *comparison_markdown(comparisons, pivot),
        *diversity_markdown(lexical, changes, variant_labels),
    ]
    findings = headline(results, comparisons, variant_labels, context.origins, pivot, context.significance)
    paper = paper_markdown(results, variant_labels, context)
    markdown = "\n".join(
        [results_markdown(results, variant_labels, context, findings, paper), *sections, *examples_markdown(examples)]
    )
    page = results_html(results, examples, variant_labels, sections, context, findings)
    write_text(Path(out_dir) / "results.md", markdown)
    write_text(Path(out_dir) / "index.html", page)
    create_markdown_artifact(key=key, markdown=markdown, description="Retrieval results")
    return markdown


def read_translation(folder: Path) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """train_mmt's metrics in ``folder``: (system name -> its test scores, direction -> the paired bootstrap of the
    MMT against the text-only MT, from ``mmt-vs-mt-<direction>.json``); notes files joined to their numbers."""
    systems, comparisons = {}, {}
    for path in sorted(folder.glob("*.json")):
        if is_notes_file(path):
            continue
        if path.stem.startswith(COMPARISON_PREFIX):
            comparisons[path.stem.removeprefix(COMPARISON_PREFIX)] = read_metrics(path)
        else:
            systems[path.stem] = read_metrics(path)
    return systems, comparisons
