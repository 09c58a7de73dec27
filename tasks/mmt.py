"""Prefect tasks of the MMT stages: build a direction's data, train text pipelines and models, evaluate,
synthesize captions. Thin: the models, training loop and decoding live in ``mmt/``."""

from __future__ import annotations

import functools
import json
import shutil
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import torch
from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from corpora.io import InputError, atomic_dir, write_text
from corpora.prepared import Corpus, read_prepared
from corpora.tables import validate_captions, write_parquet
from features.checkpoints import checkpoint_sha256
from features.store import FeatureStore
from flows.params import MMTParams, TrainingParams
from mmt.checkpoint import load_pretrained_into
from mmt.marian import MarianTrainConfig, MarianTranslator, train_marian
from mmt.metrics import translation_scores
from mmt.model import MMTConfig, RegionalMMT
from mmt.synthesis import SynthesisShard, SynthesisTask, run_shard
from mmt.text import TextPipeline
from mmt.train import Example, TrainConfig, fit
from mmt.translator import MMTTranslator
from tasks.runtime import Precision, autocast, resolve_device

VALIDATION_SENTENCES = 500  # validation BLEU (early stopping) on at most this many sentences, greedy decoding


@dataclass(frozen=True)
class Pairs:
    """Aligned sentences of one split (with the image of each pair for caption data)."""

    src: list[str]
    tgt: list[str]
    image_ids: list[str] | None = None


@dataclass(frozen=True)
class DirectionData:
    corpus: dict[str, Pairs]  # split -> text-only parallel corpus (pre-training)
    captions: dict[str, Pairs]  # split -> translation captions of the same images (fine-tuning, test)


@dataclass(frozen=True)
class Runtime:
    """Device and precision as plain values (resolved once by the flow)."""

    device: str
    precision: Precision

    def torch_device(self) -> torch.device:
        return resolve_device(self.device)

    def autocast(self) -> Callable[[], AbstractContextManager[object]]:
        return functools.partial(autocast, self.torch_device(), self.precision)


def direction_data(corpus: Corpus, *, pivot: str, target: str, src: str, tgt: str) -> DirectionData:
    """The parallel corpus of the pivot-target pair and the translation captions, oriented src -> tgt."""
    name = f"{pivot}-{target}"
    if name not in corpus.parallel:
        raise InputError(f"prepared tables: no parallel corpus {name}.parquet (check paths.parallel)")
    table = corpus.parallel[name]
    columns = ("src", "tgt") if src == pivot else ("tgt", "src")
    text = {
        split: Pairs(*(table.filter(pc.equal(table.column("split"), split)).column(c).to_pylist() for c in columns))
        for split in ("train", "val", "test")
    }
    captions = {split: _caption_pairs(corpus.captions, src, tgt, split) for split in ("train", "val", "test")}
    return DirectionData(text, captions)


def _caption_pairs(captions: pa.Table, src: str, tgt: str, split: str) -> Pairs:
    """Translation captions (Multi30K task1 style) of ``split`` in both languages, joined on the image."""
    kind = captions.filter(
        pc.and_(pc.equal(captions.column("kind"), "translation"), pc.equal(captions.column("split"), split))
    )
    by_lang = {}
    for lang in (src, tgt):
        rows = kind.filter(pc.equal(kind.column("lang"), lang))
        by_lang[lang] = dict(zip(rows.column("image_id").to_pylist(), rows.column("text").to_pylist(), strict=True))
    images = [image_id for image_id in by_lang[src] if image_id in by_lang[tgt]]
    return Pairs([by_lang[src][i] for i in images], [by_lang[tgt][i] for i in images], images)


def _examples(text: TextPipeline, pairs: Pairs, store: FeatureStore | None) -> list[Example]:
    sources, targets = text.encode_source(pairs.src), text.encode_target(pairs.tgt)
    if sources.truncated or targets.truncated:
        get_run_logger().warning(
            "Truncated %d source and %d target sentences to %d subwords",
            sources.truncated,
            targets.truncated,
            text.config.max_len,
        )
    rows: list[int | None] = [None] * len(pairs.src)
    if store is not None and pairs.image_ids is not None:
        rows = [int(row) for row in store.rows(pairs.image_ids)]
    return [Example(tuple(src), tuple(tgt), row) for src, tgt, row in zip(sources.ids, targets.ids, rows, strict=True)]


def _bleu(translator: MMTTranslator, pairs: Pairs, *, beam: int, limit: int | None = None) -> float:
    count = len(pairs.src) if limit is None else min(limit, len(pairs.src))
    images = pairs.image_ids[:count] if pairs.image_ids is not None and translator.regions is not None else None
    hypotheses = translator.translate(pairs.src[:count], images, beam=beam)
    score = translation_scores(hypotheses, pairs.tgt[:count], translator.text.config.tgt_lang)["bleu"]
    assert isinstance(score, float)
    return score


