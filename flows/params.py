"""The only reader of ``params.yaml``: loads it once into frozen, typed configuration.

Every knob of the pipeline lives in ``params.yaml``. This module turns it into the dataclasses below and
fails at load time, naming the key path, the bad value and what is allowed, on an unknown key, a missing
key, a wrong type or a value out of range. Library code never sees the raw tree: flows pass it the typed
pieces it needs.
"""

from __future__ import annotations

import re
import types
import typing
from dataclasses import MISSING, dataclass, fields, is_dataclass
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import yaml

from corpora.languages import ISO_639_1

CANONICAL_SPLITS = ("train", "val", "test")


class ParamsError(ValueError):
    """``params.yaml`` is invalid; the message starts with the file and the key path."""


@dataclass(frozen=True)
class Languages:
    pivot: str  # the language of the English-only models and of backward translation (ISO 639-1)
    targets: tuple[str, ...]  # languages translated to and from the pivot; order is kept

    @property
    def all(self) -> tuple[str, ...]:
        return (self.pivot, *self.targets)


@dataclass(frozen=True)
class Paths:
    synthetic: str  # where the `generate` stage writes the built-in dataset
    source: str  # what `prepare` reads: a Multi30K-layout folder, a Karpathy JSON file or a SCAN folder
    images: str  # the image folder; images.parquet paths are relative to it
    parallel: str  # text-only parallel corpus folder: <pivot>-<target>/<split>.<lang>[.gz|.sgm]
    prepared: str  # canonical tables (output of `prepare`)
    boxes: str  # given boxes per image (+ object/attribute labels): the generator's objects.parquet
    feature_inputs: str  # what you hold for `features`: detector checkpoints, SCAN *_ims.npy, bottom-up TSV files
    features: str  # FeatureStores, one folder per extractor: <features>/<extractor>/
    work: str  # resumable intermediate work (finished shards of an interrupted run); not versioned
    metrics: str  # metrics files, one folder per family
    models: str  # trained models: <models>/mmt/<system>-<src>-<tgt>/
    mt_models: str  # Marian model folders you hold (e.g. an opus-mt model downloaded elsewhere), one per pair
    synthesized: str  # synthesized captions per target language: <synthesized>/<tgt>.parquet
    augmented: str  # caption variants: <augmented>/<variant>/captions.parquet
    word_vectors: str  # FastText .vec files you hold for retrieval.vocab.fasttext
    reports: str  # results.md and index.html


@dataclass(frozen=True)
class SplitSizes:
    train: int
    val: int
    test: int


@dataclass(frozen=True)
class ObjectRange:
    min: int
    max: int


@dataclass(frozen=True)
class GenerateParams:
    image_size: int
    splits: SplitSizes  # images per split
    objects_per_image: ObjectRange
    comparable_per_image: int
    parallel_pairs: SplitSizes  # sentence pairs per language pair and split


@dataclass(frozen=True)
class Multi30kStems:
    task1: str | None  # file stem in task1/ (e.g. test_2016_flickr), null: task1 lacks the split
    task2: str | None  # file stem in task2/ (e.g. test_2016)


@dataclass(frozen=True)
class Multi30kParams:
    tasks: tuple[Literal["task1", "task2"], ...]
    tokenized: bool  # read tok/*.lc.norm.tok.* instead of raw/*.gz
    splits: dict[str, Multi30kStems]  # canonical split -> file stems


@dataclass(frozen=True)
class KarpathyParams:
    captions_per_image: int
    restval: Literal["train", "drop"]


@dataclass(frozen=True)
class ScanParams:
    captions_per_image: int
    splits: dict[str, str]  # canonical split -> SCAN file stem (train, dev, test, testall)


@dataclass(frozen=True)
class ParallelParams:
    splits: dict[str, str]  # canonical split -> file stem in each <pivot>-<target>/ folder


@dataclass(frozen=True)
class PrepareParams:
    format: Literal["multi30k", "karpathy", "scan"]
    dataset: str  # name written to images.parquet's `dataset` column
    read_image_sizes: bool  # open every image header for width/height (false: text-only, sizes null)
    multi30k: Multi30kParams
    karpathy: KarpathyParams
    scan: ScanParams
    parallel: ParallelParams


