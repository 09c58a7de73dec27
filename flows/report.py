"""Stage `report`: a headline and paper-style tables of every retrieval run (results.md), and a page with plots
and examples (index.html); the paired tests of the runs' per-query ranks in a metrics file (`--significance`).

The headline says which caption variant wins per model, role and language and whether the MMT beats the text-only
MT (report/headline.py). Rows are model x variant x role, columns R@K per direction and language (and
translate-search), from the metrics files the `train_retrieval@<model>-<variant>-<role>` stages wrote, then the
translation systems' test scores and their paired bootstrap (`train_mmt`'s metrics), caption diversity, round trips
and captions the two systems translated differently; `index.html` adds an rsum chart per table and the examples'
images.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from prefect import flow, tags

from common.files import atomic_dir
from corpora.tables import read_images
from mmtr.params import Params
from mmtr.stage import named, run_stage, run_tags, stage_parser
from report.tables import ReportContext
from tasks import artifact_key
from tasks.report import ReportInputs, write_report

SAMPLES = 6  # examples per target language: captions the MT and the MMT translated differently


@flow(name="report", log_prints=True, persist_result=False)
def report(
    inputs: ReportInputs,
    out: str,
    variant_labels: dict[str, str],
    context: ReportContext,
    runs: list[str],
    significance: str,
) -> str:
    key = artifact_key("retrieval-results")
    with atomic_dir(out) as staged:  # both pages, or neither
        markdown = write_report(
            inputs,
            str(staged),
            samples=SAMPLES,
            variant_labels=variant_labels,
            context=context,
            key=key,
            runs=runs,
            significance=significance,
        )
    print(markdown)
    return markdown


def report_context(params: Params, prepared: str) -> ReportContext:
    """The pivot, the images each test language is ranked against, and a header with the settings the tables depend
    on. No commit or date: the report is a DVC output, whose version is the commit of the dvc.lock that records it,
    and the same inputs must give the same bytes."""
    retrieval = params.retrieval
    splits = read_images(Path(prepared) / "images.parquet").column("split").to_pylist()
    test = [split for split in splits if split == "test"]
    folds = min(retrieval.evaluation.fold_images, len(test))
    test_images = {lang: len(test) for lang in retrieval.languages}
    test_images |= {f"{lang}-folds": folds for lang in retrieval.languages}
    header = [
        f"Models {', '.join(retrieval.models)}; variants {', '.join(retrieval.variants)}; roles "
        f"{', '.join(retrieval.roles)}; {retrieval.train.epochs} epochs, batch {retrieval.train.batch_size}, "
        f"lr {retrieval.train.lr:g}; {retrieval.replicates} seed(s) from {params.seed}; evaluation protocol "
        f"{retrieval.evaluation.protocol}.",
    ]
    origins = {name: variant.origin for name, variant in params.augment.variants.items()}
    return ReportContext(pivot=params.languages.pivot, test_images=test_images, header=tuple(header), origins=origins)


def main(argv: Sequence[str] | None = None) -> None:
    parser = stage_parser("report", __doc__ or "")
    for name in ("metrics", "prepared", "out"):
        parser.add_argument(f"--{name}", required=True)
    parser.add_argument("--synthesized", required=True, help="synthesize's captions folder (<target>.parquet files)")
    parser.add_argument("--corpus", required=True, help="the target corpus (corpus_roles.target): its images")
    parser.add_argument("--diversity", required=True, help="augment's metrics file (token types, bigrams)")
    parser.add_argument("--round_trips", required=True, help="synthesize's metrics folder (<paths.metrics>/synthesis)")
    parser.add_argument("--translation", required=True, help="train_mmt's metrics folder (<paths.metrics>/mmt)")
    parser.add_argument("--significance", required=True, help="the paired tests' metrics file it writes")

    def body(args: argparse.Namespace, params: Params) -> None:
        images = params.corpus(args.corpus).images
        # the paper's notation, e.g. MMT(f+b), for presets then custom variants (the order of the rows)
        labels = params.augment.variant_labels()
        context = report_context(params, args.prepared)
        synthesized = tuple(str(Path(args.synthesized) / f"{target}.parquet") for target in params.mmt.targets)
        inputs = ReportInputs(
            metrics_dir=args.metrics,
            synthesized=synthesized,
            prepared=args.prepared,
            images=images,
            diversity=args.diversity,
            round_trips=args.round_trips,
            translation=args.translation,
            images_outside_root=params.prepare.images_outside_root,
        )
        with tags(*run_tags("report")):
            runs = params.retrieval.run_names()
            named(report, args.params)(inputs, args.out, labels, context, runs, args.significance)

    run_stage(parser, argv, body)


if __name__ == "__main__":
    main()
