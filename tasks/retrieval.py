"""Prefect tasks around :mod:`retrieval`: train one run, test it. Thin: reading the tables,
training and evaluation live in ``retrieval/`` (and the MT systems of translate-search in ``mmt/``)."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from prefect import get_run_logger, task
from prefect.artifacts import (
    create_table_artifact,
    update_progress_artifact,
)
from prefect.cache_policies import NO_CACHE

from common.distributed import run_on_every_rank
from common.errors import InputError
from common.files import write_tsv
from common.metrics_files import write_metrics
from common.runtime import Runtime
from features.store import FeatureStore
from retrieval.checkpoint import MODEL, load_retrieval
from retrieval.config import RetrievalConfig
from retrieval.eval_sets import score_eval_sets
from retrieval.experiment import Translate, read_captions, test_model, train_model, translate_search
from retrieval.results import combine_replicates, flat_metrics, history_rows, rounded
from retrieval.roles import ResolvedRole
from tasks import progress_artifact


@dataclass(frozen=True)
class RetrievalInputs:
    """The files a retrieval run reads: its caption variant, region features, word vectors and query translations."""

    captions: str  # the caption variant's folder, <augmented>/<variant>/ (captions.<lang>.parquet per language)
    store: str  # the target corpus's FeatureStore folder (region features of its images)
    word_vectors: str  # FastText .vec files the user holds (paths.word_vectors; retrieval.vocab.fasttext names them)
    queries: str  # translate_queries' folder: <lang>-<pivot>.parquet, the test queries of translate-search


@task(cache_policy=NO_CACHE, persist_result=False)
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
) -> dict[str, Any]:
    """Train ``model_name`` on the variant at ``inputs.captions`` in ``role``; write the checkpoint
    ``out_dir/model`` (``model.safetensors`` + ``model.json``); return its summary. While it trains, a progress
    artifact says the epoch and the latest loss and validation rsum per language (``run``: the name it shows); at
    the end the table artifact ``history_key`` holds every epoch."""
    logger = get_run_logger()
    epochs = config.train.epochs
    progress = progress_artifact(f"{run} (seed {seed}): training")

    def on_epoch(entry: dict[str, Any]) -> None:
        note = f"{run} (seed {seed}): {epoch_summary(entry, epochs)}"
        logger.info("%s", note)
        update_progress_artifact(
            artifact_id=progress, progress=100.0 * (int(entry["epoch"]) + 1) / epochs, description=note
        )

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
    )
    result = run_on_every_rank(call, here=functools.partial(call, on_epoch=on_epoch))
    rows = history_rows(result.history, seed)
    table = [rounded(row) for row in rows]
    description = f"{run} (seed {seed}): every epoch (best: epoch {result.best_epoch})"
    create_table_artifact(key=history_key, table=table, description=description)
    return {
        "best_epoch": result.best_epoch,
        "best_val_rsum": result.best_rsum,
        "epochs": len(result.history),
        "history": rows,
    }


def epoch_summary(entry: Mapping[str, Any], epochs: int) -> str:
    """``epoch 3/6, loss 0.412, val rsum en 461.6 / de 422.0`` of one epoch's log entry (epochs counted from 1)."""
    per_language = " / ".join(f"{lang} {summary['rsum']:.1f}" for lang, summary in entry["val"].items())
    loss = "-" if entry["loss"] is None else f"{entry['loss']:.3f}"
    return f"epoch {int(entry['epoch']) + 1}/{epochs}, loss {loss}, val rsum {per_language}"


@task(cache_policy=NO_CACHE, persist_result=False)
def evaluate_retrieval_model(
    config: RetrievalConfig,
    role: ResolvedRole,
    inputs: RetrievalInputs,
    *,
    model_dir: str,
    metrics_path: str,
    languages: tuple[str, ...],
    pivot: str,
    runtime: Runtime,
) -> dict[str, Any]:
    """Test-split R@K per test language of ``role`` (and translate-search, with the query translations the
    `translate_queries` stage wrote to ``inputs.queries``) of the model in ``model_dir``, written to ``metrics_path``
    in the SPEC schema; the captions table's extra evaluation sets under ``eval_sets.<name>``, when it has any."""
    loaded = load_retrieval(Path(model_dir) / MODEL, device=runtime.torch_device())
    store = FeatureStore.open(inputs.store)
    rows = read_captions(Path(inputs.captions), split="test", languages=languages, kinds=None, human_only=True)
    source = f"{inputs.captions} (test)"
    metrics = test_model(loaded, rows, store, config.evaluation, role.test, source=source, runtime=runtime)
    if config.translate_search.languages and pivot in role.test:
        searches = {}
        for lang in config.translate_search.languages:
            translate = _pretranslated(Path(inputs.queries) / f"{lang}-{pivot}.parquet")
            searches[lang] = translate_search(
                loaded, rows, lang, pivot, store, translate, config.evaluation, source=source, runtime=runtime
            )
        metrics["translate_search"] = searches
    extra = score_eval_sets(loaded, Path(inputs.captions), store, config.evaluation, role.test, runtime=runtime)
    if extra:
        metrics["eval_sets"] = extra
    metrics["protocol"] = config.evaluation.protocol
    write_metrics(metrics_path, metrics)
    return metrics


@task(cache_policy=NO_CACHE, persist_result=False)
def write_history(rows: list[dict[str, Any]], path: str) -> None:
    """Every replicate's per-epoch learning curve (:func:`~retrieval.results.history_rows`) -> a TSV that
    ``dvc plots`` draws."""
    write_tsv(path, rows)


@task(cache_policy=NO_CACHE, persist_result=False)
def write_retrieval_metrics(
    runs: list[dict[str, Any]], seeds: list[int], languages: tuple[str, ...], metrics_path: str, key: str
) -> dict[str, Any]:
    """The replicates' test metrics combined (mean, ``std``, ``seeds``; one run as it is) -> the run's metrics file,
    and a table of them (artifact ``key``)."""
    metrics = combine_replicates(runs, seeds)
    write_metrics(metrics_path, metrics)
    table = [{"lang": lang, **flat_metrics(metrics[lang])} for lang in languages]
    for name, scored in metrics.get("eval_sets", {}).items():  # the extra evaluation sets, in the languages they have
        table += [{"lang": f"{lang} ({name})", **flat_metrics(scored[lang])} for lang in languages if lang in scored]
    note = f", mean of {len(seeds)} seeds" if len(seeds) > 1 else ""
    description = f"Test split: R@K per language and direction{note}"
    create_table_artifact(key=key, table=table, description=description)
    return metrics


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