@dataclass(frozen=True)
class RunnerParams:
    kind: Literal["local", "dask"]  # where shards of heavy steps run
    max_workers: int  # local: threads mapping shards (1 = one after the other; torch uses every core anyway)
    address: str | None  # dask: scheduler address of an existing cluster, e.g. tcp://10.0.0.5:8786


@dataclass(frozen=True)
class RegionParams:
    mode: Literal["fixed", "adaptive", "given"]
    count: int  # fixed: regions per image (36 in the papers)
    min_count: int  # adaptive: at least this many
    max_count: int  # adaptive: at most this many; given: the most boxes one image may have (K of the store)
    conf_thresh: float  # fixed/adaptive: detection confidence a region should reach


@dataclass(frozen=True)
class CompactParams:
    glimpse: float  # glimpse side as a fraction of the image's longer side
    input_size: int
    widths: tuple[int, ...]
    dim: int
    epochs: int
    batch_size: int
    lr: float


@dataclass(frozen=True)
class ButdParams:
    checkpoint: (
        str | None
    )  # file in paths.feature_inputs: *.pkl (py-bottom-up-attention) or *.pth (bottom-up-attention.pytorch)
    test_scale: int  # shorter image side after resizing (600 in the reference)
    max_size: int  # cap of the longer side (1000)


@dataclass(frozen=True)
class ImportParams:
    tsv_files: tuple[str, ...]  # butd-tsv: files in paths.feature_inputs, in order
    scan_splits: dict[str, str]  # scan-npy: canonical split -> stem of <stem>_ims.npy in paths.feature_inputs


@dataclass(frozen=True)
class FeaturesParams:
    extractor: Literal["compact", "butd", "scan-npy", "butd-tsv"]
    regions: RegionParams
    shard_size: int  # images per shard (the unit of resumption and of distribution)
    batch_size: int  # images per forward pass
    on_bad_image: Literal["fail", "skip"]
    probe: bool  # train linear probes on the features for every label column of paths.boxes (built-in data)
    compact: CompactParams
    butd: ButdParams
    imported: ImportParams


@dataclass(frozen=True)
class MMTTextParams:
    lowercase: bool
    vocab_size: int  # BPE vocabulary per language (or joint)
    joint: bool  # one BPE vocabulary for both languages of a pair
    max_len: int  # subwords per sentence; longer ones are truncated (and counted)


@dataclass(frozen=True)
class MMTModelParams:
    emb_dim: int
    hidden: int
    dropout: float


@dataclass(frozen=True)
class TrainingParams:
    epochs: int
    batch_size: int
    lr: float
    patience: int  # validations without a better BLEU before stopping


@dataclass(frozen=True)
class MarianParams:
    local_dirs: dict[str, str]  # "<src>-<tgt>" -> folder in paths.mt_models; pairs without one are trained here
    d_model: int
    layers: int
    epochs: int
    batch_size: int
    lr: float


@dataclass(frozen=True)
class MMTParams:
    targets: tuple[str, ...]  # languages of languages.targets that get pivot<->target systems and synthesis
    text: MMTTextParams
    model: MMTModelParams
    pretrain: TrainingParams  # text-only, on the parallel corpus
    finetune: TrainingParams  # with region features, on the translation captions
    beam: int
    mt_system: Literal["text-only", "marian"]  # the system of the mt_* variants
    marian: MarianParams


@dataclass(frozen=True)
class SynthesisParams:
    kinds: tuple[Literal["comparable", "translation"], ...]  # which human pivot captions are translated
    shard_size: int  # captions per shard (the unit of resumption)
    batch_size: int
    beam: int


@dataclass(frozen=True)
class VocabParams:
    min_count: int  # words seen fewer times in the training captions become unknown (SCAN/VSE++: 4)
    max_len: int  # captions are cut to this many tokens
    fasttext: dict[str, str]  # language -> .vec file in paths.word_vectors (others start random)


