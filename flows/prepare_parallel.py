"""Stage `prepare_parallel@<target>`: one language pair of the text-only parallel corpus (WMT style) that pre-trains
that pair's MMT, as a table (one stage per pair: adding a target language leaves the other pairs' tables alone),
streamed line by line into Parquet row groups so that a WMT-size corpus never sits in memory whole."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from prefect import flow, tags

from common.text_input import TextConfig
from corpora.wmt import ParallelConfig
from mmtr.params import Params
from mmtr.stage import named, run_stage, run_tags, stage_parser
from tasks import artifact_key
from tasks.data import prepare_parallel_pair, publish_counts


@flow(name="prepare_parallel", log_prints=True, persist_result=False)
def prepare_parallel(
    config: ParallelConfig, pivot: str, target: str, parallel: str, out: str, text: TextConfig
) -> list[dict[str, object]]:
    counts = prepare_parallel_pair(config, pivot, target, parallel, out, text)
    publish_counts(counts, key=artifact_key(f"prepare-parallel-{target}"), description="Parallel sentence pairs")
    return counts


def main(argv: Sequence[str] | None = None) -> None:
    parser = stage_parser("prepare_parallel", __doc__ or "")
    parser.add_argument("--parallel", required=True, help="text-only parallel corpus folder (paths.parallel)")
    parser.add_argument("--target", required=True, help="the target language of the pair (one of mmt.targets)")
    parser.add_argument("--out", required=True, help="output file (<paths.prepared>/parallel/<pivot>-<target>.parquet)")

    def body(args: argparse.Namespace, params: Params) -> None:
        pivot = params.languages.pivot
        with tags(*run_tags("prepare_parallel"), f"target:{args.target}"):
            named(prepare_parallel, args.params)(
                params.prepare.parallel, pivot, args.target, args.parallel, args.out, params.prepare.text
            )

    run_stage(parser, argv, body)


if __name__ == "__main__":
    main()
