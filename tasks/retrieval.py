"""Prefect tasks around :mod:`retrieval`: read the caption tables, train, evaluate, write the metrics."""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from uuid import UUID

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import torch
from prefect import get_run_logger, task
from prefect.artifacts import (
    create_markdown_artifact,
    create_progress_artifact,
    create_table_artifact,
    update_progress_artifact,
)
from prefect.cache_policies import NO_CACHE

from corpora.io import InputError, write_text
from features.store import FeatureStore
from flows.params import Params, RetrievalParams
from retrieval.checkpoint import LoadedModel, load_retrieval, save_retrieval
from retrieval.data import Caption, CaptionSet, encode_captions
from retrieval.encoders import WordEmbedding
from retrieval.evaluation import Metrics
from retrieval.inference import evaluate
from retrieval.losses import RankingLoss
from retrieval.registry import build_model, make_config
from retrieval.report import Sample, results_html, results_markdown
from retrieval.train import FitResult, TrainConfig, fit
from retrieval.vocab import Vocabulary
from tasks.mmt import Runtime, load_system, run_system

CAPTION_COLUMNS = ["caption_id", "image_id", "split", "lang", "text", "origin", "kind"]


def read_captions(path: str, *, split: str, languages: Sequence[str], kinds: Sequence[str] | None,
                  human_only: bool) -> list[dict[str, Any]]:  # fmt: skip
    """Rows of the captions table at ``path`` in ``split`` and ``languages`` (and ``kinds``; human only)."""
    if not Path(path).is_file():
        raise InputError(f"{path}: captions table not found")
    table = pq.read_table(path, columns=CAPTION_COLUMNS)
    keep = pc.and_(pc.equal(table["split"], split), pc.is_in(table["lang"], value_set=_strings(languages)))
    if kinds is not None:
        keep = pc.and_(keep, pc.is_in(table["kind"], value_set=_strings(kinds)))
    if human_only:
        keep = pc.and_(keep, pc.equal(table["origin"], "human"))
    return table.filter(keep).to_pylist()  # type: ignore[no-any-return]


def _strings(values: Sequence[str]) -> pa.Array:
    return pa.array(list(values), pa.string())


def evaluation_captions(rows: list[dict[str, Any]], lang: str, *, source: str) -> list[Caption]:
    """A language's human captions for evaluation: the comparable ones (5 per image) when there are any, else
    the translation ones (Multi30K fr/cs have only those)."""
    own = [row for row in rows if row["lang"] == lang]
    if not own:
        raise InputError(f"{source}: no {lang!r} captions; drop {lang} from retrieval.languages or add captions")
    comparable = [row for row in own if row["kind"] == "comparable"]
    return [_caption(row) for row in (comparable or own)]


def _caption(row: dict[str, Any]) -> Caption:
    return Caption(row["caption_id"], row["image_id"], row["lang"], row["text"], row["origin"])


def type_weights(type_names: Sequence[str], beta: dict[str, float]) -> list[float]:
    """beta_l per language type: the configured ones (types not named get 0), or equal weights."""
    if not beta:
        return [1.0 / len(type_names)] * len(type_names)
    weights = [beta.get(name, 0.0) for name in type_names]
    if sum(weights) <= 0:
        raise InputError(f"retrieval.objective.beta {beta} gives no weight to the training types {list(type_names)}")
    return [weight / sum(weights) for weight in weights]