@dataclass(frozen=True)
class ObjectiveParams:
    loss: Literal["auto", "harder", "max_violation", "sum", "topk"]  # auto: the model's own (registry)
    margin: float  # alpha of Eq. 9
    beta: dict[str, float]  # language type (<lang>-<origin>) -> beta_l of Eq. 9; {}: equal weights
    topk: int  # K of the topk (EmbN) loss
    topk_margin: float


@dataclass(frozen=True)
class RetrievalTrainParams:
    epochs: int
    batch_size: int
    lr: float
    lr_decay_epoch: int  # lr * lr_decay from this (0-based) epoch on
    lr_decay: float
    clip: float
    synthetic_fraction: float  # share of synthesized captions per batch when the variant has them
    patience: int  # epochs without a better validation rsum before stopping; 0: never stop early
    c2c_probability: float  # chance a step is a caption-caption step (Kadar et al. 2018); 0: off
    warmup_epochs: int  # first epochs with the sum of hinges before the configured loss (VSE-infinity's warm-up)


@dataclass(frozen=True)
class RetrievalEvalParams:
    protocol: Literal["full", "folds"]  # full: the whole test split (1K/5K); folds: mean over consecutive folds
    fold_images: int  # images per fold (COCO 5-fold 1K: 1000)
    val_images: int  # validation uses the first this many val images (the references: 1000)
    batch_size: int


@dataclass(frozen=True)
class TranslateSearchParams:
    languages: tuple[str, ...]  # queries in these languages are translated to the pivot by the mt system


@dataclass(frozen=True)
class RetrievalParams:
    models: tuple[str, ...]  # registry names; dvc.yaml trains every model x variant
    variants: tuple[str, ...]  # augmented caption variants: none, mt_f, mt_fb, mmt_f, mmt_fb
    languages: tuple[str, ...]  # caption languages trained on and evaluated
    train_kinds: tuple[Literal["comparable", "translation"], ...]  # human caption kinds used for training
    configs: dict[str, dict[str, Any]]  # model -> settings of its config dataclass (others keep paper defaults)
    vocab: VocabParams
    objective: ObjectiveParams
    train: RetrievalTrainParams
    evaluation: RetrievalEvalParams
    translate_search: TranslateSearchParams


@dataclass(frozen=True)
class Params:
    seed: int
    device: str  # auto | cpu | cuda | cuda:<index>
    precision: Literal["fp32", "bf16", "fp16"]
    languages: Languages
    paths: Paths
    runner: RunnerParams
    generate: GenerateParams
    prepare: PrepareParams
    features: FeaturesParams
    mmt: MMTParams
    synthesis: SynthesisParams
    retrieval: RetrievalParams


