"""The seq2seq backend: any sequence-to-sequence model transformers' auto classes load (OPUS-MT Marian, NLLB, M2M100,
mBART-50) behind the text-only Translator interface, and the loop that trains or fine-tunes one on sentence pairs.

Models are read from local folders only (``local_files_only``); :mod:`mmt.held_models` finds them, in the MT models
folder or the local Hugging Face cache, and :mod:`mmt.marian` trains a small Marian from scratch.
"""

from __future__ import annotations

import copy
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import torch
import torch.nn.functional as F

from common.epoch_log import EpochLine, format_epoch, seconds_left
from common.errors import InputError
from common.stopping import check
from common.weights import check_finite_once, file_version, fit_problems, pickle_refusal
from mmt.seq2seq_languages import LanguageSetup, detect_family, language_setup

# transformers takes seconds to import, and every stage imports the settings beside this module: the functions that
# build, load or run a model import it themselves
if TYPE_CHECKING:
    from transformers import PreTrainedModel

logger = logging.getLogger(__name__)

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")  # in order of preference

ProgressFn = Callable[[int, int, float], None]
"""Called after each optimizer step with (step, total_steps, training loss)."""
EpochFn = Callable[[EpochLine], None]
"""Called with each epoch's log line (progress reports)."""


class TrainingSchedule(Protocol):
    """What :func:`fit` reads of a training config (the Marian trained here, or the fine-tuning of a held model)."""

    @property
    def epochs(self) -> int: ...
    @property
    def batch_size(self) -> int: ...
    @property
    def max_steps(self) -> int | None: ...
    @property
    def max_len(self) -> int: ...
    @property
    def lr(self) -> float: ...
    @property
    def warmup_steps(self) -> int: ...
    @property
    def weight_decay(self) -> float: ...
    @property
    def label_smoothing(self) -> float: ...
    @property
    def clip_norm(self) -> float: ...