@task(cache_policy=NO_CACHE, persist_result=False)
def train_retrieval_model(
    params: Params, model_name: str, captions_path: str, store_path: str, word_vectors: str, out_dir: str,
    runtime: Runtime,
) -> dict[str, Any]:  # fmt: skip
    """Train ``model_name`` on the variant at ``captions_path``; write ``out_dir/model.pt``; return the history."""
    logger = get_run_logger()
    retrieval = params.retrieval
    store = FeatureStore.open(store_path)
    languages = retrieval.languages
    train_rows = read_captions(captions_path, split="train", languages=languages, kinds=None, human_only=False)
    train_rows = [row for row in train_rows if row["origin"] != "human" or row["kind"] in retrieval.train_kinds]
    vocab = Vocabulary.build(((row["lang"], row["text"]) for row in train_rows), languages,
                             min_count=retrieval.vocab.min_count)  # fmt: skip
    image_rows = store.row_index
    max_len = retrieval.vocab.max_len
    train = encode_captions([_caption(row) for row in train_rows], vocab, image_rows, max_len=max_len,
                            source=f"{captions_path} (train)")  # fmt: skip
    validation = _validation_sets(retrieval, captions_path, vocab, image_rows, train.type_names)
    config = make_config(model_name, retrieval.configs.get(model_name, {}))
    torch.manual_seed(params.seed)
    model = build_model(model_name, config, vocab_size=len(vocab), languages=len(languages), region_dim=store.dim)
    _load_word_vectors(model, vocab, retrieval.vocab.fasttext, Path(word_vectors))
    objective = retrieval.objective
    loss = RankingLoss(model.default_loss if objective.loss == "auto" else objective.loss, objective.margin,
                       objective.topk, objective.topk_margin)  # fmt: skip
    weights = type_weights(train.type_names, objective.beta)
    logger.info("%s: %d training captions (%s), %d words, %d images in the store; loss %s, beta %s", model_name,
                len(train), ", ".join(train.type_names), len(vocab), len(store), loss.kind,
                dict(zip(train.type_names, weights, strict=True)))  # fmt: skip
    train_config = _train_config(retrieval, params.seed)
    progress = create_progress_artifact(progress=0.0, description=f"{model_name}: epochs done")
    assert isinstance(progress, UUID)  # the sync API inside a sync task returns the id itself

    def on_epoch(entry: dict[str, object]) -> None:
        logger.info("%s epoch %s: %s", model_name, entry["epoch"], json.dumps(entry))
        update_progress_artifact(
            artifact_id=progress, progress=100.0 * (int(str(entry["epoch"])) + 1) / train_config.epochs
        )

    result = fit(model, train, validation, store, loss=loss, type_weights=torch.tensor(weights), config=train_config,
                 device=runtime.torch_device(), autocast=runtime.autocast(), on_epoch=on_epoch)  # fmt: skip
    extra = {"best_epoch": result.best_epoch, "best_val_rsum": result.best_rsum, "history": result.history,
             "store": str(store_path), "store_meta": store.meta, "loss": loss.kind}  # fmt: skip
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    save_retrieval(Path(out_dir) / "model.pt", model, config=config, vocab=vocab, type_names=train.type_names,
                   type_weights=weights, region_dim=store.dim, max_len=max_len, extra=extra)  # fmt: skip
    return _fit_summary(result)


def _validation_sets(retrieval: RetrievalParams, captions_path: str, vocab: Vocabulary, image_rows: Mapping[str, int],
                     type_names: tuple[str, ...]) -> dict[str, CaptionSet]:  # fmt: skip
    rows = read_captions(captions_path, split="val", languages=retrieval.languages, kinds=None, human_only=True)
    first_images = list(dict.fromkeys(row["image_id"] for row in rows))[: retrieval.evaluation.val_images]
    kept = set(first_images)
    rows = [row for row in rows if row["image_id"] in kept]
    source = f"{captions_path} (val)"
    return {lang: encode_captions(evaluation_captions(rows, lang, source=source), vocab, image_rows,
                                  max_len=retrieval.vocab.max_len, source=source, type_names=type_names)
            for lang in retrieval.languages}  # fmt: skip


def _load_word_vectors(model: torch.nn.Module, vocab: Vocabulary, files: dict[str, str], folder: Path) -> None:
    if not files:
        return
    tables = [module for module in model.modules() if isinstance(module, WordEmbedding) and module.num_embeddings > 1]
    if not tables:
        raise InputError(f"retrieval.vocab.fasttext is set, but model {type(model).__name__} has no word embedding")
    logger = get_run_logger()
    for lang, name in files.items():
        for table in tables:
            found = table.load_vectors(vocab.words_of(lang), folder / name)
        logger.info("%s: %d of %d words found in %s", lang, found, len(vocab.words_of(lang)), folder / name)


