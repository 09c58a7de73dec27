"""Prefect tasks of the MMT stages: subword vocabularies, pre-training, the systems of a direction, their test
scores, synthesis shards. Thin: the models, training, backends and decoding live in ``mmt/``."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
from prefect import get_run_logger, task
from prefect.artifacts import create_table_artifact, update_progress_artifact
from prefect.cache_policies import NO_CACHE

from common import stopping
from common.distributed import run_on_every_rank
from common.epoch_log import EpochLine, format_epoch
from common.errors import InputError
from common.files import write_text, write_tsv
from common.metrics_files import write_metrics
from common.runtime import Runtime
from corpora.prepared import read_prepared
from corpora.tables import validate_captions, write_parquet
from mmt import systems
from mmt.checkpoint import FINETUNE, PRETRAIN
from mmt.config import SystemsConfig
from mmt.curves import learning_curve, read_history
from mmt.evaluation import Evaluation, compared_accuracies, evaluate_system
from mmt.metrics import paired_bootstrap
from mmt.pairs import ContrastiveItem, DirectionData, Pairs
from mmt.synthesis import SynthesisShard, SynthesisTask, run_shard
from mmt.systems import SystemRequest
from mmt.text import SubwordConfig
from mmt.train import ValidationCallback
from tasks import artifact_key, named_by, progress_artifact

HISTORY_DECIMALS = {"loss": 3, "val BLEU": 2}  # the history table's rounding (its file keeps 6 digits)


def system_label(folder: str | Path) -> str:
    """``MMT en-de`` of a system folder ``mmt-en-de`` (``MT de-en`` of ``mt-de-en``)."""
    kind, _, pair = Path(folder).name.partition("-")
    return f"{kind.upper()} {pair}" if pair else Path(folder).name


def _subwords_name(parameters: dict[str, Any]) -> str:
    return f"subwords {parameters['src']}-{parameters['tgt']}"


@task(cache_policy=NO_CACHE, persist_result=False, task_run_name=named_by(_subwords_name))
def train_subwords(data: DirectionData, config: SubwordConfig, *, src: str, tgt: str, out_dir: str, seed: int) -> None:
    """Subword vocabularies of one direction from its corpus and caption training text."""
    text = systems.train_text_pipeline(data, config, src=src, tgt=tgt, out_dir=Path(out_dir), seed=seed)
    get_run_logger().info("%s-%s: %d/%d subwords", src, tgt, text.src_vocab.size, text.tgt_vocab.size)


def fit_progress(name: str) -> ValidationCallback:
    """A progress artifact for one MMT fit (``name``: ``mmt-en-de finetune``), and the callback that moves it at each
    validation, its description the validation's log line (early stopping may end it before the last epoch)."""
    progress = progress_artifact(f"{name}: starting", key=artifact_key(f"mmt-progress-{name}"))

    def report(line: EpochLine) -> None:
        percent = min(100.0, 100.0 * line.epoch / line.epochs)
        update_progress_artifact(artifact_id=progress, progress=percent, description=format_epoch(line))

    return report


def publish_history(path: Path, name: str) -> None:
    """Every validation of one fit (its history file, when the backend writes one) as a narrow table artifact:
    epoch, step, loss, validation BLEU and a mark on the best one."""
    if not path.is_file():
        return
    history = read_history(path)
    best = max(range(len(history)), key=lambda index: history[index]["val_bleu"]) if history else -1
    rows = [
        {
            "epoch": int(entry["epoch"]),
            "step": int(entry["step"]),
            "loss": round(entry["loss"], HISTORY_DECIMALS["loss"]),
            "val BLEU": round(entry["val_bleu"], HISTORY_DECIMALS["val BLEU"]),
            "best": "best" if index == best else "",
        }
        for index, entry in enumerate(history)
    ]
    description = f"{name}: every validation (epochs counted from 1)"
    create_table_artifact(key=artifact_key(f"mmt-history-{name}"), table=rows, description=description)


def _pretrain_name(parameters: dict[str, Any]) -> str:
    return f"pretrain {parameters['src']}-{parameters['tgt']}"


