"""The Marian backend: transformers' MarianMTModel behind the text-only Translator interface.

Models come from local folders only (an OPUS-MT download, or one trained here by :func:`train_marian`);
a hub id is refused at once instead of letting transformers try the network.
"""

from __future__ import annotations

import copy
import json
import logging
import math
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import sentencepiece as spm
import torch
import torch.nn.functional as F

from common.checks import SettingError, check, check_fraction, check_positive, check_range
from common.errors import InputError
from common.files import atomic_dir
from mmt.text import train_sentencepiece

# transformers takes seconds to import, and every stage imports this module for its settings (MarianSettings):
# the functions that build, load or run a model import it themselves
if TYPE_CHECKING:
    from transformers import MarianMTModel, MarianTokenizer

logger = logging.getLogger(__name__)

REQUIRED_FILES = ("config.json", "source.spm", "target.spm", "vocab.json")
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
# OPUS-MT's sentencepiece layout: <unk> 0, <s> 1, </s> 2, no pad (pad lives only in vocab.json).
_MARIAN_SPM_SPECIALS = (-1, 0, 1, 2)

ProgressFn = Callable[[int, int, float], None]
"""Called after each optimizer step with (step, total_steps, training loss)."""


@dataclass(frozen=True)
class MarianTrainConfig:
    """A small Marian transformer trained from scratch, and how to train it.

    Attributes:
        vocab_size: sentencepiece unigram pieces per side (lowered if the corpus is too small).
        d_model: Width of embeddings and hidden states.
        encoder_layers: Transformer encoder layers.
        decoder_layers: Transformer decoder layers.
        attention_heads: Heads per attention layer (encoder and decoder).
        ffn_dim: Width of the feed-forward layers.
        dropout: Dropout on embeddings, attention outputs and feed-forward outputs.
        max_position_embeddings: Longest sequence (in subwords) the model can take.
        max_len: Subwords kept per training sentence, and the saved generation length limit.
        batch_size: Sentence pairs per step.
        epochs: Passes over the training pairs.
        max_steps: Stop after this many steps, if set (smoke tests, quick demos).
        lr: AdamW peak learning rate, reached after ``warmup_steps``.
        warmup_steps: Linear warm-up steps; the rate then decays with the inverse square root of the step.
        weight_decay: AdamW weight decay.
        label_smoothing: Label smoothing of the cross-entropy (0.1 as in OPUS-MT / Marian).
        clip_norm: Gradient norm clipping.
    """

    vocab_size: int = 8000
    d_model: int = 256
    encoder_layers: int = 3
    decoder_layers: int = 3
    attention_heads: int = 4
    ffn_dim: int = 1024
    dropout: float = 0.1
    max_position_embeddings: int = 128
    max_len: int = 100
    batch_size: int = 32
    epochs: int = 10
    max_steps: int | None = None
    lr: float = 5e-4
    warmup_steps: int = 400
    weight_decay: float = 0.0
    label_smoothing: float = 0.1
    clip_norm: float = 1.0

    def __post_init__(self) -> None:
        check_range("vocab_size", self.vocab_size, 50, 200_000)
        for name in ("d_model", "encoder_layers", "decoder_layers", "attention_heads", "ffn_dim", "batch_size"):
            check_range(name, getattr(self, name), 1, 65_536)
        if self.d_model % self.attention_heads:
            raise SettingError("attention_heads", f"got {self.attention_heads}, allowed: a divisor of d_model")
        check_fraction("dropout", self.dropout, below_one=True)
        check_range("max_position_embeddings", self.max_position_embeddings, 8, 65_536)
        # the decoder also needs a position for its start token
        check_range("max_len", self.max_len, 1, self.max_position_embeddings - 1)
        check_range("epochs", self.epochs, 1, 10_000)
        if self.max_steps is not None:
            check_range("max_steps", self.max_steps, 1, 100_000_000)
        check_positive("lr", self.lr, below=1.0)
        check_range("warmup_steps", self.warmup_steps, 0, 100_000_000)
        check_fraction("weight_decay", self.weight_decay)
        check_fraction("label_smoothing", self.label_smoothing, below_one=True)
        check_positive("clip_norm", self.clip_norm)


