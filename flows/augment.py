"""Stage `augment`: the caption variants named in `retrieval.variants` (presets or `augment.custom_variants`) and
their lexical diversity: token types and distinct bigrams per language of the train split (section 4.3)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from prefect import flow, get_run_logger, tags
from prefect.artifacts import create_table_artifact

from corpora.io import atomic_dir, write_text
from corpora.prepared import read_prepared
from corpora.tables import write_captions
from flows.params import Params
from flows.stage import named, run_stage, run_tags, stage_parser
from mmt.augment import Variant, build_variant
from mmt.diversity import lexical_diversity
from tasks import artifact_key


@flow(name="augment", log_prints=True, persist_result=False)
def augment(
    variants: dict[str, Variant], prepared: str, synthesized: list[str], out: str, metrics: str
) -> dict[str, object]:
    corpus = read_prepared(prepared)
    extra = pa.concat_tables([pq.read_table(path) for path in synthesized])
    report: dict[str, object] = {}
    rows: list[dict[str, object]] = []
    for name, variant in variants.items():
        captions = build_variant(corpus.captions, extra, variant)
        write_captions(captions, Path(out) / name / "captions.parquet", images=corpus.images)
        diversity = lexical_diversity(captions)
        report[name] = {
            "captions": captions.num_rows,
            "token_types": {lang: counts["token_types"] for lang, counts in diversity.items()},
            "bigrams": {lang: counts["bigrams"] for lang, counts in diversity.items()},
        }
        rows += [{"variant": name, "lang": lang, **counts} for lang, counts in diversity.items()]
    write_text(metrics, json.dumps(report, indent=2, sort_keys=True) + "\n")
    description = "Train split: distinct tokens and bigrams per variant and language"
    create_table_artifact(key=artifact_key("augment-diversity"), table=rows, description=description)
    get_run_logger().info("Lexical diversity (train split): %s", json.dumps(report))
    return report


def main(argv: Sequence[str] | None = None) -> None:
    parser = stage_parser("augment", __doc__ or "")
    for name in ("prepared", "synthesized", "out", "metrics"):
        parser.add_argument(f"--{name}", required=True)

    def body(args: argparse.Namespace, params: Params) -> None:
        files = [str(Path(args.synthesized) / f"{target}.parquet") for target in params.mmt.targets]
        # presets first, then custom variants (params checked that each name in retrieval.variants is one of them)
        variants = {
            name: variant for name, variant in params.augment.variants.items() if name in params.retrieval.variants
        }
        with tags(*run_tags("augment")), atomic_dir(args.out) as out:  # every variant, or none (a killed run)
            named(augment, args.params)(variants, args.prepared, files, str(out), args.metrics)

    run_stage(parser, argv, body)


if __name__ == "__main__":
    main()
