"""Stage `train_retrieval@<model>-<variant>-<role>`: train one retrieval model on one caption variant in one
language role, then test it.

Trains on the variant's training captions that the role keeps (human + synthesized, mixed in equal portions per
batch), keeps the epoch with the best validation rsum on the role's test languages, and writes the model
(`model.safetensors` + `model.json`) and the test metrics (R@1/5/10 per test language and direction, rsum, mR,
median/mean rank; translate-search when configured, on the queries `translate_queries` translated), with each test
query's rank per seed beside them (`<run>.ranks.npz`, for the report's paired tests). With
`retrieval.replicates` > 1 it trains that many seeds and the metrics are their mean and std.

With `--work`, each replicate keeps its training state in `<work>/<run>/seed-<seed>.state.safetensors` after every
epoch: a run that is killed and rerun resumes from the last finished epoch (and returns a finished replicate's
result at once); the states are removed once the outputs are in place.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from prefect import flow, tags

from common.errors import InputError
from common.files import atomic_dir, remove_stale_temporaries
from common.gpu_slots import slots_folder
from common.runtime import Runtime
from common.train_state import remove_state, state_file
from corpora.languages import Languages
from mmtr.params import Params
from mmtr.stage import named, run_stage, run_tags, stage_parser
from retrieval.config import RetrievalConfig, run_name
from retrieval.results import replicate_seeds
from retrieval.roles import PRESETS
from retrieval.significance import ranks_path
from retrieval.zoo.registry import MODELS
from tasks import artifact_key
from tasks.retrieval import (
    RetrievalInputs,
    evaluate_retrieval_model,
    train_retrieval_model,
    write_history,
    write_retrieval_metrics,
    write_run_ranks,
)


@flow(name="train_retrieval", log_prints=True, persist_result=False)
def train_retrieval(
    config: RetrievalConfig,
    all_languages: Languages,
    base_seed: int,
    model: str,
    variant: str,
    role: str,
    inputs: RetrievalInputs,
    out: str,
    metrics: str,
    runtime: Runtime,
    work: str | None = None,
) -> dict[str, Any]:
    """Train and test every replicate of one run into the model folder ``out`` (the flow's parameters name this
    final folder; the run writes a temporary one beside it, swapped in once every replicate is done). ``work``: where
    the replicates' resumable training states live (none kept without it)."""
    seeds = replicate_seeds(base_seed, config.replicates)
    run = run_name(model, variant, role)
    states = {seed: state_path(work, run, seed) for seed in seeds} if work is not None else {}
    with atomic_dir(out) as staged:
        pivot = all_languages.pivot
        languages = config.role(role, pivot)
        runs, history, seed_metrics = [], [], []
        for seed in seeds:  # the first replicate in `out`, the others in out/replicates/seed-<seed>
            model_dir = str(staged) if seed == seeds[0] else str(staged / "replicates" / f"seed-{seed}")
            history_key = artifact_key(f"retrieval-history-{run}-seed-{seed}")
            summary = train_retrieval_model(
                config,
                model,
                languages,
                inputs,
                out_dir=model_dir,
                seed=seed,
                runtime=runtime,
                run=run,
                history_key=history_key,
                resume_state=str(states[seed]) if states else None,
            )
            print(best_epoch_line(run, seed, summary, config.train.epochs))
            history += summary["history"]
            # Test on the human captions of the prepared data (the same rows in every variant).
            test_metrics = str(Path(model_dir) / "test-metrics.json")
            seed_metrics.append(test_metrics)
            runs.append(
                evaluate_retrieval_model(
                    config,
                    languages,
                    inputs,
                    run=run,
                    seed=seed,
                    model_dir=model_dir,
                    metrics_path=test_metrics,
                    languages=config.caption_languages(),
                    pivot=pivot,
                    runtime=runtime,
                )
            )
        write_history(history, str(Path(metrics).with_suffix(".history.tsv")))  # learning curves for `dvc plots`
        summary = write_retrieval_metrics(runs, seeds, languages.test, metrics, artifact_key(f"retrieval-{run}"))
        write_run_ranks([str(ranks_path(path)) for path in seed_metrics], str(ranks_path(metrics)))
    clear_states(states.values())
    return summary


def state_path(work: str, run: str, seed: int) -> Path:
    """The resumable training state of replicate ``seed`` of ``run``."""
    return state_file(Path(work) / run, f"seed-{seed}")


def clear_states(paths: Iterable[Path]) -> None:
    """Remove the training states of a run whose outputs are in place (and what a write killed midway left beside
    them), and their folder once it is empty."""
    for path in paths:
        remove_state(path)
        remove_stale_temporaries(path)
        with contextlib.suppress(OSError):  # another file in the folder: it stays
            path.parent.rmdir()


def best_epoch_line(run: str, seed: int, summary: dict[str, Any], epochs: int) -> str:
    """The replicate's best epoch of the configured ``epochs``, as the epoch lines before it count it (from 1: "epoch
    4/5", also when patience stopped early), as the summary's ``best_epoch`` and the history do."""
    return f"{run} seed {seed} · best val rsum {summary['best_val_rsum']:.1f} at epoch {summary['best_epoch']}/{epochs}"


def check_names(model: str, variant: str, role: str, params: Params) -> None:
    """Unknown names end the stage with the known ones listed."""
    aliases = params.retrieval.aliases
    if model not in MODELS and model not in aliases:
        raise InputError(f"unknown retrieval model {model!r}; known: {', '.join(sorted((*MODELS, *aliases)))}")
    variants = params.augment.variants
    if variant not in variants:
        raise InputError(f"unknown caption variant {variant!r}; known: {', '.join(variants)}")
    roles = [*PRESETS, *params.retrieval.custom_roles]
    if role not in roles:
        raise InputError(f"unknown language role {role!r}; known: {', '.join(roles)}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = stage_parser("train_retrieval", __doc__ or "")
    parser.add_argument("--model", required=True, help="registry name or alias (one of retrieval.models)")
    parser.add_argument("--variant", required=True, help="caption variant (one of retrieval.variants)")
    parser.add_argument("--role", required=True, help="language role (one of retrieval.roles)")
    for name in ("augmented", "store", "word_vectors", "queries", "out", "metrics"):
        parser.add_argument(f"--{name}", required=True)
    parser.add_argument("--work", help="folder of the resumable training states (paths.work); default: none kept")

    def body(args: argparse.Namespace, params: Params) -> None:
        check_names(args.model, args.variant, args.role, params)
        runtime = Runtime.resolve(params.device, params.precision, slots_folder(params.paths.work))
        run_tags_ = (
            *run_tags("train_retrieval"),
            f"model:{args.model}",
            f"variant:{args.variant}",
            f"role:{args.role}",
        )
        captions = str(Path(args.augmented) / args.variant)
        inputs = RetrievalInputs(captions, args.store, args.word_vectors, args.queries)
        with tags(*run_tags_):
            named(train_retrieval, args.params)(
                params.retrieval,
                params.languages,
                params.seed,
                args.model,
                args.variant,
                args.role,
                inputs,
                args.out,
                args.metrics,
                runtime,
                args.work,
            )

    run_stage(parser, argv, body, data_parallel="flows.train_retrieval")


if __name__ == "__main__":
    main()