@dataclass(frozen=True)
class MarianSettings:
    """The Marian MT backend (the `mmt.marian` section of params.yaml).

    Attributes:
        local_dirs: "<src>-<tgt>" -> a Marian model folder you hold (e.g. opus-mt-en-de, downloaded
            elsewhere) in the MT models folder; pairs without one get a model trained here.
        train: The model trained here for the other pairs, and how.
    """

    local_dirs: dict[str, str] = field(default_factory=dict)
    train: MarianTrainConfig = field(default_factory=MarianTrainConfig)

    def __post_init__(self) -> None:
        for pair in self.local_dirs:
            check(re.fullmatch(r"[a-z]{2}-[a-z]{2}", pair) is not None, f"local_dirs.{pair}", pair, "<src>-<tgt>")


class MarianTranslator:
    """A MarianMTModel with its tokenizer, translating batches of detokenised sentences."""

    def __init__(self, model: MarianMTModel, tokenizer: MarianTokenizer, *, name: str, device: torch.device) -> None:
        self.name = name
        self.model = model.to(device).eval()  # type: ignore[arg-type]  # mypy misreads transformers' wrapped .to()
        # translate() always passes max_new_tokens; a saved max_length would only make generate() warn on every call.
        self.model.generation_config.max_length = None
        self.tokenizer = tokenizer
        self.device = device

    @classmethod
    def from_local(
        cls, path: str | os.PathLike[str], *, device: torch.device, name: str | None = None
    ) -> MarianTranslator:
        """Load a Marian model folder (config.json, weights, source.spm, target.spm, vocab.json).

        Raises:
            InputError: ``path`` is not a local folder (e.g. a hub id), or lacks one of the files.
        """
        from transformers import MarianMTModel, MarianTokenizer

        folder = _check_local_folder(path)
        tokenizer = MarianTokenizer.from_pretrained(str(folder), local_files_only=True)
        model = MarianMTModel.from_pretrained(str(folder), local_files_only=True, weights_only=True)
        return cls(model, tokenizer, name=name or folder.name, device=device)

    def translate(
        self,
        sentences: Sequence[str],
        image_ids: Sequence[str] | None = None,
        *,
        beam: int = 5,
        batch_size: int = 32,
        max_len: int = 100,
    ) -> list[str]:
        """Translate with beam search; one detokenised output per input, in input order.

        Sentences are batched by length (less padding), then put back in input order. ``image_ids`` are
        ignored: the model reads text only.
        """
        if beam < 1 or batch_size < 1 or max_len < 1:
            raise ValueError(f"beam, batch_size and max_len must be positive, got {beam}, {batch_size}, {max_len}")
        max_new_tokens = self._generation_limit(max_len)
        order = sorted(range(len(sentences)), key=lambda index: len(sentences[index]))
        outputs = [""] * len(sentences)
        for start in range(0, len(order), batch_size):
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
        """Teacher-forced log-probability of each target, ``</s>`` included, in input order. ``image_ids`` are
        ignored: the model reads text only."""
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

    def _score_batch(self, sources: list[str], targets: list[str]) -> list[float]:
        limit = self.model.config.max_position_embeddings
        inputs = self.tokenizer(
            sources, text_target=targets, return_tensors="pt", padding=True, truncation=True, max_length=limit
        ).to(self.device)
        labels = inputs.pop("labels")  # (B, M) target ids, </s> last, pad after
        pad_id = self.model.config.pad_token_id
        decoder_input_ids = _decoder_inputs(labels, pad_id, self.model.config.decoder_start_token_id)
        with torch.inference_mode():
            logits = self.model(**inputs, decoder_input_ids=decoder_input_ids).logits  # (B, M, V)
        picked = torch.log_softmax(logits.float(), dim=-1).gather(-1, labels[..., None]).squeeze(-1)  # (B, M)
        return [float(total) for total in picked.masked_fill(labels == pad_id, 0.0).sum(dim=1)]

    def _translate_batch(self, sentences: list[str], beam: int, max_new_tokens: int) -> list[str]:
        limit = self.model.config.max_position_embeddings
        inputs = self.tokenizer(sentences, return_tensors="pt", padding=True, truncation=True, max_length=limit)
        at_limit = int((inputs["attention_mask"].sum(dim=1) >= limit).sum())
        if at_limit:
            logger.warning(
                "%s: %d source sentences reached the %d-subword limit (longer ones are cut)", self.name, at_limit, limit
            )
        with torch.inference_mode():
            generated = self.model.generate(
                **inputs.to(self.device), num_beams=beam, max_new_tokens=max_new_tokens, do_sample=False
            )
        return [str(text) for text in self.tokenizer.batch_decode(generated, skip_special_tokens=True)]

    def _generation_limit(self, max_len: int) -> int:
        # Marian's sinusoidal positions end at max_position_embeddings; the decoder start token takes one.
        room = self.model.config.max_position_embeddings - 1
        if max_len > room:
            logger.warning("%s: max_len %d exceeds the model's %d positions; using %d", self.name, max_len, room, room)
        return min(max_len, room)


