"""Stage `generate`: render the built-in synthetic dataset (images, captions, parallel text)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from prefect import flow, tags

from corpora.languages import Languages
from corpora.synthetic import GenerationSummary, SyntheticConfig
from mmtr.params import Params
from mmtr.stage import named, run_stage, run_tags, stage_parser
from tasks import artifact_key
from tasks.data import generate_synthetic_dataset, publish_counts


@flow(name="generate", log_prints=True, persist_result=False)
def generate(config: SyntheticConfig, out: str, seed: int, languages: Languages) -> GenerationSummary:
    summary = generate_synthetic_dataset(config, out, seed, languages)
    publish_counts(
        summary.as_rows(), key=artifact_key("generate-counts"), description="Synthetic dataset: counts per split"
    )
    return summary


def main(argv: Sequence[str] | None = None) -> None:
    parser = stage_parser("generate", __doc__ or "")
    parser.add_argument("--out", required=True, help="output folder (paths.synthetic)")

    def body(args: argparse.Namespace, params: Params) -> None:
        with tags(*run_tags("generate")):
            named(generate, args.params)(params.generate, args.out, params.seed, params.languages)

    run_stage(parser, argv, body)


if __name__ == "__main__":
    main()