def _train_config(params: TrainingParams, seed: int) -> TrainConfig:
    return TrainConfig(epochs=params.epochs, batch_size=params.batch_size, lr=params.lr, patience=params.patience,
                       seed=seed)  # fmt: skip


def _fit(
    model: RegionalMMT,
    text: TextPipeline,
    data: tuple[Pairs, Pairs],
    *,
    store: FeatureStore | None,
    training: TrainingParams,
    seed: int,
    runtime: Runtime,
    checkpoint: Path,
    name: str,
) -> float:
    """Train on ``data[0]``, early-stopping on greedy BLEU of ``data[1]``; the best weights end in ``checkpoint``."""
    logger = get_run_logger()
    device = runtime.torch_device()
    translator = MMTTranslator(model, text, name=name, regions=store, device=device, autocast=runtime.autocast())

    def report(record: dict[str, float]) -> None:
        if "score" in record or record["step"] % 100 == 0:
            logger.info("%s: %s", name, "  ".join(f"{key} {value:.4g}" for key, value in record.items()))

    result = fit(
        model,
        _examples(text, data[0], store),
        regions=store,
        evaluate=lambda _: _bleu(translator, data[1], beam=1, limit=VALIDATION_SENTENCES),
        config=_train_config(training, seed),
        device=device,
        autocast=runtime.autocast(),
        checkpoint_path=checkpoint,
        progress=report,
    )
    logger.info("%s: best validation BLEU %.2f at step %d", name, result.best_score, result.best_step)
    return result.best_score


@task(cache_policy=NO_CACHE, persist_result=False)
def train_text_pipeline(
    data: DirectionData, params: MMTParams, *, src: str, tgt: str, out_dirs: list[str], seed: int
) -> None:
    """Subword vocabularies from the pre-training corpus and the caption training text, saved in every folder."""
    corpus, captions = data.corpus["train"], data.captions["train"]
    first = Path(out_dirs[0])
    text = TextPipeline.train(
        corpus.src + captions.src, corpus.tgt + captions.tgt, src_lang=src, tgt_lang=tgt,
        vocab_size=params.text.vocab_size, joint=params.text.joint, lowercase=params.text.lowercase,
        max_len=params.text.max_len, out_dir=first, seed=seed,
    )  # fmt: skip
    for folder in out_dirs[1:]:
        text.save(Path(folder))


@task(cache_policy=NO_CACHE, persist_result=False)
def pretrain(
    data: DirectionData, params: MMTParams, *, model_dir: str, region_dim: int, seed: int, runtime: Runtime
) -> float:
    """Text-only pre-training (one thread, no visual token) on the parallel corpus -> ``pretrain.pt``."""
    text = TextPipeline.load(Path(model_dir))
    torch.manual_seed(seed)
    model = RegionalMMT(_model_config(text, params, region_dim))
    return _fit(
        model, text, (data.corpus["train"], data.corpus["val"]), store=None, training=params.pretrain, seed=seed,
        runtime=runtime, checkpoint=Path(model_dir) / "pretrain.pt", name=f"pretrain {Path(model_dir).name}",
    )  # fmt: skip


@task(cache_policy=NO_CACHE, persist_result=False)
def finetune(
    data: DirectionData,
    params: MMTParams,
    *,
    pretrained: str,
    model_dir: str,
    store_path: str | None,
    region_dim: int,
    seed: int,
    runtime: Runtime,
) -> float:
    """Fine-tune from ``pretrained`` on the translation captions; with a store, multimodal (the visual
    projection starts fresh), without one, text-only (the MT system) -> ``<model_dir>/finetune.pt``."""
    text = TextPipeline.load(Path(model_dir))
    torch.manual_seed(seed)
    model = RegionalMMT(_model_config(text, params, region_dim))
    fresh = load_pretrained_into(model, pretrained)
    get_run_logger().info("Fine-tuning %s from %s; newly initialised: %s", Path(model_dir).name, pretrained, fresh)
    store = FeatureStore.open(store_path) if store_path else None
    return _fit(
        model, text, (data.captions["train"], data.captions["val"]), store=store, training=params.finetune, seed=seed,
        runtime=runtime, checkpoint=Path(model_dir) / "finetune.pt", name=f"finetune {Path(model_dir).name}",
    )  # fmt: skip


def _model_config(text: TextPipeline, params: MMTParams, region_dim: int) -> MMTConfig:
    return MMTConfig(
        src_vocab=text.src_vocab.size, tgt_vocab=text.tgt_vocab.size, emb_dim=params.model.emb_dim,
        hidden=params.model.hidden, region_dim=region_dim, dropout=params.model.dropout,
        max_len=params.text.max_len,
    )  # fmt: skip


