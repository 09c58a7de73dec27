"""Prefect tasks around :mod:`retrieval`: train one run, test it. Thin: reading the tables,
training and evaluation live in ``retrieval/`` (and the MT systems of translate-search in ``mmt/``)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from prefect import task
from prefect.artifacts import create_table_artifact, update_progress_artifact
from prefect.cache_policies import NO_CACHE

from common.distributed import run_on_every_rank
from common.epoch_log import EpochLine, format_epoch
from common.errors import InputError
from common.files import write_tsv
from common.metrics_files import write_metrics
from common.runtime import Runtime
from features.store import FeatureStore
from retrieval.checkpoint import MODEL, load_retrieval
from retrieval.config import RetrievalConfig
from retrieval.eval_sets import score_eval_sets
from retrieval.experiment import Translate, read_captions, test_model, train_model, translate_search
from retrieval.results import combine_replicates, flat_metrics, history_rows
from retrieval.roles import ResolvedRole
from retrieval.significance import QueryRanks, ranks_path, read_ranks, stack_seeds, write_ranks
from tasks import artifact_key, named_by, progress_artifact


@dataclass(frozen=True)
class RetrievalInputs:
    """The files a retrieval run reads: its caption variant, region features, word vectors and query translations."""

    captions: str  # the caption variant's folder, <augmented>/<variant>/ (captions.<lang>.parquet per language)
    store: str  # the target corpus's FeatureStore folder (region features of its images)
    word_vectors: str  # FastText .vec files the user holds (paths.word_vectors; retrieval.vocab.fasttext names them)
    queries: str  # translate_queries' folder: <lang>-<pivot>.parquet, the test queries of translate-search


def _train_name(parameters: dict[str, Any]) -> str:
    return f"train {parameters['run']} seed {parameters['seed']}"


@task(cache_policy=NO_CACHE, persist_result=False, task_run_name=named_by(_train_name))
def train_retrieval_model(
    config: RetrievalConfig,
    model_name: str,
    role: ResolvedRole,
    inputs: RetrievalInputs,
    *,
    out_dir: str,
    seed: int,
    runtime: Runtime,
    run: str,
    history_key: str,
    resume_state: str | None = None,
) -> dict[str, Any]:
    """Train ``model_name`` on the variant at ``inputs.captions`` in ``role``; write the checkpoint
    ``out_dir/model`` (``model.safetensors`` + ``model.json``); return its summary (``best_epoch`` counted from 1,
    like the epochs of ``history``). While it trains, a progress artifact shows each epoch's log line (``run``: the
    name it starts with); at the end the table artifact ``history_key`` holds every epoch. ``resume_state``: the
    file that holds the training's state after every epoch, resumed from when the task is rerun."""
    label = f"{run} seed {seed}"
    progress = progress_artifact(f"{label}: starting", key=artifact_key(f"retrieval-progress-{run}-seed-{seed}"))

    def on_epoch(line: EpochLine) -> None:
        percent = 100.0 * line.epoch / line.epochs
        update_progress_artifact(artifact_id=progress, progress=percent, description=format_epoch(line))

    # under torchrun the other ranks train along (common.distributed); only this one reports and writes
    call = functools.partial(
        train_model,
        config,
        model_name,
        role,
        Path(inputs.captions),
        Path(inputs.store),
        Path(inputs.word_vectors),
        Path(out_dir),
        seed=seed,
        runtime=runtime,
        label=label,
        resume_state=None if resume_state is None else Path(resume_state),
    )
    result = run_on_every_rank(call, here=functools.partial(call, on_epoch=on_epoch))
    rows = history_rows(result.history, seed)
    description = f"{label}: every epoch (best: epoch {result.best_epoch}; rsum of 600 per language)"
    create_table_artifact(key=history_key, table=history_table(rows, result.best_epoch), description=description)
    return {
        "best_epoch": result.best_epoch,
        "best_val_rsum": result.best_rsum,
        "epochs": len(result.history),
        "history": rows,
    }


def history_table(rows: list[dict[str, Any]], best_epoch: int) -> list[dict[str, Any]]:
    """The narrow table of a fit's history rows (:func:`~retrieval.results.history_rows`), which the UI shows whole:
    epoch, loss, validation rsum per language, and a mark on the best epoch; the rest stays in the history file."""
    table = []
    for row in rows:
        per_language = {
            f"rsum {key.removeprefix('val_rsum_')}": round(value, 1)
            for key, value in row.items()
            if key.startswith("val_rsum_")
        }
        loss = None if row["loss"] is None else round(row["loss"], 3)
        best = "best" if row["epoch"] == best_epoch else ""
        table.append({"epoch": row["epoch"], "loss": loss, **per_language, "best": best})
    return table


def _evaluate_name(parameters: dict[str, Any]) -> str:
    return f"test {parameters['run']} seed {parameters['seed']}"