class Seq2SeqTranslator:
    """A sequence-to-sequence model with its tokenizer and language codes, translating batches of detokenised
    sentences."""

    def __init__(
        self, model: PreTrainedModel, tokenizer: Any, languages: LanguageSetup, *, name: str, device: torch.device
    ) -> None:
        self.name = name
        self.model = model.to(device).eval()  # type: ignore[arg-type]  # mypy misreads transformers' wrapped .to()
        # translate() always passes max_new_tokens; a saved max_length would only make generate() warn on every call.
        self.model.generation_config.max_length = None
        self.tokenizer = tokenizer
        self.languages = languages
        self.device = device

    @classmethod
    def from_folder(
        cls,
        path: str | os.PathLike[str],
        *,
        src: str,
        tgt: str,
        device: torch.device,
        language_codes: Mapping[str, Mapping[str, str]] | None = None,
        name: str | None = None,
    ) -> Seq2SeqTranslator:
        """Load a model folder (config.json, a weight file, the tokenizer's files) of any supported family.

        Args:
            path: The folder.
            src: ISO 639-1 source language.
            tgt: ISO 639-1 target language.
            device: Where to translate.
            language_codes: Family -> ISO 639-1 -> the model's code, over the family's table.
            name: The system's name (default: the folder's).

        Raises:
            InputError: ``path`` is not a local folder (e.g. a hub id), lacks config.json or weights, or holds a
                family or language this backend cannot run.
        """
        from transformers import AutoTokenizer

        folder = check_model_folder(path)
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        except (OSError, ValueError, TypeError) as error:  # a missing or unreadable vocabulary file
            message = str(error).splitlines()[0] if str(error) else type(error).__name__
            raise InputError(f"{folder}: its tokenizer does not load: {message}") from None
        family = detect_family(folder, tokenizer)
        overrides = (language_codes or {}).get(family, {})
        languages = language_setup(family, tokenizer, src=src, tgt=tgt, overrides=overrides, folder=folder)
        return cls(load_model(folder), tokenizer, languages, name=name or folder.name, device=device)

    def translate(
        self,
        sentences: Sequence[str],
        image_ids: Sequence[str] | None = None,
        *,
        beam: int = 5,
        batch_size: int = 32,
        max_len: int = 100,
        stop: threading.Event | None = None,
    ) -> list[str]:
        """Translate with beam search; one detokenised output per input, in input order.

        Sentences are batched by length (less padding), then put back in input order. ``image_ids`` are
        ignored: the model reads text only. ``stop`` set, the translation is given up before the next batch.
        """
        if beam < 1 or batch_size < 1 or max_len < 1:
            raise ValueError(f"beam, batch_size and max_len must be positive, got {beam}, {batch_size}, {max_len}")
        max_new_tokens = self._generation_limit(max_len)
        order = sorted(range(len(sentences)), key=lambda index: len(sentences[index]))
        outputs = [""] * len(sentences)
        for start in range(0, len(order), batch_size):
            check(stop, f"{self.name}: translating")
            indices = order[start : start + batch_size]
            translated = self._translate_batch([sentences[index] for index in indices], beam, max_new_tokens)
            for index, text in zip(indices, translated, strict=True):
                outputs[index] = text
        return outputs

    def score(
        self,
        sources: Sequence[str],
        targets: Sequence[str],
        image_ids: Sequence[str] | None = None,
        *,
        batch_size: int = 32,
    ) -> list[float]:
        """Teacher-forced log-probability of each target, ``</s>`` included (a forced target-language code is not
        the model's choice and is left out), in input order. ``image_ids`` are ignored: the model reads text only."""
        if len(targets) != len(sources):
            raise ValueError(f"{len(sources)} sources but {len(targets)} targets (expected one each)")
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        order = sorted(range(len(sources)), key=lambda index: len(sources[index]))
        scores = [0.0] * len(sources)
        for start in range(0, len(order), batch_size):
            indices = order[start : start + batch_size]
            totals = self._score_batch([sources[i] for i in indices], [targets[i] for i in indices])
            for index, total in zip(indices, totals, strict=True):
                scores[index] = total
        return scores

    def encode(self, sources: Sequence[str], targets: Sequence[str] | None, *, max_length: int) -> Any:
        """The tokenizer's batch of ``sources`` (with the family's source prefix) and, if given, ``targets`` as
        ``labels``: padded, cut at ``max_length`` subwords, as tensors on this translator's device."""
        texts = [self.languages.source_prefix + text for text in sources]
        text_target = list(targets) if targets is not None else None
        encoded = self.tokenizer(
            texts, text_target=text_target, padding=True, truncation=True, max_length=max_length, return_tensors="pt"
        )
        return encoded.to(self.device)

    def decoder_inputs(self, labels: torch.Tensor) -> torch.Tensor:
        """The decoder's inputs for ``labels`` (B, M): the model's own shift where it has one (mBART rotates the
        end of sentence to the front), else shifted one step right behind the decoder's start token."""
        prepare = getattr(self.model, "prepare_decoder_input_ids_from_labels", None)
        if prepare is not None:
            return prepare(labels=labels)  # type: ignore[no-any-return]
        pad_id, start_id = self.model.config.pad_token_id, self.model.config.decoder_start_token_id
        shifted = labels.new_full(labels.shape, start_id)
        shifted[:, 1:] = labels[:, :-1]
        return shifted.masked_fill(shifted == -100, pad_id)

    def _score_batch(self, sources: list[str], targets: list[str]) -> list[float]:
        inputs = self.encode(sources, targets, max_length=self.model.config.max_position_embeddings)
        labels = inputs.pop("labels")  # (B, M) target ids, </s> last, pad after
        pad_id = self.model.config.pad_token_id
        with torch.inference_mode():
            logits = self.model(**inputs, decoder_input_ids=self.decoder_inputs(labels)).logits  # (B, M, V)
        picked = torch.log_softmax(logits.float(), dim=-1).gather(-1, labels[..., None]).squeeze(-1)  # (B, M)
        ignored = labels == pad_id
        if self.languages.forced_bos_token_id is not None:
            ignored[:, 0] = True  # the target's language code, forced at generation
        return [float(total) for total in picked.masked_fill(ignored, 0.0).sum(dim=1)]

    def _translate_batch(self, sentences: list[str], beam: int, max_new_tokens: int) -> list[str]:
        limit = self.model.config.max_position_embeddings
        inputs = self.encode(sentences, None, max_length=limit)
        at_limit = int((inputs["attention_mask"].sum(dim=1) >= limit).sum())
        if at_limit:
            logger.warning(
                "%s: %d source sentences reached the %d-subword limit (longer ones are cut)", self.name, at_limit, limit
            )
        forced: dict[str, int] = {}
        if self.languages.forced_bos_token_id is not None:
            forced["forced_bos_token_id"] = self.languages.forced_bos_token_id
        with torch.inference_mode():
            generated = self.model.generate(
                **inputs, num_beams=beam, max_new_tokens=max_new_tokens, do_sample=False, **forced
            )
        forced_id = self.languages.forced_bos_token_id
        if forced_id is not None and generated.shape[1] > 1 and bool((generated[:, 1] == forced_id).all()):
            # the decoder start and the target's code: some tokenizers (M2M100's) decode the code as text
            generated = generated[:, 2:]
        return [str(text).strip() for text in self.tokenizer.batch_decode(generated, skip_special_tokens=True)]

    def _generation_limit(self, max_len: int) -> int:
        # the learned or sinusoidal positions end at max_position_embeddings; the decoder start token takes one
        room = self.model.config.max_position_embeddings - 1
        if max_len > room:
            logger.warning("%s: max_len %d exceeds the model's %d positions; using %d", self.name, max_len, room, room)
        return min(max_len, room)


