"""Text processing for the MMT models: Moses normalisation and tokenisation, then sentencepiece BPE.

A sentence travels ``raw -> MosesText.preprocess -> SubwordVocab.encode -> ids`` on the way in and
``ids -> SubwordVocab.decode -> MosesText.postprocess -> detokenised text`` on the way out. The
special ids are fixed (pad 0, unk 1, bos 2, eos 3) because the model code builds its embeddings and
masks on them.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import sentencepiece as spm
from sacremoses import MosesDetokenizer

from common.checks import check_range
from common.errors import InputError
from common.files import atomic_path, final_path, read_json, write_text
from mmt.moses import PunctNormalizer, WordTokenizer
from mmt.sample import reservoir_sample

logger = logging.getLogger(__name__)

PAD_ID = 0
UNK_ID = 1
BOS_ID = 2
EOS_ID = 3

# Moses `-a` writes "rock-face" as "rock @-@ face". The detokeniser only joins the marker between two
# tokens; a model can also emit it first or last, so join it (and any spaces around it) here.
_AGGRESSIVE_HYPHEN = re.compile(r"\s*@-@\s*")
# sentencepiece's message when a corpus has fewer distinct pieces than the requested vocabulary.
_VOCAB_TOO_HIGH = re.compile(r"Vocabulary size too high \(\d+\)\. Please set it to a value <= (\d+)")


class MosesText:
    """Moses punctuation normalisation and tokenisation for one language, optionally lowercasing.

    Dashes inside words are split aggressively (Moses ``-a``), as the MMT literature does; no XML
    escaping, so tokens stay plain text. The strings are sacremoses' (``MosesPunctNormalizer``, then
    ``MosesTokenizer.tokenize`` with those settings), computed faster (:mod:`mmt.moses`).
    """

    def __init__(self, lang: str, lowercase: bool) -> None:
        self.lang = lang
        self.lowercase = lowercase
        self._normalizer = PunctNormalizer(lang)
        self._tokenizer = WordTokenizer(lang)
        self._detokenizer = MosesDetokenizer(lang=lang)

    def preprocess(self, text: str) -> str:
        """Lowercase (if configured), normalise punctuation and tokenise; tokens joined by single spaces."""
        if self.lowercase:
            text = text.lower()
        return self._tokenizer.tokenize(self._normalizer.normalize(text))

    def postprocess(self, tokenized: str) -> str:
        """Undo the aggressive hyphen split and detokenise a space-separated token string."""
        joined = _AGGRESSIVE_HYPHEN.sub("-", tokenized.strip())
        return self._detokenizer.detokenize(joined.split(), return_str=True, unescape=False)


class SubwordVocab:
    """A sentencepiece BPE model with fixed special ids (pad 0, unk 1, bos 2, eos 3).

    Byte fallback is off: a character never seen in training encodes as ``UNK_ID``.
    """

    def __init__(self, model_proto: bytes, *, where: str = "sentencepiece model") -> None:
        self._proto = model_proto
        try:
            self._sp = spm.SentencePieceProcessor(model_proto=model_proto)
        except RuntimeError as error:
            raise InputError(f"{where}: not a sentencepiece model ({error})") from None
        specials = (self._sp.pad_id(), self._sp.unk_id(), self._sp.bos_id(), self._sp.eos_id())
        if specials != (PAD_ID, UNK_ID, BOS_ID, EOS_ID):
            raise InputError(f"{where}: special ids are {specials}, expected (0, 1, 2, 3) for pad/unk/bos/eos")

    @classmethod
    def train(
        cls, texts: Iterable[str], model_prefix: Path, vocab_size: int, *, seed: int, threads: int = 1
    ) -> SubwordVocab:
        """Train a BPE model on ``texts`` with ``threads`` threads and write it to ``{model_prefix}.model``.

        Training is deterministic (see :func:`train_sentencepiece`, which also explains the fallback when
        the corpus is too small for ``vocab_size``). Identity normalization: Moses already normalised the
        text, and NFKC would rewrite characters and break ``decode(encode(x)) == x``.
        """
        where = f"{final_path(model_prefix)}.model"  # a stage writes into a staging folder: name the final file
        proto = train_sentencepiece(list(texts), vocab_size=vocab_size, seed=seed, where=where, num_threads=threads)
        vocab = cls(proto)
        vocab.save(Path(f"{model_prefix}.model"))
        return vocab

    @classmethod
    def load(cls, path: Path) -> SubwordVocab:
        """Load a model written by :meth:`save` or :meth:`train`."""
        if not path.is_file():
            raise InputError(f"{path}: sentencepiece model not found")
        return cls(path.read_bytes(), where=str(path))

    def save(self, path: Path) -> None:
        """Write the serialized model atomically."""
        with atomic_path(path) as tmp:
            tmp.write_bytes(self._proto)

    @property
    def serialized(self) -> bytes:
        """The sentencepiece model's bytes (what :meth:`save` writes)."""
        return self._proto

    @property
    def size(self) -> int:
        """Number of ids, specials included."""
        return int(self._sp.get_piece_size())

    def piece(self, id_: int) -> str:
        """The subword string of ``id_``."""
        return str(self._sp.id_to_piece(id_))

    def encode(self, text: str) -> list[int]:
        """Subword ids of ``text``, without bos/eos."""
        return list(self._sp.encode(text, out_type=int))

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids`` (special ids other than unk produce nothing)."""
        return str(self._sp.decode(list(ids)))


def train_sentencepiece(
    sentences: Sequence[str],
    *,
    vocab_size: int,
    seed: int,
    where: str,
    model_type: str = "bpe",
    normalization: str = "identity",
    special_ids: tuple[int, int, int, int] = (PAD_ID, UNK_ID, BOS_ID, EOS_ID),
    num_threads: int = 1,
) -> bytes:
    """Train a sentencepiece model in memory, deterministically, and return its serialized bytes.

    Every sentence is read in order (a sample is the caller's: :func:`mmt.sample.reservoir_sample`), with a
    fixed seed. The pieces and their scores are the same for any ``num_threads``, but the model records the
    thread count it was trained with, so its bytes (and the hash of :meth:`TextPipeline.identity`) are the same
    for the same data and thread count. If the corpus cannot fill ``vocab_size`` pieces, training is repeated
    with the largest size sentencepiece reports as possible, and a warning naming ``where`` says so.

    Args:
        sentences: Training text; blank lines are skipped.
        vocab_size: Requested number of pieces, specials included.
        seed: Seed of sentencepiece's random generator.
        where: The model's destination, for messages.
        model_type: ``"bpe"`` or ``"unigram"``.
        normalization: sentencepiece normalization rule (``"identity"`` keeps text as given).
        special_ids: Ids of pad, unk, bos and eos (-1 leaves a special out).
        num_threads: sentencepiece's training threads.

    Raises:
        InputError: no non-empty sentence to train on.
    """
    kept = [sentence for sentence in sentences if sentence.strip()]
    if not kept:
        raise InputError(f"{where}: no non-empty training sentences for the subword model")
    try:
        return _run_trainer(kept, vocab_size, seed, model_type, normalization, special_ids, num_threads)
    except RuntimeError as error:
        match = _VOCAB_TOO_HIGH.search(str(error))
        if match is None:
            raise
        largest = int(match.group(1))
        logger.warning("%s: corpus too small for %d subwords; using %d", where, vocab_size, largest)
        return _run_trainer(kept, largest, seed, model_type, normalization, special_ids, num_threads)


def _run_trainer(
    sentences: list[str],
    vocab_size: int,
    seed: int,
    model_type: str,
    normalization: str,
    special_ids: tuple[int, int, int, int],
    num_threads: int,
) -> bytes:
    spm.set_random_generator_seed(seed)
    writer = io.BytesIO()
    pad_id, unk_id, bos_id, eos_id = special_ids
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences),
        model_writer=writer,  # in memory: no file name ends up inside the model, so bytes depend on data only
        model_type=model_type,
        vocab_size=vocab_size,
        pad_id=pad_id,
        unk_id=unk_id,
        bos_id=bos_id,
        eos_id=eos_id,
        byte_fallback=False,
        character_coverage=1.0,
        normalization_rule_name=normalization,
        input_sentence_size=0,  # every sentence given, in order (sentencepiece's own sampling is not seeded by us)
        shuffle_input_sentence=False,
        num_threads=num_threads,
        minloglevel=2,
    )
    return writer.getvalue()


@dataclass(frozen=True)
class EncodedBatch:
    """Subword ids of a list of sentences.

    Attributes:
        ids: One list of ids per sentence, in input order.
        truncated: How many sentences were cut to ``max_len`` ids.
        unknown: How many ids are ``UNK_ID`` (characters the vocabulary has never seen).
    """

    ids: list[list[int]]
    truncated: int
    unknown: int


@dataclass(frozen=True)
class SubwordConfig:
    """How a language pair's text is processed (the `mmt.text` section of params.yaml).

    Attributes:
        lowercase: Lowercase before tokenising (the literature's lowercased systems).
        vocab_size: BPE vocabulary per language (or joint).
        joint: One BPE vocabulary for both languages of a pair.
        max_len: Subwords per sentence, EOS included; longer ones are truncated (and counted).
        sample_sentences: Sentence pairs the subword models are trained on: a seeded uniform sample of the training
            text, in corpus order, when it holds more (a WMT-size corpus); all of it, as it is, otherwise.
        threads: Processes that Moses-tokenise and encode a large corpus (the results do not depend on it) and
            sentencepiece's training threads (the pieces do not depend on it; the model file records it).
    """

    lowercase: bool = False
    vocab_size: int = 8000
    joint: bool = False
    max_len: int = 100
    sample_sentences: int = 1_000_000
    threads: int = 1

    def __post_init__(self) -> None:
        check_range("vocab_size", self.vocab_size, 50, 200_000)
        check_range("max_len", self.max_len, 4, 1000)
        check_range("sample_sentences", self.sample_sentences, 1000, 100_000_000)
        check_range("threads", self.threads, 1, 256)


@dataclass(frozen=True)
class TextConfig:
    """What ``text.json`` records about a language pair's text processing.

    Attributes:
        src_lang: ISO 639-1 code of the source language.
        tgt_lang: ISO 639-1 code of the target language.
        lowercase: Lowercase before tokenising.
        joint: One subword vocabulary shared by both sides.
        max_len: Most ids per encoded sentence, EOS included.
        src_vocab_size: Number of source ids.
        tgt_vocab_size: Number of target ids.
    """

    src_lang: str
    tgt_lang: str
    lowercase: bool
    joint: bool
    max_len: int
    src_vocab_size: int
    tgt_vocab_size: int


class TextPipeline:
    """Moses + subword processing for one language pair (source -> ids, ids -> target text)."""

    def __init__(
        self, config: TextConfig, src_vocab: SubwordVocab, tgt_vocab: SubwordVocab, *, threads: int = 1
    ) -> None:
        if config.max_len < 2:
            raise ValueError(f"max_len must be at least 2 (one subword and EOS), got {config.max_len}")
        sizes = (src_vocab.size, tgt_vocab.size)
        if (config.src_vocab_size, config.tgt_vocab_size) != sizes:
            raise InputError(
                f"text config says vocabulary sizes {config.src_vocab_size}/{config.tgt_vocab_size}, "
                f"the subword models have {sizes[0]}/{sizes[1]}"
            )
        self.config = config
        self.threads = threads  # processes encoding a large corpus (mmt.encoded); not saved: it changes no id
        self.src_vocab = src_vocab
        self.tgt_vocab = tgt_vocab
        self.src_text = MosesText(config.src_lang, config.lowercase)
        self.tgt_text = MosesText(config.tgt_lang, config.lowercase)

    def identity(self) -> dict[str, str]:
        """What a model trained with this pipeline depends on: the direction and both subword models' hashes."""
        return {
            "src_lang": self.config.src_lang,
            "tgt_lang": self.config.tgt_lang,
            "src_vocab_sha256": hashlib.sha256(self.src_vocab.serialized).hexdigest(),
            "tgt_vocab_sha256": hashlib.sha256(self.tgt_vocab.serialized).hexdigest(),
        }

    @classmethod
    def train(
        cls,
        src_texts: Iterable[str],
        tgt_texts: Iterable[str],
        *,
        src_lang: str,
        tgt_lang: str,
        config: SubwordConfig,
        out_dir: Path,
        seed: int,
    ) -> TextPipeline:
        """Train the subword vocabularies on Moses-processed text and save the pipeline in ``out_dir``.

        The texts are read once, as a stream: at most ``config.sample_sentences`` pairs are kept (a seeded
        reservoir sample in corpus order, :func:`mmt.sample.reservoir_sample`) and only those are tokenised, over
        ``config.threads`` processes. A corpus no larger than the sample is used whole, as it is.
        """
        from mmt.text_workers import tokenise  # here: mmt.text_workers imports this module

        lowercase, vocab_size, threads = config.lowercase, config.vocab_size, config.threads
        sample = reservoir_sample(zip(src_texts, tgt_texts, strict=True), config.sample_sentences, seed=seed)
        if sample.total > len(sample.items):
            logger.info("Subword models: a sample of %d of %d sentence pairs", len(sample.items), sample.total)
        src_tok = tokenise([src for src, _ in sample.items], lang=src_lang, lowercase=lowercase, threads=threads)
        tgt_tok = tokenise([tgt for _, tgt in sample.items], lang=tgt_lang, lowercase=lowercase, threads=threads)
        del sample
        if config.joint:
            joint = [*src_tok, *tgt_tok]
            src_vocab = tgt_vocab = SubwordVocab.train(joint, out_dir / "joint", vocab_size, seed=seed, threads=threads)
        else:
            src_vocab = SubwordVocab.train(src_tok, out_dir / "src", vocab_size, seed=seed, threads=threads)
            tgt_vocab = SubwordVocab.train(tgt_tok, out_dir / "tgt", vocab_size, seed=seed, threads=threads)
        saved = TextConfig(src_lang, tgt_lang, lowercase, config.joint, config.max_len, src_vocab.size, tgt_vocab.size)
        pipeline = cls(saved, src_vocab, tgt_vocab, threads=threads)
        pipeline.save(out_dir)
        return pipeline

    def encode_source(self, sentences: Sequence[str]) -> EncodedBatch:
        """Source ids, at most ``max_len`` per sentence; an empty sentence is an InputError naming its index."""
        return self._encode(sentences, self.src_text, self.src_vocab, side="source", eos=False)

    def encode_target(self, sentences: Sequence[str]) -> EncodedBatch:
        """Target ids ending in EOS, at most ``max_len`` per sentence including the EOS."""
        return self._encode(sentences, self.tgt_text, self.tgt_vocab, side="target", eos=True)

    def decode_target(self, ids: Sequence[Sequence[int]]) -> list[str]:
        """Detokenised target sentences; each stops at its first EOS, pad/bos are dropped."""
        sentences = []
        for row in ids:
            kept: list[int] = []
            for id_ in row:
                if id_ == EOS_ID:
                    break
                if id_ not in (PAD_ID, BOS_ID):
                    kept.append(int(id_))
            sentences.append(self.tgt_text.postprocess(self.tgt_vocab.decode(kept)))
        return sentences

    def _encode(
        self, sentences: Sequence[str], text: MosesText, vocab: SubwordVocab, *, side: str, eos: bool
    ) -> EncodedBatch:
        limit = self.config.max_len - 1 if eos else self.config.max_len
        rows: list[list[int]] = []
        truncated = unknown = 0
        for index, sentence in enumerate(sentences):
            ids = vocab.encode(text.preprocess(sentence)) if sentence.strip() else []
            if not ids:
                raise InputError(f"{side} sentence {index}: empty (every sentence must hold some text)")
            if len(ids) > limit:
                ids, truncated = ids[:limit], truncated + 1
            unknown += ids.count(UNK_ID)
            rows.append([*ids, EOS_ID] if eos else ids)
        return EncodedBatch(rows, truncated, unknown)

    def save(self, out_dir: Path) -> None:
        """Write ``text.json`` and the subword model(s) (``joint.model`` or ``src.model`` + ``tgt.model``)."""
        if self.config.joint:
            self.src_vocab.save(out_dir / "joint.model")
        else:
            self.src_vocab.save(out_dir / "src.model")
            self.tgt_vocab.save(out_dir / "tgt.model")
        write_text(out_dir / "text.json", json.dumps(asdict(self.config), indent=2, sort_keys=True) + "\n")

    @classmethod
    def load(cls, out_dir: Path, *, threads: int = 1) -> TextPipeline:
        """Read a pipeline written by :meth:`save` (``threads``: processes that encode a large corpus)."""
        config_path = out_dir / "text.json"
        if not config_path.is_file():
            raise InputError(f"{config_path}: not found (expected the text pipeline written by TextPipeline.save)")
        try:
            config = TextConfig(**read_json(config_path))
        except (json.JSONDecodeError, TypeError) as error:
            raise InputError(f"{config_path}: not a valid text pipeline config ({error})") from None
        if config.joint:
            src_vocab = tgt_vocab = SubwordVocab.load(out_dir / "joint.model")
        else:
            src_vocab, tgt_vocab = SubwordVocab.load(out_dir / "src.model"), SubwordVocab.load(out_dir / "tgt.model")
        return cls(config, src_vocab, tgt_vocab, threads=threads)