def _train_config(retrieval: RetrievalParams, seed: int) -> TrainConfig:
    train = retrieval.train
    return TrainConfig(epochs=train.epochs, batch_size=train.batch_size, lr=train.lr,
                       lr_decay_epoch=train.lr_decay_epoch, lr_decay=train.lr_decay, clip=train.clip,
                       synthetic_fraction=train.synthetic_fraction, patience=train.patience,
                       c2c_probability=train.c2c_probability, warmup_epochs=train.warmup_epochs,
                       eval_batch_size=retrieval.evaluation.batch_size,
                       seed=seed)  # fmt: skip


def _fit_summary(result: FitResult) -> dict[str, Any]:
    return {"best_epoch": result.best_epoch, "best_val_rsum": result.best_rsum, "epochs": len(result.history)}


@task(cache_policy=NO_CACHE, persist_result=False)
def evaluate_retrieval_model(
    params: Params, model_dir: str, captions_path: str, store_path: str, mt_models: str, metrics_path: str,
    runtime: Runtime,
) -> dict[str, Any]:  # fmt: skip
    """Test-split R@K per language (and translate-search), written to ``metrics_path`` in the SPEC schema."""
    retrieval = params.retrieval
    device = runtime.torch_device()
    loaded = load_retrieval(Path(model_dir) / "model.pt", device=device)
    store = FeatureStore.open(store_path)
    rows = read_captions(captions_path, split="test", languages=params.languages.all, kinds=None, human_only=True)
    source = f"{captions_path} (test)"
    fold = retrieval.evaluation.fold_images if retrieval.evaluation.protocol == "folds" else None
    metrics: dict[str, Any] = {}
    for lang in loaded.vocab.languages:
        captions = _test_set(loaded, evaluation_captions(rows, lang, source=source), store, source)
        result = evaluate(loaded.model, captions, store, device=device, fold_images=fold,
                          batch_size=retrieval.evaluation.batch_size, autocast=runtime.autocast())  # fmt: skip
        metrics[lang] = _rounded(result)
    pivot = params.languages.pivot
    if retrieval.translate_search.languages and pivot in loaded.vocab.languages:
        metrics["translate_search"] = {
            lang: _translate_search(loaded, rows, lang, pivot, store, mt_models, source, fold, params.mmt.beam, runtime)
            for lang in retrieval.translate_search.languages
        }
    metrics["protocol"] = retrieval.evaluation.protocol
    write_text(metrics_path, json.dumps(metrics, indent=2, sort_keys=True) + "\n")
    table = [{"lang": lang, **_flat(metrics[lang])} for lang in loaded.vocab.languages]
    key = f"retrieval-{Path(model_dir).name}".replace("_", "-")
    create_table_artifact(key=key, table=table, description="Test split: R@K per language and direction")
    return metrics


def _test_set(loaded: LoadedModel, captions: list[Caption], store: FeatureStore, source: str) -> CaptionSet:
    # Test captions are human ones; their language type may be absent from training (e.g. de-human when the
    # model was trained on en and synthesized de only), so they get their own type list.
    return encode_captions(captions, loaded.vocab, store.row_index, max_len=loaded.max_len, source=source)


def _translate_search(
    loaded: LoadedModel, rows: list[dict[str, Any]], lang: str, pivot: str, store: FeatureStore, mt_models: str,
    source: str, fold: int | None, beam: int, runtime: Runtime,
) -> dict[str, Any]:  # fmt: skip
    """Table 5: ``lang`` test queries translated to ``pivot`` by the text-only MT system, searched in ``pivot``."""
    system_dir = Path(mt_models) / f"mt-{lang}-{pivot}"
    if not system_dir.is_dir():
        message = f"no {lang}->{pivot} MT system for translate-search; add {lang} to mmt.targets"
        raise InputError(f"{system_dir}: {message}")
    queries = evaluation_captions(rows, lang, source=source)
    system = load_system(str(system_dir), None, runtime)
    translated = run_system(system, [c.text for c in queries], None, beam=beam, batch_size=64)
    # An empty translation stays a query (of unknown words only) so that every query is still counted.
    as_pivot = [Caption(c.caption_id, c.image_id, pivot, text or "<unk>", "mt")
                for c, text in zip(queries, translated, strict=True)]  # fmt: skip
    captions = _test_set(loaded, as_pivot, store, source)
    return _rounded(evaluate(loaded.model, captions, store, device=runtime.torch_device(), fold_images=fold,
                             autocast=runtime.autocast()))  # fmt: skip