def check_model_folder(path: str | os.PathLike[str]) -> Path:
    """``path`` as a model folder: a local directory with config.json and a weight file.

    Raises:
        InputError: not a local directory (e.g. a hub id), or a file is missing.
    """
    folder = Path(path)
    if not folder.is_dir():
        raise InputError(
            f"{path} is not a local directory; this tool never downloads: "
            "download the model elsewhere and point at its folder"
        )
    missing = [] if (folder / "config.json").is_file() else ["config.json"]
    if weights_file(folder) is None:
        missing.append(" or ".join(WEIGHT_FILES))
    if missing:
        sharded = " (its weights are sharded: save the model as one file)" if any(folder.glob("*.index.json")) else ""
        raise InputError(f"{folder}: not a model folder, missing {', '.join(missing)}{sharded}")
    return folder


def load_model(folder: Path) -> PreTrainedModel:
    """The model of a checked model folder, refused unless its weights are exactly what config.json describes and
    finite: transformers would initialise missing or mis-shaped parameters at random and drop unexpected ones, so a
    config claiming more layers than the weights hold would translate with random layers. A ``pytorch_model.bin``
    is read with the restricted unpickler (``weights_only``).

    Raises:
        InputError: names the folder, and the first few missing, unexpected or mis-shaped parameters; the tensor
            holding NaN or infinity; or what the restricted unpickler refused, and how to convert the file.
    """
    import pickle

    from transformers import AutoModelForSeq2SeqLM
    from transformers.utils import logging as transformers_logging

    weights = weights_file(folder)
    assert weights is not None, "check_model_folder found the weights"
    verbosity, bar = transformers_logging.get_verbosity(), transformers_logging.is_progress_bar_enabled()
    transformers_logging.set_verbosity_error()  # its load report lists what is refused below, over many lines
    transformers_logging.disable_progress_bar()
    try:
        model, info = AutoModelForSeq2SeqLM.from_pretrained(
            str(folder),
            local_files_only=True,
            weights_only=True,
            output_loading_info=True,
            ignore_mismatched_sizes=True,
        )
    except (pickle.UnpicklingError, EOFError, OSError) as error:  # a refused pickle, a truncated or foreign file
        raise pickle_refusal(weights, error, "model weights file") from None
    finally:
        transformers_logging.set_verbosity(verbosity)
        if bar:
            transformers_logging.enable_progress_bar()
    misshaped = {name: (tuple(stored), tuple(own)) for name, stored, own in info["mismatched_keys"]}
    problems = fit_problems(info["missing_keys"], info["unexpected_keys"], misshaped)
    if problems:
        raise InputError(
            f"{folder}: the weights in {weights.name} do not fit the model config.json describes: {'; '.join(problems)}"
        )
    check_finite_once(weights, model.state_dict(), file_version(weights))
    return model


def weights_file(folder: Path) -> Path | None:
    """The folder's weight file, model.safetensors before pytorch_model.bin; None without either."""
    return next((folder / name for name in WEIGHT_FILES if (folder / name).is_file()), None)


def check_pairs(src_texts: Sequence[str], tgt_texts: Sequence[str], *, where: str) -> None:
    """Raises InputError unless the sides align and hold sentences."""
    if len(src_texts) != len(tgt_texts):
        raise InputError(f"{where} pairs: {len(src_texts)} source but {len(tgt_texts)} target sentences")
    if not src_texts:
        raise InputError(f"{where} pairs: no sentences")


