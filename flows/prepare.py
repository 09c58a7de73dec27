"""Stage `prepare`: canonical image, caption and parallel-text tables from the configured dataset."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from prefect import flow, tags

from flows.params import Languages, Params, PrepareParams
from flows.stage import run_stage, run_tags, stage_parser
from tasks.data import (
    count_captions,
    count_parallel,
    publish_counts,
    read_captioned_images,
    read_parallel_text,
    with_parallel,
    write_prepared_tables,
)


@flow(name="prepare", log_prints=True, persist_result=False)
def prepare(
    params: PrepareParams, languages: Languages, source: str, images: str, parallel: str, out: str
) -> list[dict[str, object]]:
    corpus = read_captioned_images(params, languages, source, images)
    corpus = with_parallel(corpus, read_parallel_text(params, languages, parallel))
    write_prepared_tables(corpus, out)
    counts = count_captions(corpus)
    publish_counts(counts, key="prepare-counts", description="Prepared captions per split and language")
    publish_counts(count_parallel(corpus), key="prepare-parallel", description="Parallel sentence pairs")
    return counts


def main(argv: Sequence[str] | None = None) -> None:
    parser = stage_parser("prepare", __doc__ or "")
    parser.add_argument("--source", required=True, help="dataset to read (paths.source)")
    parser.add_argument("--images", required=True, help="image folder (paths.images)")
    parser.add_argument("--parallel", required=True, help="text-only parallel corpus folder (paths.parallel)")
    parser.add_argument("--out", required=True, help="output folder (paths.prepared)")

    def body(args: argparse.Namespace, params: Params) -> None:
        with tags(*run_tags("prepare")):
            prepare(params.prepare, params.languages, args.source, args.images, args.parallel, args.out)

    run_stage(parser, argv, body)


if __name__ == "__main__":
    main()