@task(cache_policy=NO_CACHE, persist_result=False, task_run_name=named_by(_pretrain_name))
def pretrain_direction(
    data: DirectionData,
    config: SystemsConfig,
    *,
    src: str,
    tgt: str,
    model_dir: str,
    region_dim: int,
    seed: int,
    runtime: Runtime,
    work: str | None = None,
) -> float:
    """Text-only pre-training (one thread, no visual token) of ``src`` -> ``tgt`` on the parallel corpus ->
    checkpoint ``pretrain`` in ``model_dir`` (its resume state in ``work``, when given)."""
    name = f"{Path(model_dir).name} pretrain"
    report = fit_progress(name)
    # under torchrun the other ranks train along (common.distributed); only this one reports and writes
    call = functools.partial(
        systems.pretrain,
        data,
        config,
        model_dir=Path(model_dir),
        region_dim=region_dim,
        seed=seed,
        runtime=runtime,
        work=Path(work) if work is not None else None,
    )
    # the stop event is this process's (set in a direction's worker when the stage stops, flows/train_mmt.py); the
    # other ranks get the call without it, and torchrun stops them
    here = functools.partial(call, on_validation=report, stop=stopping.requested)
    score = run_on_every_rank(call, here=here)
    publish_history(Path(model_dir) / f"{PRETRAIN}.history.tsv", name)
    return score


def _system_name(parameters: dict[str, Any]) -> str:
    request: SystemRequest = parameters["request"]
    backend = parameters["backend"]
    pair = f"{request.src}-{request.tgt}"
    return f"train MMT {pair}" if backend == "mmt" else f"train MT {pair} ({backend})"


@task(cache_policy=NO_CACHE, persist_result=False, task_run_name=named_by(_system_name))
def train_translation_system(backend: str, request: SystemRequest) -> float | None:
    """One system of a direction (the MMT, or the MT system of ``mt_system``) into its folder."""
    name = f"{request.out_dir.name} finetune"
    report = fit_progress(name)
    here = functools.partial(systems.train_system, backend, dataclasses.replace(request, on_validation=report))
    if systems.BACKENDS[backend].data_parallel:  # the other torchrun ranks, if any, train along
        others = dataclasses.replace(request, stop=None)  # an event is this process's alone (pretrain_direction)
        score = run_on_every_rank(functools.partial(systems.train_system, backend, others), here=here)
    else:
        score = here()
    publish_history(request.out_dir / f"{FINETUNE}.history.tsv", name)
    return score


def _test_name(parameters: dict[str, Any]) -> str:
    return f"test {system_label(parameters['folder'])}"


@task(cache_policy=NO_CACHE, persist_result=False, task_run_name=named_by(_test_name))
def test_translation_system(
    folder: str,
    test: Pairs,
    *,
    store: str | None,
    tgt: str,
    beam: int,
    runtime: Runtime,
    metrics_path: str,
    meteor: bool = True,
    contrastive: list[ContrastiveItem] | None = None,
) -> Evaluation:
    """BLEU (both conventions), chrF, image awareness, the METEOR note, and where the corpus records them the
    image-dependent words' scores and the contrastive accuracy on ``contrastive`` -> a metrics JSON file; the
    translations -> ``<folder>/test-hypotheses.<tgt>.txt``."""
    evaluation = evaluate_system(
        folder,
        test,
        store=store,
        tgt=tgt,
        beam=beam,
        runtime=runtime,
        meteor=meteor,
        contrastive=contrastive,
        stop=stopping.requested,  # set in a direction's worker process when the stage stops (flows/train_mmt.py)
    )
    metrics = evaluation.metrics
    write_metrics(metrics_path, metrics)
    write_text(Path(folder) / f"test-hypotheses.{tgt}.txt", "".join(f"{line}\n" for line in evaluation.hypotheses))
    get_run_logger().info("%s", scores_line(system_label(folder), metrics))
    return evaluation


def scores_line(system: str, metrics: dict[str, object]) -> str:
    """One line of a system's test scores: ``MMT en-de test · BLEU 41.27 · sacreBLEU 40.10 · chrF 60.02 · image
    awareness +1.20 · image-dependent words 61.5% of 52 · contrastive 58.0% of 100``; a score the corpus cannot give
    says why it is absent."""
    parts = [f"{system} test"] + [f"{label} {metrics[key]:.2f}" for label, key in _TEST_SCORES]
    awareness = metrics["image_awareness"]
    if isinstance(awareness, float):
        parts.append(f"image awareness {awareness:+.2f}")
    dependent = metrics["image_dependent"]
    if isinstance(dependent, dict):
        parts.append(f"image-dependent words {100 * dependent['word_accuracy']:.1f}% of {dependent['words']}")
    else:
        parts.append(str(dependent))
    contrastive = metrics["contrastive"]
    if isinstance(contrastive, dict):
        parts.append(f"contrastive {100 * contrastive['accuracy']:.1f}% of {contrastive['items']}")
    else:
        parts.append(str(contrastive))
    return " · ".join(parts)


