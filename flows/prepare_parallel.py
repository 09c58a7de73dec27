"""Stage `prepare_parallel`: the text-only parallel corpus (WMT style) that pre-trains the MMT, as tables."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from prefect import flow, tags

from corpora.languages import Languages
from corpora.prepared import count_parallel
from corpora.wmt import ParallelConfig
from mmtr.params import Params
from mmtr.stage import named, run_stage, run_tags, stage_parser
from tasks import artifact_key
from tasks.data import publish_counts, read_parallel_text, write_parallel_text


@flow(name="prepare_parallel", log_prints=True, persist_result=False)
def prepare_parallel(config: ParallelConfig, languages: Languages, parallel: str, out: str) -> list[dict[str, object]]:
    tables = read_parallel_text(config, languages, parallel)
    write_parallel_text(tables, out)
    counts = count_parallel(tables)
    publish_counts(counts, key=artifact_key("prepare-parallel"), description="Parallel sentence pairs")
    return counts


def main(argv: Sequence[str] | None = None) -> None:
    parser = stage_parser("prepare_parallel", __doc__ or "")
    parser.add_argument("--parallel", required=True, help="text-only parallel corpus folder (paths.parallel)")
    parser.add_argument("--out", required=True, help="output folder (<paths.prepared>/parallel)")

    def body(args: argparse.Namespace, params: Params) -> None:
        with tags(*run_tags("prepare_parallel")):
            named(prepare_parallel, args.params)(params.prepare.parallel, params.languages, args.parallel, args.out)

    run_stage(parser, argv, body)


if __name__ == "__main__":
    main()