@task(cache_policy=NO_CACHE, persist_result=False, task_run_name=named_by(_evaluate_name))
def evaluate_retrieval_model(
    config: RetrievalConfig,
    role: ResolvedRole,
    inputs: RetrievalInputs,
    *,
    run: str,
    seed: int,
    model_dir: str,
    metrics_path: str,
    languages: tuple[str, ...],
    pivot: str,
    runtime: Runtime,
) -> dict[str, Any]:
    """Test-split R@K per test language of ``role`` (and translate-search, with the query translations the
    `translate_queries` stage wrote to ``inputs.queries``) of the model in ``model_dir``, written to ``metrics_path``
    in the SPEC schema; the captions table's extra evaluation sets under ``eval_sets.<name>``, when it has any; the
    per-query ranks of the test languages and translate-search beside it (:func:`~retrieval.significance.ranks_path`).
    ``run`` and ``seed`` name the replicate (the task run's name)."""
    loaded = load_retrieval(Path(model_dir) / MODEL, device=runtime.torch_device())
    store = FeatureStore.open(inputs.store)
    rows = read_captions(Path(inputs.captions), split="test", languages=languages, kinds=None, human_only=True)
    source = f"{inputs.captions} (test)"
    ranks: dict[str, QueryRanks] = {}
    metrics = test_model(loaded, rows, store, config.evaluation, role.test, source=source, runtime=runtime, ranks=ranks)
    if config.translate_search.languages and pivot in role.test:
        searches = {}
        for lang in config.translate_search.languages:
            translate = _pretranslated(Path(inputs.queries) / f"{lang}-{pivot}.parquet")
            searches[lang] = translate_search(
                loaded,
                rows,
                lang,
                pivot,
                store,
                translate,
                config.evaluation,
                source=source,
                runtime=runtime,
                ranks=ranks,
            )
        metrics["translate_search"] = searches
    extra = score_eval_sets(loaded, Path(inputs.captions), store, config.evaluation, role.test, runtime=runtime)
    if extra:
        metrics["eval_sets"] = extra
    metrics["protocol"] = config.evaluation.protocol
    write_metrics(metrics_path, metrics)
    write_ranks(ranks_path(metrics_path), ranks)
    return metrics


def _history_name(parameters: dict[str, Any]) -> str:
    return f"write {Path(parameters['path']).name}"


@task(cache_policy=NO_CACHE, persist_result=False, task_run_name=named_by(_history_name))
def write_history(rows: list[dict[str, Any]], path: str) -> None:
    """Every replicate's per-epoch learning curve (:func:`~retrieval.results.history_rows`) -> a TSV that
    ``dvc plots`` draws."""
    write_tsv(path, rows)


def _metrics_name(parameters: dict[str, Any]) -> str:
    return f"write {Path(parameters['metrics_path']).name}"


@task(cache_policy=NO_CACHE, persist_result=False, task_run_name=named_by(_metrics_name))
def write_retrieval_metrics(
    runs: list[dict[str, Any]], seeds: list[int], languages: tuple[str, ...], metrics_path: str, key: str
) -> dict[str, Any]:
    """The replicates' test metrics combined (mean, ``std``, ``seeds``; one run as it is) -> the run's metrics file,
    and a table of them (artifact ``key``)."""
    metrics = combine_replicates(runs, seeds)
    write_metrics(metrics_path, metrics)
    table = [{"lang": lang, **metrics_row(metrics[lang])} for lang in languages]
    for name, scored in metrics.get("eval_sets", {}).items():  # the extra evaluation sets, in the languages they have
        table += [{"lang": f"{lang} ({name})", **metrics_row(scored[lang])} for lang in languages if lang in scored]
    note = f", mean of {len(seeds)} seeds" if len(seeds) > 1 else ""
    description = f"Test split: R@1/5/10 per language and direction, rsum (of 600), mean recall mR{note}"
    create_table_artifact(key=key, table=table, description=description)
    return metrics


def _ranks_name(parameters: dict[str, Any]) -> str:
    return f"write {Path(parameters['out']).name}"


@task(cache_policy=NO_CACHE, persist_result=False, task_run_name=named_by(_ranks_name))
def write_run_ranks(seed_files: list[str], out: str) -> None:
    """The replicates' per-query ranks (each seed's file, in seed order) -> the run's ranks file: per test set a row
    per seed, what the report's paired tests read (:mod:`retrieval.significance`)."""
    per_seed = [read_ranks(path) for path in seed_files]
    keys = per_seed[0].keys()
    if any(ranks.keys() != keys for ranks in per_seed):
        raise InputError(f"{', '.join(seed_files)}: the replicates ranked different test sets")
    write_ranks(out, {key: stack_seeds([ranks[key] for ranks in per_seed]) for key in keys})


def metrics_row(metrics: dict[str, Any]) -> dict[str, Any]:
    """One language's test metrics as a narrow table row (the UI cuts tables of more than 8 columns): R@1/5/10 of each
    direction in one cell, rsum and mean recall; the metrics file holds every number."""
    flat = flat_metrics(metrics)
    recalls = {
        f"{label} R@1/5/10": " / ".join(f"{flat[f'{direction}_r{k}']:.1f}" for k in (1, 5, 10))
        for direction, label in (("i2t", "image→text"), ("t2i", "text→image"))
    }
    return recalls | {"rsum": round(flat["rsum"], 1), "mR": round(flat["mr"], 1)}


def _pretranslated(path: Path) -> Translate:
    """The translations in ``path`` (`translate_queries`' file: text, translation) as a function of query texts.

    Raises:
        InputError: no such file, or a query it does not hold (the file is older than the captions).
    """
    if not path.is_file():
        raise InputError(f"{path}: no translated queries for translate-search (run the translate_queries stage)")
    table = pq.read_table(path, columns=["text", "translation"])
    known = dict(zip(table.column("text").to_pylist(), table.column("translation").to_pylist(), strict=True))

    def translate(texts: list[str]) -> list[str]:
        missing = [text for text in texts if text not in known]
        if missing:
            raise InputError(
                f"{path}: {len(missing)} test queries have no translation, e.g. {missing[0]!r} "
                f"(run the translate_queries stage again)"
            )
        return [known[text] for text in texts]

    return translate
