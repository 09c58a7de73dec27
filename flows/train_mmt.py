"""Stage `train_mmt@<target>`: the pivot->target and target->pivot systems of one language pair.

For each direction: subword vocabularies; text-only pre-training on the parallel corpus (`pretrain.pt`);
multimodal fine-tuning with region features on the translation captions (`mmt-<src>-<tgt>/finetune.pt`);
the text-only MT system fine-tuned on the same captions without images (`mt-<src>-<tgt>/finetune.pt`);
BLEU/chrF of both on the test captions.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from prefect import flow, tags
from prefect.artifacts import create_table_artifact

from corpora.prepared import read_prepared
from features.store import FeatureStore
from flows.params import MMTParams, Params
from flows.stage import run_stage, run_tags, stage_parser
from tasks.mmt import (
    Runtime,
    build_marian,
    direction_data,
    evaluate_system,
    finetune,
    pretrain,
    train_text_pipeline,
)
from tasks.runtime import device_name


@flow(name="train_mmt", log_prints=True, persist_result=False)
def train_mmt(
    params: MMTParams, pivot: str, target: str, prepared: str, store: str, models: str, mt_models: str,
    metrics: str, seed: int, runtime: Runtime,
) -> list[dict[str, object]]:  # fmt: skip
    region_dim = FeatureStore.open(store).dim
    corpus = read_prepared(prepared)  # once for both directions
    rows: list[dict[str, object]] = []
    for src, tgt in ((pivot, target), (target, pivot)):
        data = direction_data(corpus, pivot=pivot, target=target, src=src, tgt=tgt)
        mmt_dir, mt_dir = Path(models) / f"mmt-{src}-{tgt}", Path(models) / f"mt-{src}-{tgt}"
        text_dirs = [str(mmt_dir)] if params.mt_system == "marian" else [str(mmt_dir), str(mt_dir)]
        train_text_pipeline(data, params, src=src, tgt=tgt, out_dirs=text_dirs, seed=seed)
        pretrain(data, params, model_dir=str(mmt_dir), region_dim=region_dim, seed=seed, runtime=runtime)
        finetune(data, params, pretrained=str(mmt_dir / "pretrain.pt"), model_dir=str(mmt_dir), store_path=store,
                 region_dim=region_dim, seed=seed, runtime=runtime)  # fmt: skip
        if params.mt_system == "marian":
            build_marian(data, params, src=src, tgt=tgt, mt_models=mt_models, out_dir=str(mt_dir), seed=seed,
                         runtime=runtime)  # fmt: skip
        else:
            finetune(data, params, pretrained=str(mmt_dir / "pretrain.pt"), model_dir=str(mt_dir), store_path=None,
                     region_dim=region_dim, seed=seed, runtime=runtime)  # fmt: skip
        for folder, regions in ((mmt_dir, store), (mt_dir, None)):
            scores = evaluate_system(data, model_dir=str(folder), store_path=regions, tgt=tgt, beam=params.beam,
                                     runtime=runtime, metrics_path=f"{metrics}/{folder.name}.json")  # fmt: skip
            rows.append({"system": folder.name, **{key: scores[key] for key in ("bleu", "sacrebleu", "chrf")}})
    create_table_artifact(key=f"mmt-{pivot}-{target}", table=rows, description="Test captions: BLEU and chrF")
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    parser = stage_parser("train_mmt", __doc__ or "")
    parser.add_argument("--target", required=True, help="target language (one of mmt.targets)")
    for name in ("prepared", "store", "models", "mt_models", "metrics"):
        parser.add_argument(f"--{name}", required=True)

    def body(args: argparse.Namespace, params: Params) -> None:
        runtime = Runtime(device_name(params.device), params.precision)
        with tags(*run_tags("train_mmt"), f"pair:{params.languages.pivot}-{args.target}"):
            train_mmt(params.mmt, params.languages.pivot, args.target, args.prepared, args.store, args.models,
                      args.mt_models, args.metrics, params.seed, runtime)  # fmt: skip

    run_stage(parser, argv, body)


if __name__ == "__main__":
    main()