_TEST_SCORES = (("BLEU", "bleu"), ("sacreBLEU", "sacrebleu"), ("chrF", "chrf"))


@dataclasses.dataclass(frozen=True)
class PairPaths:
    """Where the systems of one language pair read their inputs and write their folders and metrics."""

    store: str | None  # the fine-tuning corpus's FeatureStore folder; None: the text-only systems alone
    models: str  # holds the system folders mmt-<src>-<tgt>/ and mt-<src>-<tgt>/ of both directions
    mt_models: str  # MT models the user holds (paths.mt_models; mmt.seq2seq.held names them)
    metrics: str  # holds <system>.json, the MMT's <system>.history.tsv and mmt-vs-mt-<src>-<tgt>.json
    work: str | None = None  # the fits' resume states (systems.state_path); None: keep none


@dataclasses.dataclass(frozen=True)
class DirectionJob:
    """One direction of a language pair for :func:`train_direction`: where its systems and metrics go."""

    src: str
    tgt: str
    data: DirectionData
    config: SystemsConfig
    paths: PairPaths
    region_dim: int
    seed: int
    runtime: Runtime


def _direction_name(parameters: dict[str, Any]) -> str:
    job: DirectionJob = parameters["job"]
    return f"direction {job.src}-{job.tgt}"


@task(cache_policy=NO_CACHE, persist_result=False, task_run_name=named_by(_direction_name))
def train_direction(job: DirectionJob) -> list[dict[str, object]]:
    """Everything of one direction: subwords, text-only pre-training, its systems (``mmt-<src>-<tgt>``,
    ``mt-<src>-<tgt>``), their test metrics and the MMT's learning curve, and the paired bootstrap of MMT against MT
    (``mmt-vs-mt-<src>-<tgt>.json``); returns a BLEU/chrF row per system. Given up because the stage is stopping, it
    fails with :class:`common.stopping.GivenUp` (it may run in a worker process of the stage's)."""
    with stopping.reported_as_error():
        return _train_direction(job)


def _train_direction(job: DirectionJob) -> list[dict[str, object]]:
    config, src, tgt, data, paths = job.config, job.src, job.tgt, job.data, job.paths
    mmt_dir = Path(paths.models) / f"mmt-{src}-{tgt}"
    train_subwords(data, config.text, src=src, tgt=tgt, out_dir=str(mmt_dir), seed=job.seed)
    pretrain_direction(
        data,
        config,
        src=src,
        tgt=tgt,
        model_dir=str(mmt_dir),
        region_dim=job.region_dim,
        seed=job.seed,
        runtime=job.runtime,
        work=paths.work,
    )
    folders = {"mmt": mmt_dir, "mt": Path(paths.models) / f"mt-{src}-{tgt}"}
    backends = {"mmt": "mmt", "mt": config.mt_system}
    for system in config.systems:
        request = SystemRequest(
            src=src,
            tgt=tgt,
            data=data,
            config=config,
            out_dir=folders[system],
            pretrained=mmt_dir / PRETRAIN,
            store=paths.store,
            mt_models=Path(paths.mt_models),
            seed=job.seed,
            runtime=job.runtime,
            work=Path(paths.work) if paths.work is not None else None,
            stop=stopping.requested,
        )
        train_translation_system(backends[system], request)
    test = data.captions["test"]
    evaluations: dict[str, Evaluation] = {}
    rows: list[dict[str, object]] = []
    for system in config.systems:
        folder = folders[system]
        evaluations[system] = test_translation_system(
            str(folder),
            test,
            store=paths.store,
            tgt=tgt,
            beam=config.beam,
            runtime=job.runtime,
            metrics_path=f"{paths.metrics}/{folder.name}.json",
            meteor=config.meteor,
            contrastive=data.contrastive,
        )
        if system == "mmt":  # its curve: text-only pre-training, then fine-tuning with regions (`dvc plots`)
            write_tsv(f"{paths.metrics}/{folder.name}.history.tsv", learning_curve(folder))
        scores = evaluations[system].metrics
        rows.append({"system": folder.name, **{key: _rounded(scores[key]) for key in ("bleu", "sacrebleu", "chrf")}})
    if len(evaluations) == 2:  # is the MMT's gain over the MT system more than resampling noise?
        comparison = f"{paths.metrics}/mmt-vs-mt-{src}-{tgt}.json"
        compare_systems(evaluations["mt"], evaluations["mmt"], test, tgt=tgt, metrics_path=comparison)
    return rows


