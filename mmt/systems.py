"""The translation systems of a language pair, and every MT backend by name: one row each.

For every direction of a pivot-target pair, :func:`pretrain` trains the regional model text-only on the
parallel corpus (checkpoint ``pretrain``: ``pretrain.safetensors`` + ``pretrain.json``); then two systems are
trained from there, each in its own folder (its weights in checkpoint ``finetune``, except seq2seq's):

- ``mmt-<src>-<tgt>``: backend ``mmt``, the regional MMT fine-tuned with region features (section 3.1);
- ``mt-<src>-<tgt>``: the backend ``mt_system`` names: ``text-only`` (the same model fine-tuned on the
  captions without images) or ``seq2seq`` (a transformers sequence-to-sequence model you hold, fine-tuned on the
  captions, or a small Marian trained here).

Each folder records its backend in ``system.json``, so :func:`load_system` turns any system folder into a
:class:`~mmt.translator_protocol.Translator` without guessing from its files. A trained system's test scores are
:mod:`mmt.evaluation`'s; :func:`bleu` here is the validation score that early-stops training.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import logging
import shutil
import threading
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from common.checkpoints import checkpoint_files, checkpoint_stem
from common.distributed import gather_objects, is_writer, share
from common.errors import InputError
from common.files import file_sha256, file_stamp, read_json, write_json, write_tsv
from common.runtime import Runtime
from common.train_state import STATE_SUFFIX, ResumePoint, fingerprint, state_file
from mmt.checkpoint import FINETUNE, PRETRAIN, load_pretrained_into, record_text_pipeline
from mmt.model import MMTShape, RegionalMMT
from mmt.text import SubwordConfig, TextPipeline
from mmt.translator import MMTTranslator
from mmt.translator_protocol import Translator

# `mmtr translate` loads a system through this module: what only training, validation or another backend uses
# (pyarrow, sacrebleu, the seq2seq and Marian code) is imported where it is used, so translating a sentence does
# not wait for it
if TYPE_CHECKING:
    from features.store import FeatureStore
    from mmt.config import SystemsConfig
    from mmt.encoded import EncodedPairs
    from mmt.pairs import DirectionData, Pairs, ParallelText
    from mmt.train import TrainConfig, ValidationCallback

logger = logging.getLogger(__name__)

SYSTEM_FILE = "system.json"  # {"backend": <name of BACKENDS>, "src": <language>, "tgt": <language>}
TEXT_ONLY_REGION_DIM = MMTShape.region_dim  # the regional model's shape when no FeatureStore exists
ENCODED_FOLDER = "encoded"  # <work>/encoded/<key>/: the text-only corpus's ids, memory-mapped by the fits
VALIDATION_SENTENCES = 500  # validation BLEU (early stopping) on at most this many sentences, greedy decoding
STEP_LOG_EVERY = 100  # a DEBUG line every this many training steps, between the validations' lines


@dataclass(frozen=True)
class SystemRequest:
    """What training one system of one direction needs.

    Attributes:
        src: Source language.
        tgt: Target language.
        data: The direction's parallel corpus and translation captions.
        config: The `mmt` settings.
        out_dir: The system folder to write.
        pretrained: The direction's text-only ``pretrain`` checkpoint (its folder holds the text pipeline).
        store: FeatureStore folder of the caption images (the multimodal backend reads it); None on the
            text-only route (no images).
        mt_models: Folder of the MT models the user holds (``seq2seq.held`` names them).
        seed: Seeds every random choice of the training.
        runtime: Device and precision.
        on_validation: Called with each validation's line of the fit (:class:`~common.epoch_log.EpochLine`),
            for progress reports.
        work: Folder of the resume states (:func:`state_path`); None keeps none.
        stop: Checked before each training batch: once set, the training is given up
            (:class:`common.stopping.Cancelled`).
    """

    src: str
    tgt: str
    data: DirectionData
    config: SystemsConfig
    out_dir: Path
    pretrained: Path
    store: str | None
    mt_models: Path
    seed: int
    runtime: Runtime
    on_validation: ValidationCallback | None = None
    work: Path | None = None
    stop: threading.Event | None = None


@dataclass(frozen=True)
class Backend:
    multimodal: bool  # reads the image regions of each sentence
    data_parallel: bool  # trains under torchrun with the other ranks (common.distributed); else on rank 0 alone
    train: Callable[[SystemRequest], float | None]  # writes the system folder; the best validation score if any
    load: Callable[[Path, FeatureStore | None, Runtime], Translator]
    weights_file: Callable[[Path], Path]  # the file that identifies the trained weights


def train_text_pipeline(
    data: DirectionData, config: SubwordConfig, *, src: str, tgt: str, out_dir: Path, seed: int
) -> TextPipeline:
    """Subword vocabularies from the pre-training corpus and the caption training text, saved in ``out_dir``."""
    corpus, captions = data.corpus["train"], data.captions["train"]
    return TextPipeline.train(  # the corpus streamed: the subword models learn from a sample of it
        itertools.chain(corpus.side(0), captions.src),
        itertools.chain(corpus.side(1), captions.tgt),
        src_lang=src,
        tgt_lang=tgt,
        config=config,
        out_dir=out_dir,
        seed=seed,
    )


def pretrain(
    data: DirectionData,
    config: SystemsConfig,
    *,
    model_dir: Path,
    region_dim: int,
    seed: int,
    runtime: Runtime,
    on_validation: ValidationCallback | None = None,
    work: Path | None = None,
    stop: threading.Event | None = None,
) -> float:
    """Text-only pre-training (one thread, no visual token) on the parallel corpus -> checkpoint ``pretrain``
    (resumable from a state in ``work``, see :func:`fit_system`; given up before a batch once ``stop`` is set)."""
    text = TextPipeline.load(model_dir, threads=config.text.threads)  # the corpus is encoded over these processes
    torch.manual_seed(seed)
    model = RegionalMMT(config.model, _shape(text, config, region_dim))
    return fit_system(
        model,
        text,
        data.corpus["train"],
        data.corpus["val"].pairs(),
        store=None,
        training=config.pretrain,
        seed=seed,
        runtime=runtime,
        checkpoint=model_dir / PRETRAIN,
        name=f"{model_dir.name} pretrain",
        on_validation=on_validation,
        work=work,
        stop=stop,
    )


def fit_system(
    model: RegionalMMT,
    text: TextPipeline,
    train: Pairs | ParallelText,
    val: Pairs,
    *,
    store: FeatureStore | None,
    training: TrainConfig,
    seed: int,
    runtime: Runtime,
    checkpoint: Path,
    name: str,
    on_validation: ValidationCallback | None = None,
    mixed: ParallelText | None = None,
    work: Path | None = None,
    stop: threading.Event | None = None,
) -> float:
    """Train on ``train`` (and ``training.mixed_pairs`` of the text-only ``mixed`` pairs each epoch), early-stopping
    on greedy BLEU of ``val``; the best weights end in ``checkpoint``, the learning curve (step, epoch counted from
    1, mean loss since the last validation, validation BLEU) in ``<checkpoint stem>.history.tsv`` beside it. Each
    validation logs one line starting with ``name`` (``mmt-en-de finetune``), which ``on_validation`` gets too.
    With ``work``, the fit keeps its resume state in :func:`state_path` and continues from it when run again on the
    same inputs (:func:`run_fingerprint`). Once ``stop`` is set, the fit is given up before its next batch
    (:class:`common.stopping.Cancelled`), its last state kept. With ``work``, the text-only corpus (``train`` when it is
    one, ``mixed``) is encoded once into ``work`` and memory-mapped (:func:`encoded_corpus`)."""
    from mmt.pairs import ParallelText, examples
    from mmt.train import fit

    device = runtime.torch_device()
    translator = MMTTranslator(model, text, name=name, regions=store, device=device, autocast=runtime.autocast())

    def report(record: dict[str, float]) -> None:
        if record["step"] % STEP_LOG_EVERY == 0:
            logger.debug("%s · step %d · epoch %d · loss %.3f", name, record["step"], record["epoch"], record["loss"])

    mixed_pairs = mixed if mixed is not None and training.mixed_pairs else None
    resume = None
    hashes: dict[str, str | None] = {"train": None, "mixed": None}
    if work is not None:  # a pass over each text, for the resume state and the encoded corpus's folder
        hashes = {"train": pairs_sha256(train), "mixed": None if mixed_pairs is None else pairs_sha256(mixed_pairs)}
        run = run_fingerprint(model, text, hashes, val, store=store, training=training, seed=seed)
        resume = ResumePoint(state_path(work, checkpoint), fingerprint(run, asdict(runtime)))
    mixed_examples = [] if mixed_pairs is None else encoded_corpus(text, mixed_pairs, work, hashes["mixed"])
    train_examples = (
        encoded_corpus(text, train, work, hashes["train"])
        if isinstance(train, ParallelText)
        else examples(text, train, store)
    )
    result = fit(
        model,
        train_examples,
        regions=store,
        evaluate=lambda _: bleu(translator, val, tgt_lang=text.config.tgt_lang, beam=1, limit=VALIDATION_SENTENCES),
        config=training,
        seed=seed,
        device=device,
        autocast=runtime.autocast(),
        checkpoint_path=checkpoint,
        progress=report,
        mixed=mixed_examples,
        name=name,
        on_validation=on_validation,
        resume=resume,
        stop=stop,
    )
    if is_writer():  # data-parallel ranks other than 0 trained the same weights and write nothing
        record_text_pipeline(checkpoint, text.identity())
        write_tsv(history_file(checkpoint), history_rows(result.history))
    best_epoch = next(int(entry["epoch"]) for entry in result.history if entry["step"] == result.best_step)
    logger.info("%s · best val BLEU %.2f at epoch %d (step %d)", name, result.best_score, best_epoch, result.best_step)
    return result.best_score


def encoded_corpus(text: TextPipeline, pairs: ParallelText, work: Path | None, pairs_hash: str | None) -> EncodedPairs:
    """The examples of a text-only corpus: with ``work``, encoded once into ``<work>/encoded/<key>/`` and
    memory-mapped (:func:`mmt.pairs.stored_examples`), the key a hash of the subword models and of the pairs, so the
    fine-tuning that mixes corpus pairs in maps the files pre-training wrote; without, encoded into memory."""
    from mmt.pairs import examples, stored_examples

    if work is None or pairs_hash is None:
        return examples(text, pairs, None)
    key = hashlib.sha256(json.dumps([text.identity(), pairs_hash], sort_keys=True).encode()).hexdigest()[:32]
    return stored_examples(text, pairs, work / ENCODED_FOLDER / key)


def clear_encoded(work: Path) -> None:
    """Remove the encoded corpora of :func:`encoded_corpus` (the stage's outputs are written: no fit reads them)."""
    shutil.rmtree(work / ENCODED_FOLDER, ignore_errors=True)


def state_path(work: Path, checkpoint: Path) -> Path:
    """The resume state of the fit that writes ``checkpoint``: ``<work>/<system folder>/<checkpoint>.state.safetensors``
    (``mmt-en-de/finetune.state.safetensors``), named like the system folder, which is a staging copy while the stage
    runs."""
    return state_file(work / checkpoint.parent.name, checkpoint.name)


def clear_states(work: Path, folders: Iterable[str]) -> None:
    """Remove the resume states of the system ``folders`` (their outputs are written: nothing is left to resume)."""
    for folder in folders:
        for state in sorted((work / folder).glob(f"*{STATE_SUFFIX}")) + sorted((work / folder).glob("*.pt")):
            state.unlink()  # the current states and those of the earlier format
        if (work / folder).is_dir() and not any((work / folder).iterdir()):
            (work / folder).rmdir()


def run_fingerprint(
    model: RegionalMMT,
    text: TextPipeline,
    hashes: dict[str, str | None],
    val: Pairs,
    *,
    store: FeatureStore | None,
    training: TrainConfig,
    seed: int,
) -> dict[str, object]:
    """What a fit's result depends on, for its resume state: settings, seed, model config and shape, the subword
    models, the initial weights (so fine-tuning's hash covers the pre-trained checkpoint), a hash of every pair
    (source, target, image) of the training, validation and mixed-in data (``hashes``: :func:`pairs_sha256` of the
    training and mixed-in pairs, None for no mixed-in pairs), and the region store's metadata and file
    stamps (a hash of its features would read gigabytes; a rewritten store has new stamps)."""
    stamps = None
    if store is not None:
        stamps = {path.name: file_stamp(path) for path in sorted(store.path.iterdir()) if path.is_file()}
    return {
        "training": asdict(training),
        "seed": seed,
        "config": asdict(model.config),
        "shape": asdict(model.shape),
        "text": text.identity(),
        "weights": weights_sha256(model),
        "pairs": [hashes["train"], pairs_sha256(val), hashes["mixed"]],
        "validation_sentences": VALIDATION_SENTENCES,
        "store": None if store is None else {"meta": store.meta, "files": stamps},
    }


def weights_sha256(model: torch.nn.Module) -> str:
    """Hash of every tensor of ``model``'s state (names, shapes, dtypes and bytes)."""
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        digest.update(f"{name}:{tuple(tensor.shape)}:{tensor.dtype};".encode())
        digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def pairs_sha256(pairs: Pairs | ParallelText) -> str:
    """Hash of the sentences and images of ``pairs``, in order (one join per column: seconds for millions); a text-only
    corpus streamed a chunk at a time hashes as the same pairs held in lists."""
    from mmt.pairs import ParallelText

    digest = hashlib.sha256()
    if isinstance(pairs, ParallelText):
        count = pairs.count()
        for index in (0, 1):
            digest.update(f"False:{count}:".encode())
            for position, sentence in enumerate(pairs.side(index)):
                digest.update((sentence if position == 0 else "\x1f" + sentence).encode())
        digest.update(b"True:0:")
        return digest.hexdigest()
    for column in (pairs.src, pairs.tgt, pairs.image_ids):
        values = column if column is not None else []
        digest.update(f"{column is None}:{len(values)}:".encode())
        digest.update("\x1f".join(values).encode())
    return digest.hexdigest()


def history_rows(history: list[dict[str, float]]) -> list[dict[str, object]]:
    """A fit's validations as the rows of its history file: step, epoch (counted from 1), loss, val_bleu."""
    return [
        {"step": int(entry["step"]), "epoch": int(entry["epoch"]), "loss": entry["loss"], "val_bleu": entry["score"]}
        for entry in history
    ]


def history_file(checkpoint: Path) -> Path:
    """Where :func:`fit_system` writes the learning curve of ``checkpoint`` (``finetune`` ->
    ``finetune.history.tsv``)."""
    stem = checkpoint_stem(checkpoint)
    return stem.with_name(f"{stem.name}.history.tsv")


def bleu(translator: Translator, pairs: Pairs, *, tgt_lang: str, beam: int, limit: int | None = None) -> float:
    """BLEU (lowercased, tokenised) of ``translator`` on the first ``limit`` pairs."""
    from mmt.metrics import translation_scores

    count = len(pairs.src) if limit is None else min(limit, len(pairs.src))
    mine = share(count)  # data-parallel ranks translate a share each
    images = pairs.image_ids[mine] if pairs.image_ids is not None else None
    hypotheses = gather_objects(translator.translate(pairs.src[mine], images, beam=beam))
    score = translation_scores(hypotheses, pairs.tgt[:count], tgt_lang)["bleu"]
    assert isinstance(score, float)
    return score


def _shape(text: TextPipeline, config: SystemsConfig, region_dim: int) -> MMTShape:
    return MMTShape(
        src_vocab=text.src_vocab.size, tgt_vocab=text.tgt_vocab.size, region_dim=region_dim, max_len=config.text.max_len
    )


def _train_regional(request: SystemRequest, *, multimodal: bool) -> float:
    """Fine-tune the pre-trained model on the translation captions: with regions (the MMT; the visual
    projection starts fresh) or without (the text-only MT system) -> checkpoint ``<out_dir>/finetune``."""
    from features.store import FeatureStore

    source = request.pretrained.parent
    text = TextPipeline.load(source)
    if request.out_dir != source and is_writer():
        text.save(request.out_dir)
    if multimodal and request.store is None:
        raise InputError(f"{request.out_dir.name}: the multimodal system needs the corpus's region features")
    store = FeatureStore.open(request.store) if request.store is not None else None
    torch.manual_seed(request.seed)
    # without images the visual projection is never used; its input size follows the pre-trained checkpoint
    region_dim = store.dim if store is not None else TEXT_ONLY_REGION_DIM
    model = RegionalMMT(request.config.model, _shape(text, request.config, region_dim))
    fresh = load_pretrained_into(model, request.pretrained)
    logger.info(
        "Fine-tuning %s from %s/%s; newly initialised: %s",
        request.out_dir.name,
        request.pretrained.parent.name,
        request.pretrained.name,
        ", ".join(fresh) or "nothing",
    )
    captions = request.data.captions
    return fit_system(
        model,
        text,
        captions["train"],
        captions["val"],
        store=store if multimodal else None,
        training=request.config.finetune,
        seed=request.seed,
        runtime=request.runtime,
        checkpoint=request.out_dir / FINETUNE,
        name=f"{request.out_dir.name} finetune",
        on_validation=request.on_validation,
        mixed=request.data.corpus["train"],
        work=request.work,
        stop=request.stop,
    )


def _train_seq2seq(request: SystemRequest) -> None:
    """A model you hold (``seq2seq.held``: a folder or a cached model id), fine-tuned on the pair's caption
    translations unless ``seq2seq.as_is``; or, for a pair without one, a small Marian trained here on the corpus and
    the captions."""
    from mmt.held_models import build_held_system, resolve_held_model
    from mmt.marian import train_marian

    data, settings = request.data, request.config.seq2seq
    pair = f"{request.src}-{request.tgt}"
    captions = data.captions
    device = request.runtime.torch_device()
    if pair in settings.held:
        held = resolve_held_model(settings.held[pair], request.mt_models)
        build_held_system(
            held,
            src=request.src,
            tgt=request.tgt,
            out_dir=request.out_dir,
            language_codes=settings.language_codes,
            finetune=None if settings.as_is else settings.finetune,
            train=(captions["train"].src, captions["train"].tgt),
            val=(captions["val"].src, captions["val"].tgt),
            device=device,
            seed=request.seed,
            on_epoch=request.on_validation,
            stop=request.stop,
        )
        return None
    corpus = data.corpus["train"].pairs()  # the Marian trainer takes lists: this backend holds the corpus's text
    pairs = len(corpus.src) + len(captions["train"].src)
    logger.info("Training a Marian model for %s from scratch (%d pairs)", pair, pairs)
    train_marian(
        corpus.src + captions["train"].src,
        corpus.tgt + captions["train"].tgt,
        out_dir=request.out_dir,
        src_lang=request.src,
        tgt_lang=request.tgt,
        config=settings.train,
        val=(captions["val"].src, captions["val"].tgt),
        device=device,
        seed=request.seed,
        on_epoch=request.on_validation,
        stop=request.stop,
    )
    return None


def _load_regional(folder: Path, store: FeatureStore | None, runtime: Runtime, *, multimodal: bool) -> Translator:
    translator = MMTTranslator.load(
        folder, FINETUNE, regions=store, device=runtime.torch_device(), autocast=runtime.autocast()
    )
    check_regional_backend(folder, translator.model, multimodal=multimodal, store=store)
    return translator


def trained_with_regions(model: RegionalMMT) -> bool:
    """Whether ``model``'s weights were fine-tuned with image regions. Fine-tuning starts the region projection's
    bias at exactly zero (:func:`~mmt.checkpoint.match_visual_scale`) and only a model that reads regions ever updates
    it, so the weights tell it whatever a folder's metadata says."""
    return bool(model.region_proj.bias.detach().abs().sum() > 0)


def check_regional_backend(folder: Path, model: RegionalMMT, *, multimodal: bool, store: FeatureStore | None) -> None:
    """Refuse a system folder whose ``system.json`` contradicts its weights: the text-only backend named for weights
    fine-tuned with regions (it would translate them without their images), the multimodal one for weights that never
    read regions, or a store of other region features than the weights were trained on.

    Raises:
        InputError: names system.json (or the store), the weights file and what each says.
    """
    weights = _finetuned(folder)
    if trained_with_regions(model) != multimodal:
        named, held = ("mmt", "never read image regions") if multimodal else ("text-only", "read image regions")
        raise InputError(
            f"{folder / SYSTEM_FILE}: names the {named} backend, but {weights.name} holds a model fine-tuned to "
            f"{held}: retrain the system, or restore the folder's system.json"
        )
    if multimodal and store is not None and store.dim != model.shape.region_dim:
        raise InputError(
            f"{store.path}: region features of size {store.dim}, but {weights} was trained on features of size "
            f"{model.shape.region_dim} (another extractor or store)"
        )


def _load_seq2seq(folder: Path, store: FeatureStore | None, runtime: Runtime) -> Translator:
    from mmt.held_models import load_seq2seq_system

    src, tgt = system_languages(folder)
    return load_seq2seq_system(folder, src=src, tgt=tgt, device=runtime.torch_device())


def _seq2seq_weights(folder: Path) -> Path:
    from mmt.seq2seq import weights_file

    return weights_file(folder) or folder / "model.safetensors"


def _finetuned(folder: Path) -> Path:
    return checkpoint_files(folder / FINETUNE).weights  # finetune.safetensors (finetune.pt of the earlier format)


BACKENDS: dict[str, Backend] = {
    # the regional Bi-LSTM MMT of Huang et al. 2020 (section 3.1), reading each sentence's image regions
    "mmt": Backend(
        True,
        True,
        functools.partial(_train_regional, multimodal=True),
        functools.partial(_load_regional, multimodal=True),
        _finetuned,
    ),
    # the same model fine-tuned on the caption text alone (the paper's text-only MT rows)
    "text-only": Backend(
        False,
        True,
        functools.partial(_train_regional, multimodal=False),
        functools.partial(_load_regional, multimodal=False),
        _finetuned,
    ),
    # transformers' sequence-to-sequence models (OPUS-MT, NLLB, M2M100, mBART-50) you hold, or a small Marian
    # trained here
    "seq2seq": Backend(False, False, _train_seq2seq, _load_seq2seq, _seq2seq_weights),
}


def train_system(backend: str, request: SystemRequest) -> float | None:
    """Train the system of ``backend`` into ``request.out_dir`` and record the backend there."""
    score = BACKENDS[backend].train(request)
    if not is_writer():
        return score
    write_json(request.out_dir / SYSTEM_FILE, {"backend": backend, "src": request.src, "tgt": request.tgt})
    return score


def system_backend(folder: Path) -> Backend:
    """The backend that trained the system in ``folder`` (from its ``system.json``)."""
    path = folder / SYSTEM_FILE
    if not path.is_file():
        raise InputError(f"{path}: not found; {folder} is not a trained system (run the train_mmt stage)")
    recorded = read_json(path)
    name = recorded.get("backend") if isinstance(recorded, dict) else None
    if name not in BACKENDS:
        raise InputError(f"{path}: unknown backend {name!r}; known: {', '.join(BACKENDS)}")
    return BACKENDS[name]


def system_languages(folder: Path) -> tuple[str, str]:
    """(source, target) language of the system in ``folder``: from its ``system.json``, or for a folder written
    before it recorded them, from the regional text pipeline's ``text.json``."""
    path = folder / SYSTEM_FILE
    recorded = read_json(path) if path.is_file() else {}
    recorded = recorded if isinstance(recorded, dict) else {}
    if "src" in recorded and "tgt" in recorded:
        return str(recorded["src"]), str(recorded["tgt"])
    text = folder / "text.json"
    if not text.is_file():
        raise InputError(f"{folder / SYSTEM_FILE}: records no languages, and {text} is not there either")
    config = read_json(text)
    if not isinstance(config, dict) or not {"src_lang", "tgt_lang"} <= config.keys():
        raise InputError(f"{text}: expected an object with src_lang and tgt_lang")
    return str(config["src_lang"]), str(config["tgt_lang"])


def load_system(folder: str, store: str | None, runtime: Runtime) -> Translator:
    """The trained system in ``folder`` as a Translator (with the regions of ``store`` when it is
    multimodal); loaded once per process while its weights file is unchanged, so the shards of a synthesis
    pass share it and a system retrained in the same process is loaded afresh."""
    backend = system_backend(Path(folder))
    weights = backend.weights_file(Path(folder))
    if not weights.is_file():
        raise InputError(f"{weights}: not found; the system in {folder} is incomplete (rerun the train_mmt stage)")
    return _load_system(folder, store, runtime, file_stamp(weights))


@functools.lru_cache(maxsize=4)
def _load_system(folder: str, store: str | None, runtime: Runtime, weights_stamp: tuple[int, int, int]) -> Translator:
    backend = system_backend(Path(folder))
    if not backend.multimodal:
        return backend.load(Path(folder), None, runtime)
    if store is None:
        raise InputError(f"{folder}: a multimodal system needs the region features of its images")
    from features.store import FeatureStore

    return backend.load(Path(folder), FeatureStore.open(store), runtime)


def system_sha256(folder: str) -> str:
    """Hash of a system's weights (synthesis shards are keyed on it: a retrained system never reuses them)."""
    return file_sha256(system_backend(Path(folder)).weights_file(Path(folder)))
