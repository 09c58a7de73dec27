"""Stage `prepare`: canonical image, caption and parallel-text tables from the configured dataset."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Sequence

from prefect import flow, tags

from corpora.adapters import PrepareConfig
from corpora.languages import Languages
from corpora.prepared import count_captions, count_parallel
from flows.params import Params
from flows.stage import run_stage, run_tags, stage_parser
from tasks.data import publish_counts, read_captioned_images, read_parallel_text, write_prepared_tables


@flow(name="prepare", log_prints=True, persist_result=False)
def prepare(
    config: PrepareConfig, languages: Languages, source: str, images: str, parallel: str, out: str
) -> list[dict[str, object]]:
    image_root = images if config.read_image_sizes else None
    corpus = read_captioned_images(config.format, config.adapter_config, source, image_root, languages, config.dataset)
    corpus = dataclasses.replace(corpus, parallel=read_parallel_text(config.parallel, languages, parallel))
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