def _check_local_folder(path: str | os.PathLike[str]) -> Path:
    folder = Path(path)
    if not folder.is_dir():
        raise InputError(
            f"{path} is not a local directory; this tool never downloads: "
            "download the model elsewhere and point at its folder"
        )
    missing = [name for name in REQUIRED_FILES if not (folder / name).is_file()]
    if not any((folder / name).is_file() for name in WEIGHT_FILES):
        missing.append(" or ".join(WEIGHT_FILES))
    if missing:
        raise InputError(
            f"{folder}: not a Marian model folder, missing {', '.join(missing)} "
            f"(expected {', '.join(REQUIRED_FILES)} and weights as {' or '.join(WEIGHT_FILES)})"
        )
    return folder


def train_marian(
    src_texts: Sequence[str],
    tgt_texts: Sequence[str],
    *,
    out_dir: Path,
    src_lang: str,
    tgt_lang: str,
    config: MarianTrainConfig,
    val: tuple[Sequence[str], Sequence[str]] | None = None,
    device: torch.device,
    seed: int,
    progress: ProgressFn | None = None,
) -> MarianTranslator:
    """Train a small Marian model from scratch on parallel text and save it as a model folder.

    The folder (written atomically) holds what :meth:`MarianTranslator.from_local` loads: config,
    weights, generation config (with ``max_length``), ``source.spm``/``target.spm`` (unigram models
    trained here) and the joint ``vocab.json``. With ``val`` pairs, the weights of the epoch with the
    lowest validation loss are kept. Deterministic on CPU for a fixed ``seed``.

    Args:
        src_texts: Source sentences (detokenised, as the translator will see them).
        tgt_texts: Target sentences aligned with ``src_texts``.
        out_dir: The model folder to write (replaced as a whole).
        src_lang: ISO 639-1 code of the source language.
        tgt_lang: ISO 639-1 code of the target language.
        config: Model size and training settings.
        val: Optional (source, target) validation sentences.
        device: Where to train.
        seed: Seeds the tokenizers, initialisation, dropout and batch order.
        progress: Called after every step as ``progress(step, total_steps, loss)``.

    Returns:
        The trained model, loaded back from ``out_dir``.
    """
    _check_pairs(src_texts, tgt_texts, where="training")
    if val is not None:
        _check_pairs(*val, where="validation")
    with atomic_dir(out_dir) as tmp, torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)  # forked: initialisation and dropout are seeded without touching the caller's RNG
        tokenizer = _build_tokenizer(src_texts, tgt_texts, tmp, src_lang, tgt_lang, config, seed)
        model = _build_model(config, vocab_size=tokenizer.vocab_size)
        model.to(device)  # type: ignore[arg-type]  # mypy misreads transformers' wrapped .to()
        _fit(model, tokenizer, (src_texts, tgt_texts), val, config, device, seed, progress)
        model.generation_config.max_length = config.max_len + 1  # + the decoder start token
        model.generation_config.bad_words_ids = [[model.config.pad_token_id]]  # never emit pad, as OPUS-MT
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    return MarianTranslator.from_local(out_dir, device=device)