@task(cache_policy=NO_CACHE, persist_result=False)
def evaluate_system(
    data: DirectionData, *, model_dir: str, store_path: str | None, tgt: str, beam: int, runtime: Runtime,
    metrics_path: str,
) -> dict[str, object]:  # fmt: skip
    """BLEU (both conventions), chrF and the METEOR note on the test captions -> a metrics JSON file."""
    system = load_system(model_dir, store_path, runtime)
    test = data.captions["test"]
    hypotheses = run_system(system, test.src, test.image_ids, beam=beam, batch_size=64)
    scores = translation_scores(hypotheses, test.tgt, tgt)
    metrics = {**scores, "test_sentences": len(test.src), "beam": beam}
    write_text(metrics_path, json.dumps(metrics, indent=2, sort_keys=True) + "\n")
    get_run_logger().info("%s test: BLEU %.2f (lowercased, tokenised), sacreBLEU %.2f, chrF %.2f", Path(model_dir).name,
                          scores["bleu"], scores["sacrebleu"], scores["chrf"])  # fmt: skip
    return metrics


@task(cache_policy=NO_CACHE, persist_result=False)
def build_marian(
    data: DirectionData, params: MMTParams, *, src: str, tgt: str, mt_models: str, out_dir: str, seed: int,
    runtime: Runtime,
) -> None:  # fmt: skip
    """The Marian MT system of a direction: a model folder you hold (copied in) or one trained here."""
    pair, logger = f"{src}-{tgt}", get_run_logger()
    if pair in params.marian.local_dirs:
        source = Path(mt_models) / params.marian.local_dirs[pair]
        MarianTranslator.from_local(source, device=torch.device("cpu"))  # fails fast on a wrong folder
        with atomic_dir(out_dir) as tmp:
            shutil.copytree(source, tmp, dirs_exist_ok=True)
        logger.info("Using the Marian model %s for %s", source, pair)
        return
    marian = params.marian
    config = MarianTrainConfig(vocab_size=params.text.vocab_size, d_model=marian.d_model, encoder_layers=marian.layers,
                               decoder_layers=marian.layers, batch_size=marian.batch_size, epochs=marian.epochs,
                               learning_rate=marian.lr, max_len=params.text.max_len)  # fmt: skip
    corpus, captions = data.corpus["train"], data.captions["train"]
    logger.info("Training a Marian model for %s from scratch (%d pairs)", pair, len(corpus.src) + len(captions.src))
    train_marian(corpus.src + captions.src, corpus.tgt + captions.tgt, out_dir=Path(out_dir), src_lang=src,
                 tgt_lang=tgt, config=config, val=(data.captions["val"].src, data.captions["val"].tgt),
                 device=runtime.torch_device(), seed=seed)  # fmt: skip


System = MMTTranslator | MarianTranslator


@functools.lru_cache(maxsize=4)
def load_system(model_dir: str, store_path: str | None, runtime: Runtime) -> System:
    """A trained system folder (ours: ``finetune.pt``; Marian: ``config.json``), loaded once per process."""
    folder = Path(model_dir)
    if not (folder / "finetune.pt").is_file() and (folder / "config.json").is_file():
        return MarianTranslator.from_local(folder, device=runtime.torch_device())
    store = FeatureStore.open(store_path) if store_path else None
    device = runtime.torch_device()
    return MMTTranslator.load(model_dir, "finetune.pt", regions=store, device=device, autocast=runtime.autocast())


def run_system(
    system: System, texts: Sequence[str], image_ids: Sequence[str] | None, *, beam: int, batch_size: int
) -> list[str]:
    if isinstance(system, MarianTranslator):
        return system.translate(texts, beam=beam, batch_size=batch_size)
    images = image_ids if system.regions is not None else None
    return system.translate(texts, images, beam=beam, batch_size=batch_size)


def system_sha256(model_dir: str) -> str:
    """Hash of a system's weights file (synthesis shards are keyed on it)."""
    folder = Path(model_dir)
    weights = folder / "finetune.pt" if (folder / "finetune.pt").is_file() else folder / "model.safetensors"
    return checkpoint_sha256(weights)


@task(cache_policy=NO_CACHE, persist_result=False, retries=1, retry_delay_seconds=5)
def translate_shard(
    shard: SynthesisShard, synthesis: SynthesisTask, model_dir: str, store_path: str | None, runtime: Runtime,
    beam: int, batch_size: int,
) -> int:  # fmt: skip
    """Translate one shard of captions with a trained system; returns the number of captions."""
    system = load_system(model_dir, store_path, runtime)

    def translate(texts: Sequence[str], image_ids: Sequence[str]) -> list[str]:
        return run_system(system, texts, image_ids, beam=beam, batch_size=batch_size)

    run_shard(shard, synthesis, translate)
    return shard.sources.num_rows


@task(cache_policy=NO_CACHE, persist_result=False)
def write_synthesized(tables: list[pa.Table], prepared: str, out: str) -> dict[str, int]:
    """All synthesized captions of one target, checked against the prepared tables, written atomically."""
    corpus = read_prepared(prepared)
    synthesized = pa.concat_tables(tables)
    validate_captions(pa.concat_tables([corpus.captions, synthesized]), images=corpus.images, source=out)
    write_parquet(synthesized, out)
    systems = synthesized.column("system").to_pylist()
    return {system: systems.count(system) for system in sorted(set(systems))}