def fit(
    translator: Seq2SeqTranslator,
    train: tuple[Sequence[str], Sequence[str]],
    val: tuple[Sequence[str], Sequence[str]] | None,
    config: TrainingSchedule,
    *,
    seed: int,
    settings_key: str,
    progress: ProgressFn | None = None,
    phase: str = "train",
    on_epoch: EpochFn | None = None,
    stop: threading.Event | None = None,
) -> None:
    """Train ``translator``'s model in place: AdamW over shuffled batches with warm-up then inverse-square-root
    decay; with ``val`` pairs, the weights of the epoch with the lowest validation loss are kept. The model is left
    in eval mode. ``settings_key`` (e.g. ``mmt.seq2seq.finetune``) is named when training diverges. Each epoch logs
    one line (:mod:`common.epoch_log`: ``mt-en-de train · epoch 2/10 · step 64 · loss 3.412 · val loss 3.120 (best
    3.120) · ...``, epochs counted from 1; ``phase`` follows the system's name), which ``on_epoch`` gets too. ``stop``
    set, the training is given up before the next batch (:class:`common.stopping.Cancelled`)."""
    model = translator.model
    src_texts, tgt_texts = train
    batches_per_epoch = math.ceil(len(src_texts) / config.batch_size)
    total_steps = batches_per_epoch * config.epochs
    if config.max_steps is not None:
        total_steps = min(total_steps, config.max_steps)
    epochs = math.ceil(total_steps / batches_per_epoch)  # max_steps may end the schedule early
    started = time.perf_counter()
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    warmup = max(config.warmup_steps, 1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min((step + 1) / warmup, math.sqrt(warmup / (step + 1)))
    )
    order_rng = torch.Generator().manual_seed(seed)
    best_loss, best_state, step = math.inf, None, 0
    for epoch in range(config.epochs):
        model.train()
        losses: list[float] = []
        order = torch.randperm(len(src_texts), generator=order_rng).tolist()
        for start in range(0, len(order), config.batch_size):
            if step == total_steps:
                break
            check(stop, f"{translator.name} {phase} epoch {epoch + 1}")
            batch = order[start : start + config.batch_size]
            loss = _batch_loss(translator, [src_texts[i] for i in batch], [tgt_texts[i] for i in batch], config)
            if not math.isfinite(loss.item()):
                raise FloatingPointError(
                    f"{translator.name} training diverged at epoch {epoch + 1}, step {step}: the loss is "
                    f"{loss.item()} (try a lower {settings_key}.lr)"
                )
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), config.clip_norm))
            if not math.isfinite(norm):
                raise FloatingPointError(
                    f"{translator.name} training diverged at epoch {epoch + 1}, step {step}: the gradient norm is "
                    f"{norm}"
                )
            optimizer.step()
            scheduler.step()
            step += 1
            losses.append(loss.item())
            if progress is not None:
                progress(step, total_steps, losses[-1])
        scores: dict[str, float] = {}
        if val is not None:
            val_loss = _validation_loss(translator, val, config)
            scores[""] = val_loss
            if val_loss < best_loss:
                best_loss, best_state = val_loss, copy.deepcopy(model.state_dict())
        elapsed = time.perf_counter() - started
        line = EpochLine(
            run=f"{translator.name} {phase}",
            epoch=epoch + 1,
            epochs=epochs,
            loss=sum(losses) / len(losses) if losses else None,
            score_name="val loss" if scores else "",
            scores=scores,
            best=best_loss if scores else None,
            decimals=3,
            step=step,
            seconds_per_epoch=elapsed / (epoch + 1),
            seconds_left=seconds_left(elapsed, epoch + 1, epochs),
        )
        logger.info("%s", format_epoch(line))
        if on_epoch is not None:
            on_epoch(line)
        if step == total_steps:
            break
    if best_state is not None:
        model.load_state_dict(best_state)
    model.eval()


def _batch_loss(
    translator: Seq2SeqTranslator,
    src: list[str],
    tgt: list[str],
    config: TrainingSchedule,
    label_smoothing: float | None = None,
) -> torch.Tensor:
    """Mean token cross-entropy of one batch (padding ignored)."""
    # a held model's positions may end before max_len (the Marian trained here checks max_len against its own)
    limit = min(config.max_len, translator.model.config.max_position_embeddings - 1)
    encoded = translator.encode(src, tgt, max_length=limit)
    pad_id = translator.model.config.pad_token_id
    decoder_input_ids = translator.decoder_inputs(encoded["labels"])
    labels = encoded["labels"].masked_fill(encoded["labels"] == pad_id, -100)
    logits = translator.model(
        input_ids=encoded["input_ids"], attention_mask=encoded["attention_mask"], decoder_input_ids=decoder_input_ids
    ).logits  # (batch, tgt_len, vocab)
    smoothing = config.label_smoothing if label_smoothing is None else label_smoothing
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100, label_smoothing=smoothing)


def _validation_loss(
    translator: Seq2SeqTranslator, val: tuple[Sequence[str], Sequence[str]], config: TrainingSchedule
) -> float:
    """Mean per-batch cross-entropy without label smoothing, in eval mode."""
    translator.model.eval()
    src_texts, tgt_texts = val
    losses = []
    with torch.no_grad():
        for start in range(0, len(src_texts), config.batch_size):
            src = list(src_texts[start : start + config.batch_size])
            tgt = list(tgt_texts[start : start + config.batch_size])
            losses.append(float(_batch_loss(translator, src, tgt, config, label_smoothing=0.0)))
    translator.model.train()
    return sum(losses) / len(losses)