def _check_pairs(src_texts: Sequence[str], tgt_texts: Sequence[str], *, where: str) -> None:
    if len(src_texts) != len(tgt_texts):
        raise InputError(f"{where} pairs: {len(src_texts)} source but {len(tgt_texts)} target sentences")
    if not src_texts:
        raise InputError(f"{where} pairs: no sentences")


def _build_tokenizer(
    src_texts: Sequence[str],
    tgt_texts: Sequence[str],
    folder: Path,
    src_lang: str,
    tgt_lang: str,
    config: MarianTrainConfig,
    seed: int,
) -> MarianTokenizer:
    """Train source/target unigram models into ``folder`` and build the joint vocab.json from both."""
    from transformers import MarianTokenizer

    for name, texts in (("source.spm", src_texts), ("target.spm", tgt_texts)):
        proto = train_sentencepiece(
            texts,
            vocab_size=config.vocab_size,
            seed=seed,
            where=f"{src_lang}-{tgt_lang} Marian {name}",
            model_type="unigram",
            normalization="nmt_nfkc",  # what OPUS-MT's models use; MarianTokenizer feeds raw text to them
            special_ids=_MARIAN_SPM_SPECIALS,
        )
        (folder / name).write_bytes(proto)
    vocab = _joint_vocab(folder / "source.spm", folder / "target.spm")
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False, indent=2), encoding="utf-8")
    return MarianTokenizer(
        source_spm=str(folder / "source.spm"),
        target_spm=str(folder / "target.spm"),
        vocab=str(folder / "vocab.json"),
        source_lang=src_lang,
        target_lang=tgt_lang,
        model_max_length=config.max_position_embeddings,
    )


def _joint_vocab(*spm_paths: Path) -> dict[str, int]:
    """OPUS-MT's vocab.json layout: ``</s>`` 0, ``<unk>`` 1, every piece of both models, ``<pad>`` last."""
    vocab = {"</s>": 0, "<unk>": 1}
    for path in spm_paths:
        processor = spm.SentencePieceProcessor(model_file=str(path))
        for id_ in range(processor.get_piece_size()):
            if processor.is_control(id_) or processor.is_unknown(id_):
                continue
            vocab.setdefault(processor.id_to_piece(id_), len(vocab))
    vocab["<pad>"] = len(vocab)
    return vocab


def _build_model(config: MarianTrainConfig, *, vocab_size: int) -> MarianMTModel:
    from transformers import MarianConfig, MarianMTModel

    pad_id = vocab_size - 1
    marian_config = MarianConfig(
        vocab_size=vocab_size,
        decoder_vocab_size=vocab_size,
        d_model=config.d_model,
        encoder_layers=config.encoder_layers,
        decoder_layers=config.decoder_layers,
        encoder_attention_heads=config.attention_heads,
        decoder_attention_heads=config.attention_heads,
        encoder_ffn_dim=config.ffn_dim,
        decoder_ffn_dim=config.ffn_dim,
        dropout=config.dropout,
        max_position_embeddings=config.max_position_embeddings,
        activation_function="swish",  # OPUS-MT's choice
        scale_embedding=True,
        pad_token_id=pad_id,
        decoder_start_token_id=pad_id,  # Marian starts decoding from pad
        eos_token_id=0,
        forced_eos_token_id=0,
    )
    return MarianMTModel(marian_config)


