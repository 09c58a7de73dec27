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

With `--work`, each fit of the regional model (pre-training, the MMT's and the text-only system's fine-tuning)
keeps a resume state in `<work>/<system folder>/<checkpoint>.state.safetensors` after every epoch: a rerun after a
kill continues from the last finished epoch and ends with the same outputs; the states are removed once the outputs
are in place. The text-only corpus is encoded there once too (`<work>/encoded/`), and every fit that reads it maps
those arrays rather than holding the corpus's sentences; without `--work` each fit encodes it into memory.
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing
import signal
from collections.abc import Sequence
from pathlib import Path

from prefect import flow, tags
from prefect.artifacts import create_table_artifact
from prefect.task_runners import ProcessPoolTaskRunner

from common.distributed import is_writer, joined
from common.files import staged_children
from common.runtime import Runtime, cpu_threads, use_cpu_threads
from common.stopping import SharedEvent, cancel_on_interrupt, follow
from corpora.prepared import checked_parallel_table, read_prepared
from features.store import FeatureStore
from mmt.config import SystemsConfig
from mmt.pairs import direction_data, require_splits
from mmt.systems import TEXT_ONLY_REGION_DIM, clear_encoded, clear_states
from mmtr.params import Params, ParamsError
from mmtr.processes import STOP_SIGNALS
from mmtr.stage import named, run_stage, run_tags, show_library_progress, stage_parser
from tasks import artifact_key
from tasks.mmt import DirectionJob, PairPaths, train_direction


@flow(name="train_mmt", log_prints=True, persist_result=False)
def train_mmt(
    config: SystemsConfig,
    pivot: str,
    target: str,
    prepared: str,
    parallel: str,
    paths: PairPaths,
    seed: int,
    runtime: Runtime,
    parallel_directions: bool = False,
) -> list[dict[str, object]]:
    """Both directions' systems into ``paths.models``, their metrics into ``paths.metrics``: the flow's parameters
    name these final folders; the four system folders and their metrics files are written into a staging folder
    inside each and appear only once all are complete (a killed run leaves none of them, rather than folders holding
    an early best-so-far checkpoint). The resume states in ``paths.work`` go once the outputs are in place."""
    with staged_children(paths.models) as models, staged_children(paths.metrics) as metrics:
        staged = dataclasses.replace(paths, models=str(models), metrics=str(metrics))
        region_dim = FeatureStore.open(paths.store).dim if paths.store is not None else TEXT_ONLY_REGION_DIM
        # once for both directions: the fine-tuning corpus's captions; the text-only corpus is checked here and read
        # a chunk at a time where it is used (encoded once into the work folder and memory-mapped by the fits)
        corpus = read_prepared(prepared)
        parallel_file = checked_parallel_table(parallel, f"{pivot}-{target}")
        jobs: list[DirectionJob] = []
        for src, tgt in ((pivot, target), (target, pivot)):
            data = direction_data(corpus, pivot=pivot, target=target, src=src, tgt=tgt, parallel_file=parallel_file)
            sources = {"parallel": f"{parallel}/{pivot}-{target}.parquet", "captions": f"{prepared}/captions.parquet"}
            require_splits(data, direction=f"{src}->{tgt}", **sources)
            jobs.append(DirectionJob(src, tgt, data, config, staged, region_dim, seed, runtime))
        if parallel_directions and not joined():
            # two processes with half the CPU threads each: small LSTM steps use one core better than two
            threads = max(1, cpu_threads() // len(jobs))
            print(f"Training {pivot}->{target} and {target}->{pivot} at once, {threads} CPU thread(s) each")
            # a stop signal reaches this process alone, and the runner's exit waits for both fits: the event tells
            # the workers to give them up before their next batch (their resume states stay)
            stop = multiprocessing.get_context("spawn").Event()
            pool = ProcessPoolTaskRunner(max_workers=len(jobs), initializer=_start_worker, initargs=(threads, stop))
            with pool as runner, cancel_on_interrupt(also=stop):
                futures = [runner.submit(train_direction, {"job": job}) for job in jobs]
                rows = [row for future in futures for row in future.result()]
        else:  # under torchrun the other ranks follow rank 0's calls one direction after the other
            with cancel_on_interrupt():  # no stop an earlier run of this process took is this one's
                rows = [row for job in jobs for row in train_direction(job)]
    if paths.work is not None and is_writer():
        directions = (f"{pivot}-{target}", f"{target}-{pivot}")
        clear_states(
            Path(paths.work), [f"{system}-{direction}" for system in ("mmt", "mt") for direction in directions]
        )
        clear_encoded(Path(paths.work))
    description = "Test captions: BLEU and chrF"
    create_table_artifact(key=artifact_key(f"mmt-{pivot}-{target}"), table=rows, description=description)
    return rows


def _start_worker(threads: int, stop: SharedEvent) -> None:
    """A direction's worker process: its share of the cores, the library's epoch lines in the log, and the parent's
    stop. A stop signal sent to the whole process group (Ctrl-C in a terminal, a scheduler's) is the parent's to
    handle: here it would raise in the middle of a step, and the pool cannot hand such an exception back."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
    use_cpu_threads(threads)
    show_library_progress()
    follow(stop)


def main(argv: Sequence[str] | None = None) -> None:
    parser = stage_parser("train_mmt", __doc__ or "")
    parser.add_argument("--target", required=True, help="target language (one of mmt.targets)")
    parser.add_argument("--prepared", required=True, help="the fine-tuning corpus (corpus_roles.mmt_finetune)")
    parser.add_argument("--parallel", required=True, help="the prepared text-only corpus (<paths.prepared>/parallel)")
    parser.add_argument("--store", help="the fine-tuning corpus's FeatureStore (not read when mmt.systems is [mt])")
    for name in ("models", "mt_models", "metrics"):
        parser.add_argument(f"--{name}", required=True)
    parser.add_argument("--work", help="folder of the resume states (<paths.work>/train_mmt); none kept without it")

    def body(args: argparse.Namespace, params: Params) -> None:
        if "mmt" in params.mmt.systems and args.store is None:
            raise ParamsError("mmt.systems includes mmt, which reads region features: give --store")
        runtime = Runtime.resolve(params.device, params.precision)
        with tags(*run_tags("train_mmt"), f"pair:{params.languages.pivot}-{args.target}"):
            paths = PairPaths(args.store, args.models, args.mt_models, args.metrics, args.work)
            named(train_mmt, args.params)(
                params.mmt,
                params.languages.pivot,
                args.target,
                args.prepared,
                args.parallel,
                paths,
                params.seed,
                runtime,
                params.distributed.parallel_directions,
            )

    run_stage(parser, argv, body, data_parallel="flows.train_mmt")


if __name__ == "__main__":
    main()
