"""Stage `train_mmt@<target>`: the pivot->target and target->pivot systems of one language pair.

For each direction: subword vocabularies; text-only pre-training on the parallel corpus (`pretrain.safetensors`
and `pretrain.json`); multimodal fine-tuning with region features on the translation captions of the corpus in
`corpus_roles.mmt_finetune` (`mmt-<src>-<tgt>/finetune.safetensors` + `.json`);
the text-only MT system fine-tuned on the same captions without images (`mt-<src>-<tgt>/finetune.*`);
BLEU/chrF of both on the test captions (the translations kept in each system folder), the MMT's image
awareness, where the corpus records them the image-dependent words' accuracy and the contrastive accuracy, and a
paired bootstrap of MMT against MT (`mmt-vs-mt-<src>-<tgt>.json`); the MMT's learning curve over both phases
(`mmt-<src>-<tgt>.history.tsv`, a DVC plot). `mmt.systems: [mt]` trains
the text-only system alone and needs no FeatureStore: the route for a corpus without images (run the flow
without `--store`).
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Sequence
from pathlib import Path

from prefect import flow, tags
from prefect.artifacts import create_table_artifact

from corpora.io import staged_children, write_tsv
from corpora.prepared import read_parallel_tables, read_prepared
from features.store import FeatureStore
from flows.params import Params, ParamsError
from flows.stage import named, run_stage, run_tags, stage_parser
from mmt.checkpoint import PRETRAIN
from mmt.curves import learning_curve
from mmt.pairs import direction_data
from mmt.systems import TEXT_ONLY_REGION_DIM, SystemRequest, SystemsConfig
from settings.runtime import Runtime
from tasks import artifact_key
from tasks.mmt import (
    compare_systems,
    pretrain_direction,
    test_translation_system,
    train_subwords,
    train_translation_system,
)


@flow(name="train_mmt", log_prints=True, persist_result=False)
def train_mmt(
    config: SystemsConfig, pivot: str, target: str, prepared: str, parallel: str, store: str | None, models: str,
    mt_models: str, metrics: str, seed: int, runtime: Runtime,
) -> list[dict[str, object]]:  # fmt: skip
    region_dim = FeatureStore.open(store).dim if store is not None else TEXT_ONLY_REGION_DIM
    # once for both directions: the fine-tuning corpus's captions, the text-only corpus's sentence pairs
    corpus = dataclasses.replace(read_prepared(prepared), parallel=read_parallel_tables(parallel))
    rows: list[dict[str, object]] = []
    for src, tgt in ((pivot, target), (target, pivot)):
        data = direction_data(corpus, pivot=pivot, target=target, src=src, tgt=tgt)
        mmt_dir = Path(models) / f"mmt-{src}-{tgt}"
        train_subwords(data, config.text, src=src, tgt=tgt, out_dir=str(mmt_dir), seed=seed)
        pretrain_direction(data, config, model_dir=str(mmt_dir), region_dim=region_dim, seed=seed, runtime=runtime)
        folders = {"mmt": mmt_dir, "mt": Path(models) / f"mt-{src}-{tgt}"}
        backends = {"mmt": "mmt", "mt": config.mt_system}
        for system in config.systems:
            request = SystemRequest(src, tgt, data, config, folders[system], mmt_dir / PRETRAIN, store,
                                    Path(mt_models), seed, runtime)  # fmt: skip
            train_translation_system(backends[system], request)
        test = data.captions["test"]
        evaluations = {}
        for system in config.systems:
            folder = folders[system]
            metrics_path = f"{metrics}/{folder.name}.json"
            evaluations[system] = test_translation_system(str(folder), test, store=store, tgt=tgt, beam=config.beam,
                                                          runtime=runtime, metrics_path=metrics_path,
                                                          meteor=config.meteor,
                                                          contrastive=data.contrastive)  # fmt: skip
            scores = evaluations[system].metrics
            if system == "mmt":  # its curve: text-only pre-training, then fine-tuning with regions (`dvc plots`)
                write_tsv(f"{metrics}/{folder.name}.history.tsv", learning_curve(folder))
            rows.append({"system": folder.name, **{key: scores[key] for key in ("bleu", "sacrebleu", "chrf")}})
        if len(evaluations) == 2:  # is the MMT's gain over the MT system more than resampling noise?
            compare_systems(evaluations["mt"], evaluations["mmt"], test, tgt=tgt,
                            metrics_path=f"{metrics}/mmt-vs-mt-{src}-{tgt}.json")  # fmt: skip
    description = "Test captions: BLEU and chrF"
    create_table_artifact(key=artifact_key(f"mmt-{pivot}-{target}"), table=rows, description=description)
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    parser = stage_parser("train_mmt", __doc__ or "")
    parser.add_argument("--target", required=True, help="target language (one of mmt.targets)")
    parser.add_argument("--prepared", required=True, help="the fine-tuning corpus (corpus_roles.mmt_finetune)")
    parser.add_argument("--parallel", required=True, help="the prepared text-only corpus (<paths.prepared>/parallel)")
    parser.add_argument("--store", help="the fine-tuning corpus's FeatureStore (not read when mmt.systems is [mt])")
    for name in ("models", "mt_models", "metrics"):
        parser.add_argument(f"--{name}", required=True)

    def body(args: argparse.Namespace, params: Params) -> None:
        if "mmt" in params.mmt.systems and args.store is None:
            raise ParamsError("mmt.systems includes mmt, which reads region features: give --store")
        runtime = Runtime.resolve(params.device, params.precision)
        # the four system folders and their metrics files appear only once all are complete (a killed run leaves
        # none of them, rather than folders holding an early best-so-far checkpoint)
        with (
            tags(*run_tags("train_mmt"), f"pair:{params.languages.pivot}-{args.target}"),
            staged_children(args.models) as models,
            staged_children(args.metrics) as metrics,
        ):
            named(train_mmt, args.params)(params.mmt, params.languages.pivot, args.target, args.prepared,
                                          args.parallel, args.store, str(models), args.mt_models, str(metrics),
                                          params.seed, runtime)  # fmt: skip

    run_stage(parser, argv, body, data_parallel="flows.train_mmt")


if __name__ == "__main__":
    main()
