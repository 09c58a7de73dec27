"""One retrieval run from the caption tables: read, build the vocabulary, train, save; test; translate-search.

:func:`train_model` trains one model on one caption variant (human + synthesized captions) and writes its
checkpoint (``model.safetensors`` + ``model.json``); :func:`test_model` scores a saved model on the test split's
human captions, per language; :func:`translate_search` scores queries translated into the pivot language first
(Table 5). The settings are :class:`~retrieval.config.RetrievalConfig` (the `retrieval` section of params.yaml); what
becomes of a run's metrics and history (replicates combined, rows for tables) is :mod:`retrieval.results`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import torch

from common.distributed import is_writer
from common.epoch_log import EpochLine
from common.errors import InputError
from common.runtime import Runtime
from common.train_state import ResumePoint, fingerprint
from corpora.prepared import read_caption_variant
from features.store import FeatureStore
from retrieval.checkpoint import MODEL, LoadedModel, save_retrieval
from retrieval.config import RetrievalConfig
from retrieval.data import Caption, CaptionSet, encode_captions
from retrieval.encoders import WordEmbedding
from retrieval.inference import EvaluationConfig, evaluate_ranked
from retrieval.model import RetrievalModel
from retrieval.results import rounded
from retrieval.roles import ResolvedRole
from retrieval.setups import OneLanguageSampler, select_training_rows
from retrieval.significance import QueryRanks
from retrieval.train import FitResult, fit
from retrieval.vocab import Vocabulary
from retrieval.zoo.registry import build_model

logger = logging.getLogger(__name__)

CAPTION_COLUMNS = ["caption_id", "image_id", "split", "lang", "text", "origin", "kind"]
Translate = Callable[[list[str]], list[str]]  # query texts -> their translations, one each
SPLIT_USE = {"train": "retrieval trains on it", "val": "it selects the epoch", "test": "it is the test set"}


def read_captions(
    path: Path, *, split: str, languages: Sequence[str], kinds: Sequence[str] | None, human_only: bool
) -> list[dict[str, Any]]:
    """Rows of the captions at ``path`` in ``split`` and ``languages`` (and ``kinds``; human only). ``path`` is a
    caption variant's folder (one file per language, of which only ``languages`` are read) or one captions table.

    Raises:
        InputError: ``path`` is missing, or holds no caption of ``split`` at all (every split read here is needed).
    """
    if path.is_dir():
        table = read_caption_variant(path, languages=languages, columns=CAPTION_COLUMNS)
    elif path.is_file():
        table = pq.read_table(path, columns=CAPTION_COLUMNS)
    else:
        raise InputError(f"{path}: captions table not found")
    if not pc.any(pc.equal(table["split"], split)).as_py():
        raise InputError(f"{path}: the {split} split is empty, but {SPLIT_USE.get(split, 'it is evaluated')}")
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
    return [as_caption(row) for row in (comparable or own)]


def as_caption(row: dict[str, Any]) -> Caption:
    return Caption(row["caption_id"], row["image_id"], row["lang"], row["text"], row["origin"])


def train_model(
    config: RetrievalConfig,
    name: str,
    role: ResolvedRole,
    captions_path: Path,
    store_path: Path,
    word_vectors: Path,
    out_dir: Path,
    *,
    seed: int,
    runtime: Runtime,
    on_epoch: Callable[[EpochLine], None] | None = None,
    label: str | None = None,
    resume_state: Path | None = None,
) -> FitResult:
    """Train model ``name`` on the captions of the variant at ``captions_path`` that ``role`` keeps; select the
    epoch on the role's test languages; write the checkpoint ``out_dir/model`` (``model.safetensors`` + ``.json``).
    ``label`` starts each epoch's log line (default: ``<name> seed <seed>``); ``on_epoch`` gets each line.
    ``resume_state``: the file the fit keeps its resumable state in (:func:`training_fingerprint` says which state
    is this run's); the caller removes it once the run's outputs are in place.

    Raises:
        InputError: the role tests a language it has no training captions of in this variant.
    """
    store = FeatureStore.open(store_path)
    rows = training_rows(config, role, captions_path)
    present = {row["lang"] for row in rows}
    languages = tuple(lang for lang in role.train_languages if lang in present)
    untrained = [lang for lang in role.test if lang not in present]
    if untrained:
        raise InputError(
            f"{captions_path}: no training captions of {', '.join(untrained)} that the role keeps "
            f"({_selectors(role)}), but it is tested on {', '.join(role.test)}"
        )
    vocab = Vocabulary.build(((row["lang"], row["text"]) for row in rows), languages, min_count=config.vocab.min_count)
    max_len = config.vocab.max_len
    train = encode_captions(
        [as_caption(row) for row in rows], vocab, store.row_index, max_len=max_len, source=f"{captions_path} (train)"
    )
    validation = _validation_sets(config, role.test, captions_path, vocab, store.row_index)
    model_config = config.model_config(name)
    torch.manual_seed(seed)
    model = build_model(
        config.registry_model(name), model_config, vocab_size=len(vocab), languages=len(languages), region_dim=store.dim
    )
    load_word_vectors(model, vocab, config.vocab.fasttext, word_vectors)
    loss = config.objective.for_model(config.registry_model(name), model.default_loss)
    try:
        weights = loss.type_weights(train.type_names)
    except ValueError as error:
        raise InputError(str(error)) from None
    logger.info(
        "%s: %d training captions (%s), %d words, %d images in the store; loss %s, beta %s",
        name,
        len(train),
        ", ".join(train.type_names),
        len(vocab),
        len(store),
        loss.kind,
        ", ".join(f"{type_name} {weight:g}" for type_name, weight in zip(train.type_names, weights, strict=True)),
    )
    resume = None
    if resume_state is not None:
        identity = training_fingerprint(
            config, name, model_config, role, seed, runtime, vocab, train, validation, store.meta, model
        )
        resume = ResumePoint(resume_state, identity)
    setup = role.setup
    train_config = config.train
    if setup.c2c_probability is not None:
        train_config = dataclasses.replace(train_config, c2c_probability=setup.c2c_probability)
    one_language = setup.batches == "one_language"
    result = fit(
        model,
        train,
        validation,
        store,
        loss=loss,
        type_weights=torch.tensor(weights),
        config=train_config,
        seed=seed,
        sampler=OneLanguageSampler(train.langs, train_config.batch_size, seed) if one_language else None,
        device=runtime.torch_device(),
        autocast=runtime.autocast(),
        eval_batch_size=config.evaluation.batch_size,
        name=label or f"{name} seed {seed}",
        on_epoch=on_epoch,
        resume=resume,
    )
    if not is_writer():  # another data-parallel rank holds the same weights and writes them
        return result
    # the history without its timings (steps per second): the same run writes the same checkpoint bytes
    history = [{key: value for key, value in entry.items() if key != "steps_per_s"} for entry in result.history]
    extra = {
        "best_epoch": result.best_epoch,
        "best_val_rsum": result.best_rsum,
        "history": history,
        "store": str(store_path),
        "store_meta": store.meta,
        "loss": loss.kind,
        "test_languages": list(role.test),
        "train_selectors": _selectors(role),
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    save_retrieval(
        out_dir / MODEL,
        model,
        config=model_config,
        vocab=vocab,
        type_names=train.type_names,
        type_weights=weights,
        region_dim=store.dim,
        max_len=max_len,
        extra=extra,
    )
    return result


def training_fingerprint(
    config: RetrievalConfig,
    name: str,
    model_config: object,
    role: ResolvedRole,
    seed: int,
    runtime: Runtime,
    vocab: Vocabulary,
    train: CaptionSet,
    validation: Mapping[str, CaptionSet],
    store_meta: Mapping[str, Any],
    model: RetrievalModel,
) -> str:
    """What a training run depends on, for its resume state: the settings its stage tracks (schedule, loss,
    vocabulary, caption kinds, validation scoring, the model and its config, role, seed, device type and precision),
    the vocabulary's entries, the encoded training and validation captions, the feature store's meta.json and the
    initial weights (which carry the word vectors)."""
    settings = (config.train, config.objective, config.vocab, config.train_kinds, config.evaluation)
    where = (runtime.torch_device().type, runtime.precision)
    data = (vocab.languages, vocab.entries, _captions_sha256([train, *validation.values()]), dict(store_meta))
    return fingerprint(settings, name, model_config, role, seed, where, data, _weights_sha256(model))


def _captions_sha256(sets: Iterable[CaptionSet]) -> str:
    digest = hashlib.sha256()
    for captions in sets:
        digest.update("\n".join((*captions.caption_ids, *captions.image_ids, *captions.type_names)).encode())
        lengths = np.array([len(tokens) for tokens in captions.tokens], dtype=np.int64)  # where each caption ends
        for array in (
            lengths,
            *captions.tokens,
            captions.image_rows,
            captions.langs,
            captions.types,
            captions.synthetic,
        ):
            digest.update(array.tobytes())
    return digest.hexdigest()


def _weights_sha256(model: torch.nn.Module) -> str:
    digest = hashlib.sha256()
    for key, tensor in sorted(model.state_dict().items()):
        digest.update(key.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def training_rows(config: RetrievalConfig, role: ResolvedRole, captions_path: Path) -> list[dict[str, Any]]:
    """The train split's captions that ``role`` keeps (human ones of ``config.train_kinds`` only, or of the role's
    setup's kinds), then those its setup selects (:func:`~retrieval.setups.select_training_rows`)."""
    rows = read_captions(captions_path, split="train", languages=role.train_languages, kinds=None, human_only=False)
    kinds = role.setup.kinds or config.train_kinds
    rows = [
        row
        for row in rows
        if role.keeps(row["lang"], row["origin"]) and (row["origin"] != "human" or row["kind"] in kinds)
    ]
    return select_training_rows(rows, role.setup, role.train_languages)


def _selectors(role: ResolvedRole) -> str:
    return ", ".join(f"{lang}:{origin}" if origin else lang for lang, origin in role.train)


def _validation_sets(
    config: RetrievalConfig,
    languages: tuple[str, ...],
    captions_path: Path,
    vocab: Vocabulary,
    image_rows: Mapping[str, int],
) -> dict[str, CaptionSet]:
    # Human captions, scored only: like test captions, their language type may be absent from training
    # (de-human when a role discards it), so they get their own type list.
    rows = read_captions(captions_path, split="val", languages=languages, kinds=None, human_only=True)
    kept = set(list(dict.fromkeys(row["image_id"] for row in rows))[: config.evaluation.val_images])
    rows = [row for row in rows if row["image_id"] in kept]
    source = f"{captions_path} (val)"
    return {
        lang: encode_captions(
            evaluation_captions(rows, lang, source=source),
            vocab,
            image_rows,
            max_len=config.vocab.max_len,
            source=source,
        )
        for lang in languages
    }


def load_word_vectors(model: torch.nn.Module, vocab: Vocabulary, files: dict[str, str], folder: Path) -> None:
    """FastText vectors into every word table of ``model``, for the languages ``files`` names."""
    if not files:
        return
    tables = [module for module in model.modules() if isinstance(module, WordEmbedding) and module.num_embeddings > 1]
    if not tables:
        raise InputError(f"retrieval.vocab.fasttext is set, but model {type(model).__name__} has no word embedding")
    for lang, name in files.items():
        if lang not in vocab.languages:  # a language this run does not train on
            continue
        for table in tables:
            found = table.load_vectors(vocab.words_of(lang), folder / name)
        logger.info("%s: %d of %d words found in %s", lang, found, len(vocab.words_of(lang)), folder / name)


def test_model(
    loaded: LoadedModel,
    rows: list[dict[str, Any]],
    store: FeatureStore,
    evaluation: EvaluationConfig,
    languages: Sequence[str],
    *,
    source: str,
    runtime: Runtime,
    ranks: dict[str, QueryRanks] | None = None,
) -> dict[str, Any]:
    """Test R@K of the model per language of ``languages`` (``rows``: the test split's human captions); with
    the ``both`` protocol, the fold means too, under ``<lang>-folds``. ``ranks``, when given, gets each test set's
    per-query ranks under its metrics key."""
    metrics: dict[str, Any] = {}
    for lang in languages:
        captions = encode_test_set(loaded, evaluation_captions(rows, lang, source=source), store, source)
        keys = {lang: evaluation.folds}
        if evaluation.protocol == "both":
            keys[f"{lang}-folds"] = evaluation.fold_images
        for key, fold_images in keys.items():
            metrics[key], ranked = ranked_test_set(loaded, captions, store, evaluation, fold_images, runtime=runtime)
            if ranks is not None:
                ranks[key] = ranked
    return metrics


def encode_test_set(loaded: LoadedModel, captions: list[Caption], store: FeatureStore, source: str) -> CaptionSet:
    """``captions`` encoded for the model. Test captions are human ones; their language type may be absent from
    training (e.g. de-human when the model was trained on en and synthesized de only), so they get their own type
    list."""
    return encode_captions(captions, loaded.vocab, store.row_index, max_len=loaded.max_len, source=source)


def score_test_set(
    loaded: LoadedModel,
    captions: CaptionSet,
    store: FeatureStore,
    evaluation: EvaluationConfig,
    fold_images: int | None,
    *,
    runtime: Runtime,
) -> dict[str, Any]:
    """R@K of the model on the encoded ``captions`` (over folds of ``fold_images`` images, or the whole set), rounded
    as the metrics files hold them."""
    return ranked_test_set(loaded, captions, store, evaluation, fold_images, runtime=runtime)[0]


def ranked_test_set(
    loaded: LoadedModel,
    captions: CaptionSet,
    store: FeatureStore,
    evaluation: EvaluationConfig,
    fold_images: int | None,
    *,
    runtime: Runtime,
) -> tuple[dict[str, Any], QueryRanks]:
    """:func:`score_test_set`'s metrics and the per-query ranks they come from."""
    metrics, ranks = evaluate_ranked(
        loaded.model,
        captions,
        store,
        device=runtime.torch_device(),
        fold_images=fold_images,
        batch_size=evaluation.batch_size,
        autocast=runtime.autocast(),
    )
    return rounded(metrics), ranks


def translate_search(
    loaded: LoadedModel,
    rows: list[dict[str, Any]],
    lang: str,
    pivot: str,
    store: FeatureStore,
    translate: Translate,
    evaluation: EvaluationConfig,
    *,
    source: str,
    runtime: Runtime,
    ranks: dict[str, QueryRanks] | None = None,
) -> dict[str, Any]:
    """Table 5: ``lang`` test queries translated to ``pivot`` by ``translate``, searched in ``pivot``. ``ranks``, when
    given, gets the per-query ranks under ``translate_search.<lang>`` (the queries keep their ids)."""
    queries = evaluation_captions(rows, lang, source=source)
    translated = translate([caption.text for caption in queries])
    if len(translated) != len(queries):
        raise ValueError(f"translation to {pivot} returned {len(translated)} sentences for {len(queries)} queries")
    # An empty (or blank) translation stays a query, of unknown words only, so that every query is still counted.
    as_pivot = [
        Caption(c.caption_id, c.image_id, pivot, text.strip() or "<unk>", "mt")
        for c, text in zip(queries, translated, strict=True)
    ]
    captions = encode_test_set(loaded, as_pivot, store, source)
    metrics, ranked = ranked_test_set(loaded, captions, store, evaluation, evaluation.folds, runtime=runtime)
    if ranks is not None:
        ranks[f"translate_search.{lang}"] = ranked
    return metrics