def _fit(
    model: MarianMTModel,
    tokenizer: MarianTokenizer,
    train: tuple[Sequence[str], Sequence[str]],
    val: tuple[Sequence[str], Sequence[str]] | None,
    config: MarianTrainConfig,
    device: torch.device,
    seed: int,
    progress: ProgressFn | None,
) -> None:
    """AdamW over shuffled batches with warm-up then inverse-square-root decay."""
    src_texts, tgt_texts = train
    batches_per_epoch = math.ceil(len(src_texts) / config.batch_size)
    total_steps = batches_per_epoch * config.epochs
    if config.max_steps is not None:
        total_steps = min(total_steps, config.max_steps)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    warmup = max(config.warmup_steps, 1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min((step + 1) / warmup, math.sqrt(warmup / (step + 1)))
    )
    order_rng = torch.Generator().manual_seed(seed)
    best_loss, best_state, step = math.inf, None, 0
    for epoch in range(config.epochs):
        model.train()
        order = torch.randperm(len(src_texts), generator=order_rng).tolist()
        for start in range(0, len(order), config.batch_size):
            if step == total_steps:
                break
            batch = order[start : start + config.batch_size]
            loss = _batch_loss(
                model, tokenizer, [src_texts[i] for i in batch], [tgt_texts[i] for i in batch], config, device
            )
            if not math.isfinite(loss.item()):
                raise FloatingPointError(
                    f"Marian training diverged at epoch {epoch}, step {step}: the loss is "
                    f"{loss.item()} (try a lower mmt.marian.train.lr)"
                )
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), config.clip_norm))
            if not math.isfinite(norm):
                raise FloatingPointError(
                    f"Marian training diverged at epoch {epoch}, step {step}: the gradient norm is {norm}"
                )
            optimizer.step()
            scheduler.step()
            step += 1
            if progress is not None:
                progress(step, total_steps, loss.item())
        if val is not None:
            val_loss = _validation_loss(model, tokenizer, val, config, device)
            logger.info("epoch %d: step %d, validation loss %.4f", epoch + 1, step, val_loss)
            if val_loss < best_loss:
                best_loss, best_state = val_loss, copy.deepcopy(model.state_dict())
        if step == total_steps:
            break
    if best_state is not None:
        model.load_state_dict(best_state)
    model.eval()


def _decoder_inputs(labels: torch.Tensor, pad_id: int, start_id: int) -> torch.Tensor:
    """Marian's decoder inputs for ``labels`` (B, M): shifted one step right behind the decoder's start token."""
    from transformers.models.marian.modeling_marian import shift_tokens_right

    return shift_tokens_right(labels, pad_id, start_id)


def _batch_loss(
    model: MarianMTModel,
    tokenizer: MarianTokenizer,
    src: list[str],
    tgt: list[str],
    config: MarianTrainConfig,
    device: torch.device,
    label_smoothing: float | None = None,
) -> torch.Tensor:
    """Mean token cross-entropy of one batch (padding ignored)."""
    encoded = tokenizer(
        src, text_target=tgt, padding=True, truncation=True, max_length=config.max_len, return_tensors="pt"
    ).to(device)
    pad_id = model.config.pad_token_id
    assert pad_id is not None, "_build_model always sets pad_token_id"
    decoder_input_ids = _decoder_inputs(encoded["labels"], pad_id, model.config.decoder_start_token_id)
    labels = encoded["labels"].masked_fill(encoded["labels"] == pad_id, -100)
    logits = model(
        input_ids=encoded["input_ids"], attention_mask=encoded["attention_mask"], decoder_input_ids=decoder_input_ids
    ).logits  # (batch, tgt_len, vocab)
    smoothing = config.label_smoothing if label_smoothing is None else label_smoothing
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100, label_smoothing=smoothing)


def _validation_loss(
    model: MarianMTModel,
    tokenizer: MarianTokenizer,
    val: tuple[Sequence[str], Sequence[str]],
    config: MarianTrainConfig,
    device: torch.device,
) -> float:
    """Mean per-batch cross-entropy without label smoothing, in eval mode."""
    model.eval()
    src_texts, tgt_texts = val
    losses = []
    with torch.no_grad():
        for start in range(0, len(src_texts), config.batch_size):
            src = list(src_texts[start : start + config.batch_size])
            tgt = list(tgt_texts[start : start + config.batch_size])
            losses.append(float(_batch_loss(model, tokenizer, src, tgt, config, device, label_smoothing=0.0)))
    model.train()
    return sum(losses) / len(losses)