def _rounded(value: object) -> object:
    """A score as the test table shows it: 2 decimals, no float noise."""
    return round(value, 2) if isinstance(value, float) else value


def _translate_texts_name(parameters: dict[str, Any]) -> str:
    return f"translate queries ({system_label(parameters['folder'])})"


@task(cache_policy=NO_CACHE, persist_result=False, task_run_name=named_by(_translate_texts_name))
def translate_texts(folder: str, texts: list[str], *, beam: int, runtime: Runtime) -> list[str]:
    """``texts`` translated by the text-only system in ``folder`` (no images), in order.

    Raises:
        InputError: no system in ``folder``.
    """
    if not Path(folder).is_dir():
        name = Path(folder).name
        raise InputError(f"{folder}: no {name} MT system for translate-search; add its language to mmt.targets")
    return systems.load_system(folder, None, runtime).translate(texts, None, beam=beam, batch_size=64)


def _compare_name(parameters: dict[str, Any]) -> str:
    return f"compare {Path(parameters['metrics_path']).stem}"


@task(cache_policy=NO_CACHE, persist_result=False, task_run_name=named_by(_compare_name))
def compare_systems(
    baseline: Evaluation, system: Evaluation, test: Pairs, *, tgt: str, metrics_path: str
) -> dict[str, object]:
    """Paired bootstrap of BLEU, ``system`` against ``baseline`` on the same test captions, with both systems'
    image-dependent word accuracy and contrastive accuracy -> a metrics JSON file."""
    comparison = {
        **paired_bootstrap(baseline.hypotheses, system.hypotheses, test.tgt, tgt),
        **compared_accuracies(baseline, system),
    }
    write_metrics(metrics_path, comparison)
    get_run_logger().info(
        "%s · BLEU %+.2f over the baseline · p = %.4f",
        Path(metrics_path).stem,
        comparison["delta"],
        comparison["p_value"],
    )
    return comparison


@dataclasses.dataclass(frozen=True)
class PassSystem:
    """The trained system that translates the shards of one synthesis pass, and how it decodes."""

    folder: str  # the system folder (<models>/mmt-<src>-<tgt> or mt-<src>-<tgt>)
    store: str | None  # the FeatureStore the MMT reads its images' regions from; None: no regions (text-only route)
    runtime: Runtime  # device and precision
    beam: int  # beam width (synthesis.beam)
    batch_size: int  # captions per decoding batch (synthesis.batch_size)


def _shard_name(parameters: dict[str, Any]) -> str:
    shard: SynthesisShard = parameters["shard"]
    synthesis: SynthesisTask = parameters["synthesis"]
    return f"translate {shard.path.stem} ({system_label(synthesis.system)}, hop {synthesis.hop})"


@task(
    cache_policy=NO_CACHE, persist_result=False, retries=1, retry_delay_seconds=5, task_run_name=named_by(_shard_name)
)
def translate_shard(shard: SynthesisShard, synthesis: SynthesisTask, system: PassSystem) -> int:
    """Translate one shard of captions with a trained system; returns the number of captions."""
    translator = systems.load_system(system.folder, system.store, system.runtime)

    def translate(texts: Sequence[str], image_ids: Sequence[str]) -> list[str]:
        # given up between two batches once the stage is stopping
        return translator.translate(
            texts, image_ids, beam=system.beam, batch_size=system.batch_size, stop=stopping.requested
        )

    run_shard(shard, synthesis, translate)
    return shard.sources.num_rows


def _write_synthesized_name(parameters: dict[str, Any]) -> str:
    return f"write {Path(parameters['out']).name}"


@task(cache_policy=NO_CACHE, persist_result=False, task_run_name=named_by(_write_synthesized_name))
def write_synthesized(tables: list[pa.Table], prepared: str, out: str) -> dict[str, int]:
    """All synthesized captions of one target, checked against the prepared tables, written atomically."""
    corpus = read_prepared(prepared)
    synthesized = pa.concat_tables(tables)
    validate_captions(pa.concat_tables([corpus.captions, synthesized]), images=corpus.images, source=out)
    write_parquet(synthesized, out)
    column = synthesized.column("system").to_pylist()
    return {system: column.count(system) for system in sorted(set(column))}
