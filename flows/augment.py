"""Stage `augment`: the caption variants named in `retrieval.variants` (presets or `augment.custom_variants`), and
the lexical diversity of those and of every preset the synthesized captions make (section 4.3: token types and
distinct bigrams per language of the train split), so that the report compares MMT(f+b) with `-` whether or not
retrieval trains on it."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from prefect import flow, get_run_logger, tags
from prefect.artifacts import create_table_artifact

from common.files import atomic_dir, write_text
from corpora.prepared import read_prepared, write_caption_variant
from mmt.augment import VARIANTS, Variant, build_variant
from mmt.diversity import lexical_diversity
from mmtr.params import Params
from mmtr.stage import named, run_stage, run_tags, stage_parser
from tasks import artifact_key


@flow(name="augment", log_prints=True, persist_result=False)
def augment(
    variants: dict[str, Variant],
    prepared: str,
    synthesized: list[str],
    out: str,
    metrics: str,
    written: list[str],
    languages: list[str],
    pivot: str,
) -> dict[str, object]:
    """Measure every variant of ``variants``; write the captions of those named in ``written``, one file per
    language (every language a variant holds, and each of ``languages``: the ones retrieval reads)."""
    corpus = read_prepared(prepared)
    extra = pa.concat_tables([pq.read_table(path) for path in synthesized])
    report: dict[str, object] = {}
    rows: list[dict[str, object]] = []
    with atomic_dir(out) as staged:  # every variant, or none (a killed run)
        for name, variant in variants.items():
            captions = build_variant(corpus.captions, extra, variant, pivot=pivot)
            if name in written:
                write_caption_variant(captions, staged / name, languages=languages, images=corpus.images)
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
    logger = get_run_logger()
    for row in rows:
        logger.info(
            "%s %s: %d token types, %d bigrams (train split)",
            row["variant"],
            row["lang"],
            row["token_types"],
            row["bigrams"],
        )
    return report


def main(argv: Sequence[str] | None = None) -> None:
    parser = stage_parser("augment", __doc__ or "")
    for name in ("prepared", "synthesized", "out", "metrics"):
        parser.add_argument(f"--{name}", required=True)

    def body(args: argparse.Namespace, params: Params) -> None:
        files = [str(Path(args.synthesized) / f"{target}.parquet") for target in params.mmt.targets]
        written = list(params.retrieval.variants)
        with tags(*run_tags("augment")):
            named(augment, args.params)(
                measured_variants(params),
                args.prepared,
                files,
                args.out,
                args.metrics,
                written,
                list(params.retrieval.caption_languages()),
                params.languages.pivot,
            )

    run_stage(parser, argv, body)


def measured_variants(params: Params) -> dict[str, Variant]:
    """The variants whose diversity `augment` measures: those of ``retrieval.variants`` and every preset whose
    captions the synthesis makes (its system among ``mmt.systems``, its hops within ``synthesis.hops``, and
    ``synthesis.to_pivot`` set where it adds translations into the pivot); presets first, in their order, then
    custom variants (params checked that each name in retrieval.variants is one)."""
    made = bool(params.mmt.targets)
    return {
        name: variant
        for name, variant in params.augment.variants.items()
        if name in params.retrieval.variants
        or (
            name in VARIANTS
            and (variant.origin is None or (made and variant.origin in params.mmt.systems))
            and variant.hops <= params.synthesis.hops
            and (params.synthesis.to_pivot or not variant.to_pivot)
        )
    }


if __name__ == "__main__":
    main()
