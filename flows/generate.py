"""Stage `generate`: render the built-in synthetic dataset (images, captions, parallel text)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from prefect import flow, tags

from corpora.synthetic import GenerationSummary, SyntheticConfig
from flows.params import Params
from flows.stage import run_stage, run_tags, stage_parser
from tasks.data import generate_synthetic_dataset, publish_counts


def synthetic_config(params: Params) -> SyntheticConfig:
    """The generator's config from the `generate` section, the seed and the language list."""
    section = params.generate
    return SyntheticConfig(
        seed=params.seed,
        languages=params.languages.all,
        pivot=params.languages.pivot,
        image_size=section.image_size,
        train_images=section.splits.train,
        val_images=section.splits.val,
        test_images=section.splits.test,
        min_objects=section.objects_per_image.min,
        max_objects=section.objects_per_image.max,
        comparable_per_image=section.comparable_per_image,
        parallel_train_pairs=section.parallel_pairs.train,
        parallel_val_pairs=section.parallel_pairs.val,
        parallel_test_pairs=section.parallel_pairs.test,
    )


@flow(name="generate", log_prints=True, persist_result=False)
def generate(config: SyntheticConfig, out: str) -> GenerationSummary:
    summary = generate_synthetic_dataset(config, out)
    publish_counts(summary.as_rows(), key="generate-counts", description="Synthetic dataset: counts per split")
    return summary


def main(argv: Sequence[str] | None = None) -> None:
    parser = stage_parser("generate", __doc__ or "")
    parser.add_argument("--out", required=True, help="output folder (paths.synthetic)")

    def body(args: argparse.Namespace, params: Params) -> None:
        with tags(*run_tags("generate")):
            generate(synthetic_config(params), args.out)

    run_stage(parser, argv, body)


if __name__ == "__main__":
    main()
