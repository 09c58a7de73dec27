"""The Prefect task that writes the pipeline's report; what goes into it lives in :mod:`report`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from common.errors import InputError
from common.files import read_json, write_text
from common.metrics_files import is_notes_file, read_metrics
from report.html import results_html
from report.samples import sample_captions
from report.tables import ReportContext, diversity_markdown, results_markdown, translation_markdown


@dataclass(frozen=True)
class ReportInputs:
    """The files a report is made from: the stages' metrics, and the captions and images it samples."""

    metrics_dir: str  # train_retrieval's metrics folder: <run>.json per retrieval run
    synthesized: tuple[str, ...]  # synthesize's caption files, <target>.parquet (missing ones are skipped)
    prepared: str  # the target corpus's prepared folder: its images and human captions tables
    images: str  # the target corpus's image folder (the sampled images)
    diversity: str  # augment's metrics file: token types and bigrams per variant
    round_trips: str  # synthesize's metrics folder: <target>.json, the round trips that changed their source
    translation: str  # train_mmt's metrics folder: <system>.json, the translation systems' test scores


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
) -> str:
    """``results.md`` and ``index.html`` from ``<run>.json`` in ``inputs.metrics_dir`` for each of ``runs`` that has
    one (the ``<model>-<variant>-<role>`` runs the params name: files of runs since dropped from them are left out),
    with the caption diversity of ``inputs.diversity`` (augment's metrics), ``<inputs.round_trips>/<target>.json``
    (synthesize's) and the translation systems' ``<inputs.translation>/<system>.json`` (train_mmt's), and
    ``samples`` train images with a human caption and what each system synthesized from it (``inputs.synthesized``:
    synthesize's caption files); variants are shown by ``variant_labels`` (name -> label, in the order of the rows);
    the Markdown is also the artifact ``key``."""
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
    if not Path(inputs.diversity).is_file():
        raise InputError(f"{inputs.diversity}: no augment metrics file (run the augment stage first)")
    lexical = read_json(inputs.diversity)
    changes = {path.stem: read_json(path) for path in sorted(Path(inputs.round_trips).glob("*.json"))}
    # beside the systems' files lie train_mmt's mmt-vs-mt comparisons, which score no system of their own
    scored = [
        path
        for path in sorted(Path(inputs.translation).glob("*.json"))
        if not path.stem.startswith("mmt-vs-mt-") and not is_notes_file(path)
    ]
    systems = {path.stem: read_metrics(path) for path in scored}
    sections = [*translation_markdown(systems), *diversity_markdown(lexical, changes, variant_labels)]
    markdown = "\n".join([results_markdown(results, variant_labels, context), *sections])
    synthesized = [Path(path) for path in inputs.synthesized]
    pages = sample_captions(synthesized, Path(inputs.prepared), Path(inputs.images), samples)
    write_text(Path(out_dir) / "results.md", markdown)
    write_text(Path(out_dir) / "index.html", results_html(results, pages, variant_labels, sections, context))
    create_markdown_artifact(key=key, markdown=markdown, description="Retrieval results")
    return markdown