def _rounded(metrics: Metrics) -> dict[str, Any]:
    """Values to 4 decimals, so the metrics files do not carry float noise such as 88.60000000000001."""

    def rounded(value: Any) -> Any:
        if isinstance(value, dict):
            return {key: rounded(inner) for key, inner in value.items()}
        return round(value, 4) if isinstance(value, float) else value

    return {key: rounded(value) for key, value in metrics.items()}


def _flat(metrics: dict[str, Any]) -> dict[str, float]:
    return {f"{direction}_r{k}": metrics[direction][f"r{k}"] for direction in ("i2t", "t2i") for k in (1, 5, 10)} | {
        "rsum": metrics["rsum"], "mr": metrics["mr"]}  # fmt: skip


@task(cache_policy=NO_CACHE, persist_result=False)
def write_report(metrics_dir: str, augmented: str, prepared: str, images: str, out_dir: str, samples: int) -> str:
    """``results.md`` and ``index.html`` from every ``<model>-<variant>.json`` in ``metrics_dir``."""
    files = sorted(Path(metrics_dir).glob("*.json"))
    if not files:
        raise InputError(f"{metrics_dir}: no retrieval metrics files (run the train_retrieval stages first)")
    results = {path.stem: json.loads(path.read_text(encoding="utf-8")) for path in files}
    markdown = results_markdown(results)
    pages = _samples(augmented, prepared, images, samples)
    write_text(Path(out_dir) / "results.md", markdown)
    write_text(Path(out_dir) / "index.html", results_html(results, pages))
    create_markdown_artifact(key="retrieval-results", markdown=markdown, description="Retrieval results")
    return markdown


def _samples(augmented: str, prepared: str, images: str, count: int) -> list[Sample]:
    """The first ``count`` train images with synthesized captions in the richest variant present."""
    variants = [name for name in ("mmt_fb", "mmt_f", "mt_fb", "mt_f") if (Path(augmented) / name).is_dir()]
    if not variants or count == 0:
        return []
    table = pq.read_table(Path(augmented) / variants[0] / "captions.parquet")
    rows = table.filter(pc.equal(table["split"], "train")).to_pylist()
    by_image: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_image.setdefault(row["image_id"], []).append(row)
    synthesized_parents = {row["parent_id"] for row in rows if row["origin"] != "human"}
    paths = {row["image_id"]: row["path"] for row in pq.read_table(Path(prepared) / "images.parquet").to_pylist()}
    samples = []
    for image_id, captions in by_image.items():
        source = next((c for c in captions if c["caption_id"] in synthesized_parents), None)
        if source is None:
            continue
        chain = [("human " + source["lang"], source["text"])]
        children = [c for c in captions if c["parent_id"] == source["caption_id"]]
        for child in children:
            chain.append((f"{child['system']} hop {child['hop']} {child['lang']}", child["text"]))
            chain += [(f"{g['system']} hop {g['hop']} {g['lang']}", g["text"]) for g in captions
                      if g["parent_id"] == child["caption_id"]]  # fmt: skip
        samples.append(Sample(image_id, _thumbnail(Path(images) / paths[image_id]), tuple(chain)))
        if len(samples) == count:
            break
    return samples


def _thumbnail(path: Path) -> bytes:
    from PIL import Image

    with Image.open(path) as original:
        image = original.convert("RGB")
    image.thumbnail((160, 160))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()