def load_params(path: str | Path = "params.yaml") -> Params:
    """Read, type-check and validate ``params.yaml``.

    Raises:
        ParamsError: naming the file, the key path, the bad value and what is allowed.
    """
    source = Path(path)
    if not source.is_file():
        raise ParamsError(f"{source}: file not found")
    try:
        tree = yaml.safe_load(source.read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        raise ParamsError(f"{source}: not valid YAML: {error}") from None
    return parse_params(tree, source=str(source))


def parse_params(tree: Any, *, source: str = "params.yaml") -> Params:
    """Build :class:`Params` from an already-parsed YAML tree (tests use this directly)."""
    try:
        params = _build(Params, tree, "")
        _validate(params)
    except _KeyError as error:
        raise ParamsError(f"{source}: {error.path or '<top level>'}: {error.message}") from None
    return params


class _KeyError(Exception):
    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path, self.message = path, message


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _build(kind: Any, value: Any, path: str) -> Any:
    """Convert ``value`` to the annotated type ``kind``, or raise _KeyError naming ``path``."""
    if kind is Any:  # checked later by its owner (e.g. a model's config dataclass)
        return value
    origin = get_origin(kind)
    if is_dataclass(kind):
        return _build_dataclass(kind, value, path)
    if origin is Literal:
        allowed = get_args(kind)
        if value not in allowed:
            raise _KeyError(path, f"got {value!r}, allowed: {', '.join(map(str, allowed))}")
        return value
    if origin in (types.UnionType, typing.Union):
        options = get_args(kind)
        if value is None and type(None) in options:
            return None
        (inner,) = [option for option in options if option is not type(None)]
        return _build(inner, value, path)
    if origin is tuple:
        if not isinstance(value, list):
            raise _KeyError(path, f"expected a list, got {value!r}")
        (item,) = [arg for arg in get_args(kind) if arg is not Ellipsis]
        return tuple(_build(item, element, f"{path}[{index}]") for index, element in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict):
            raise _KeyError(path, f"expected a mapping, got {value!r}")
        _, item = get_args(kind)
        return {str(key): _build(item, element, _join(path, str(key))) for key, element in value.items()}
    return _build_scalar(kind, value, path)


def _build_scalar(kind: type, value: Any, path: str) -> Any:
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    valid = {
        bool: isinstance(value, bool),
        int: isinstance(value, int) and not isinstance(value, bool),
        float: isinstance(value, (int, float)) and not isinstance(value, bool),
        str: isinstance(value, str),
    }
    if kind not in valid:
        raise TypeError(f"params type {kind!r} at {path} is not supported")
    if not valid[kind]:
        raise _KeyError(path, f"expected {names[kind]}, got {value!r}")
    return float(value) if kind is float else value


def _build_dataclass(kind: Any, value: Any, path: str) -> Any:
    if not isinstance(value, dict):
        raise _KeyError(path, f"expected a mapping of keys, got {value!r}")
    hints = typing.get_type_hints(kind)
    known = {field.name: field for field in fields(kind)}
    unknown = sorted(set(map(str, value)) - set(known))
    if unknown:
        raise _KeyError(_join(path, unknown[0]), f"unknown key; allowed keys here: {', '.join(known)}")
    built = {}
    for name, field in known.items():
        if name not in value:
            if field.default is MISSING:
                raise _KeyError(_join(path, name), "missing key")
            continue
        built[name] = _build(hints[name], value[name], _join(path, name))
    return kind(**built)


def _validate(params: Params) -> None:
    """Checks that span more than one value's type: ranges, language codes, split names."""
    if params.runner.kind == "dask" and not params.runner.address:
        raise _KeyError("runner.address", "missing: runner kind dask needs a scheduler address (tcp://host:8786)")
    _check_range("runner.max_workers", params.runner.max_workers, 1, 256)
    if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", params.device):
        raise _KeyError("device", f"got {params.device!r}, allowed: auto, cpu, cuda, cuda:<index>")
    _validate_languages(params.languages)
    generate = params.generate
    _check_range("generate.image_size", generate.image_size, 64, 4096)
    for split in CANONICAL_SPLITS:
        _check_range(f"generate.splits.{split}", getattr(generate.splits, split), 1, 10_000_000)
        _check_range(f"generate.parallel_pairs.{split}", getattr(generate.parallel_pairs, split), 0, 100_000_000)
    _check_range("generate.objects_per_image.min", generate.objects_per_image.min, 1, 8)
    _check_range("generate.objects_per_image.max", generate.objects_per_image.max, generate.objects_per_image.min, 8)
    _check_range("generate.comparable_per_image", generate.comparable_per_image, 1, 20)
    prepare = params.prepare
    _check_range("prepare.karpathy.captions_per_image", prepare.karpathy.captions_per_image, 1, 20)
    _check_range("prepare.scan.captions_per_image", prepare.scan.captions_per_image, 1, 20)
    _validate_features(params.features)
    _validate_mmt(params)
    for key, splits in (
        ("prepare.multi30k.splits", prepare.multi30k.splits),
        ("features.imported.scan_splits", params.features.imported.scan_splits),
        ("prepare.scan.splits", prepare.scan.splits),
        ("prepare.parallel.splits", prepare.parallel.splits),
    ):
        _check_split_names(key, splits)
    _validate_retrieval(params)


def _validate_features(features: FeaturesParams) -> None:
    regions = features.regions
    _check_range("features.regions.count", regions.count, 1, 1000)
    _check_range("features.regions.min_count", regions.min_count, 1, 1000)
    lowest = regions.min_count if regions.mode == "adaptive" else 1
    _check_range("features.regions.max_count", regions.max_count, lowest, 1000)
    if not 0.0 <= regions.conf_thresh <= 1.0:
        raise _KeyError("features.regions.conf_thresh", f"got {regions.conf_thresh}, allowed: 0 to 1")
    _check_range("features.shard_size", features.shard_size, 1, 1_000_000)
    _check_range("features.batch_size", features.batch_size, 1, 4096)
    if features.extractor == "compact" and regions.mode != "given":
        raise _KeyError("features.regions.mode", f"got {regions.mode!r}, allowed with extractor compact: given")
    if features.extractor == "butd" and not features.butd.checkpoint:
        raise _KeyError("features.butd.checkpoint", "missing: extractor butd needs a checkpoint file name")
    if features.extractor == "butd-tsv" and not features.imported.tsv_files:
        raise _KeyError("features.imported.tsv_files", "empty: extractor butd-tsv needs at least one TSV file")
    compact = features.compact
    if not 0.05 <= compact.glimpse <= 1.0:
        raise _KeyError("features.compact.glimpse", f"got {compact.glimpse}, allowed: 0.05 to 1")
    _check_range("features.compact.input_size", compact.input_size, 16, 512)
    _check_range("features.compact.dim", compact.dim, 8, 8192)
    _check_range("features.compact.epochs", compact.epochs, 1, 1000)
    if not compact.widths:
        raise _KeyError("features.compact.widths", "at least one stage width is needed")


def _validate_mmt(params: Params) -> None:
    mmt = params.mmt
    for index, target in enumerate(mmt.targets):
        if target not in params.languages.targets:
            raise _KeyError(
                f"mmt.targets[{index}]",
                f"got {target!r}, allowed: one of languages.targets {list(params.languages.targets)}",
            )
    _check_range("mmt.text.vocab_size", mmt.text.vocab_size, 50, 200_000)
    _check_range("mmt.text.max_len", mmt.text.max_len, 4, 1000)
    _check_range("mmt.model.emb_dim", mmt.model.emb_dim, 4, 4096)
    _check_range("mmt.model.hidden", mmt.model.hidden, 4, 8192)
    if not 0.0 <= mmt.model.dropout < 1.0:
        raise _KeyError("mmt.model.dropout", f"got {mmt.model.dropout}, allowed: 0 <= dropout < 1")
    for name in ("pretrain", "finetune"):
        training: TrainingParams = getattr(mmt, name)
        _check_range(f"mmt.{name}.epochs", training.epochs, 1, 10_000)
        _check_range(f"mmt.{name}.batch_size", training.batch_size, 1, 65_536)
        _check_range(f"mmt.{name}.patience", training.patience, 1, 1000)
        if not 0.0 < training.lr < 1.0:
            raise _KeyError(f"mmt.{name}.lr", f"got {training.lr}, allowed: 0 < lr < 1")
    _check_range("mmt.beam", mmt.beam, 1, 64)
    _check_range("synthesis.beam", params.synthesis.beam, 1, 64)
    _check_range("synthesis.shard_size", params.synthesis.shard_size, 1, 10_000_000)
    _check_range("synthesis.batch_size", params.synthesis.batch_size, 1, 65_536)
    if not params.synthesis.kinds:
        raise _KeyError("synthesis.kinds", "at least one kind of caption (comparable, translation) is needed")


def _validate_retrieval(params: Params) -> None:
    from mmt.augment import VARIANTS
    from retrieval.registry import MODELS, make_config

    retrieval = params.retrieval
    for key, names, known in (("retrieval.models", retrieval.models, MODELS),
                              ("retrieval.variants", retrieval.variants, VARIANTS)):  # fmt: skip
        if not names:
            raise _KeyError(key, "at least one is needed")
        for index, name in enumerate(names):
            if name not in known:
                raise _KeyError(f"{key}[{index}]", f"unknown name {name!r}; known: {', '.join(known)}")
    for name, values in retrieval.configs.items():
        if name not in MODELS:
            raise _KeyError(f"retrieval.configs.{name}", f"unknown model; known: {', '.join(MODELS)}")
        if not isinstance(values, dict):
            raise _KeyError(f"retrieval.configs.{name}", f"expected a mapping of settings, got {values!r}")
        try:
            make_config(name, values)
        except (TypeError, ValueError) as error:
            raise _KeyError(f"retrieval.configs.{name}", str(error)) from None
    for key, codes in (("retrieval.languages", retrieval.languages),
                       ("retrieval.translate_search.languages", retrieval.translate_search.languages)):  # fmt: skip
        for index, code in enumerate(codes):
            if code not in params.languages.all:
                raise _KeyError(f"{key}[{index}]", f"got {code!r}, allowed: one of {list(params.languages.all)}")
    if not retrieval.languages:
        raise _KeyError("retrieval.languages", "at least one language is needed")
    if retrieval.translate_search.languages and params.languages.pivot not in retrieval.languages:
        pivot = params.languages.pivot
        message = f"translate-search queries the pivot ({pivot}); add it to retrieval.languages"
        raise _KeyError("retrieval.translate_search.languages", message)
    for lang in retrieval.vocab.fasttext:
        if lang not in retrieval.languages:
            message = f"not one of retrieval.languages {list(retrieval.languages)}"
            raise _KeyError(f"retrieval.vocab.fasttext.{lang}", message)
    _check_range("retrieval.vocab.min_count", retrieval.vocab.min_count, 1, 1_000_000)
    _check_range("retrieval.vocab.max_len", retrieval.vocab.max_len, 1, 1000)
    objective = retrieval.objective
    for key, beta in objective.beta.items():
        if not re.fullmatch(r"[a-z]{2}-(human|mt|mmt)", key) or beta < 0:
            raise _KeyError(f"retrieval.objective.beta.{key}", "expected <lang>-<human|mt|mmt>: a weight >= 0")
    _check_range("retrieval.objective.topk", objective.topk, 1, 100_000)
    train = retrieval.train
    _check_range("retrieval.train.epochs", train.epochs, 1, 10_000)
    _check_range("retrieval.train.batch_size", train.batch_size, 2, 65_536)
    _check_range("retrieval.train.lr_decay_epoch", train.lr_decay_epoch, 0, 10_000)
    _check_range("retrieval.train.patience", train.patience, 0, 10_000)
    _check_range("retrieval.train.warmup_epochs", train.warmup_epochs, 0, 10_000)
    fractions = {"lr": train.lr, "synthetic_fraction": train.synthetic_fraction,
                 "c2c_probability": train.c2c_probability, "lr_decay": train.lr_decay}  # fmt: skip
    for key, value in fractions.items():
        if not 0.0 <= value <= 1.0 or (key == "lr" and value == 0):
            raise _KeyError(f"retrieval.train.{key}", f"got {value}, allowed: 0 to 1")
    _check_range("retrieval.evaluation.fold_images", retrieval.evaluation.fold_images, 1, 10_000_000)
    _check_range("retrieval.evaluation.val_images", retrieval.evaluation.val_images, 1, 10_000_000)
    _check_range("retrieval.evaluation.batch_size", retrieval.evaluation.batch_size, 1, 65_536)


def _validate_languages(languages: Languages) -> None:
    codes = languages.all
    for key, code in [("languages.pivot", languages.pivot)] + [
        (f"languages.targets[{index}]", code) for index, code in enumerate(languages.targets)
    ]:
        if code not in ISO_639_1:
            raise _KeyError(key, f"got {code!r}, allowed: an ISO 639-1 language code (en, de, fr, cs, ...)")
    if len(set(codes)) != len(codes):
        raise _KeyError("languages", f"a language is listed twice in pivot + targets: {list(codes)}")


def _check_range(key: str, value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        raise _KeyError(key, f"got {value}, allowed: {low} to {high}")


def _check_split_names(key: str, splits: dict[str, Any]) -> None:
    unknown = sorted(set(splits) - set(CANONICAL_SPLITS))
    if unknown:
        raise _KeyError(f"{key}.{unknown[0]}", f"unknown split; allowed: {', '.join(CANONICAL_SPLITS)}")
    if not splits:
        raise _KeyError(key, "at least one split is needed")
