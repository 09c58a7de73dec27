"""A small Marian transformer trained from scratch here, for the pairs without a held model.

The folder it writes is an OPUS-MT-layout Marian folder (config, weights, ``source.spm``/``target.spm``, the joint
``vocab.json``) that :class:`~mmt.seq2seq.Seq2SeqTranslator` loads like any held model.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import sentencepiece as spm
import torch

from common.checks import SettingError, check_fraction, check_positive, check_range
from common.files import atomic_dir
from mmt.seq2seq import EpochFn, ProgressFn, Seq2SeqTranslator, check_pairs, fit
from mmt.seq2seq_languages import LanguageSetup
from mmt.text import train_sentencepiece

# transformers takes seconds to import, and every stage imports this module for its settings (MarianTrainConfig):
# the functions that build a model import it themselves
if TYPE_CHECKING:
    from transformers import MarianMTModel, MarianTokenizer

logger = logging.getLogger(__name__)

# OPUS-MT's sentencepiece layout: <unk> 0, <s> 1, </s> 2, no pad (pad lives only in vocab.json).
_MARIAN_SPM_SPECIALS = (-1, 0, 1, 2)


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
    on_epoch: EpochFn | None = None,
    stop: threading.Event | None = None,
) -> Seq2SeqTranslator:
    """Train a small Marian model from scratch on parallel text and save it as a model folder.

    The folder (written atomically) holds what :meth:`~mmt.seq2seq.Seq2SeqTranslator.from_folder` loads: config,
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
        on_epoch: Called with each epoch's log line (``mt-en-de train · epoch 1/10 · ...``).
        stop: Checked before each batch: once set, the training is given up (:class:`common.stopping.Cancelled`).

    Returns:
        The trained model, loaded back from ``out_dir``.
    """
    check_pairs(src_texts, tgt_texts, where="training")
    if val is not None:
        check_pairs(*val, where="validation")
    with atomic_dir(out_dir) as tmp, torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)  # forked: initialisation and dropout are seeded without touching the caller's RNG
        tokenizer = _build_tokenizer(src_texts, tgt_texts, tmp, src_lang, tgt_lang, config, seed)
        model = _build_model(config, vocab_size=tokenizer.vocab_size)
        translator = Seq2SeqTranslator(model, tokenizer, LanguageSetup("marian"), name=out_dir.name, device=device)
        fit(
            translator,
            (src_texts, tgt_texts),
            val,
            config,
            seed=seed,
            settings_key="mmt.seq2seq.train",
            progress=progress,
            on_epoch=on_epoch,
            stop=stop,
        )
        model.generation_config.max_length = config.max_len + 1  # + the decoder start token
        model.generation_config.bad_words_ids = [[model.config.pad_token_id]]  # never emit pad, as OPUS-MT
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    return Seq2SeqTranslator.from_folder(out_dir, src=src_lang, tgt=tgt_lang, device=device)


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
