"""Moses tokenisation and subword encoding of many sentences, in chunks, optionally over a process pool.

Moses tokenisation in Python is the slow step of the MMT's data path (a few thousand sentences a second per
core), so a WMT-size corpus is cut into chunks that worker processes handle; the results come back in input
order, and a chunk gives the same result in a worker as in this process, so the thread count never changes
what is computed. This module imports no torch: the workers are started fresh (spawn) and stay small.
"""

from __future__ import annotations

import functools
import itertools
import multiprocessing
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import sentencepiece as spm

from mmt.text import EOS_ID, UNK_ID, MosesText

CHUNK_SENTENCES = 5000  # sentences per task of a worker: large enough that sending them costs little

Chunk = TypeVar("Chunk")
Result = TypeVar("Result")


@dataclass(frozen=True)
class SideSpec:
    """How one side of a pair is encoded (what a worker needs besides the sentences).

    Attributes:
        lang: ISO 639-1 code of the side's language (Moses rules).
        lowercase: Lowercase before tokenising.
        model: The side's serialized sentencepiece model.
        limit: Most subwords kept per sentence, before the EOS (when ``eos``).
        eos: Append EOS (the target side).
        side: "source" or "target", for messages.
    """

    lang: str
    lowercase: bool
    model: bytes
    limit: int
    eos: bool
    side: str


@dataclass(frozen=True)
class EncodedChunk:
    """Subword ids of a chunk of sentences, flat.

    Attributes:
        ids: Every sentence's ids one after the other (int32).
        lengths: Ids per sentence (int32).
        truncated: Sentences cut to the limit.
        unknown: Ids that are ``UNK_ID``.
        empty: Index in the chunk of the first sentence without any subword, or -1.
    """

    ids: np.ndarray
    lengths: np.ndarray
    truncated: int
    unknown: int
    empty: int


def tokenise(texts: Sequence[str], *, lang: str, lowercase: bool, threads: int) -> list[str]:
    """Moses-preprocess ``texts`` (:meth:`MosesText.preprocess`) in input order, over ``threads`` processes when
    there is more than one chunk of them."""
    chunks = (list(texts[start : start + CHUNK_SENTENCES]) for start in range(0, len(texts), CHUNK_SENTENCES))
    worker = functools.partial(_tokenise_chunk, lang, lowercase)
    return [
        line
        for chunk in map_chunks(worker, chunks, threads=threads, many=len(texts) > CHUNK_SENTENCES)
        for line in chunk
    ]


def encode_pair_chunks(
    chunks: Iterable[tuple[Sequence[str], Sequence[str]]], specs: tuple[SideSpec, SideSpec], *, threads: int
) -> Iterator[tuple[EncodedChunk, EncodedChunk]]:
    """Encode each chunk of (source, target) sentences (:func:`encode_chunk` per side) in order, over ``threads``
    processes."""
    yield from map_chunks(functools.partial(_encode_pair_chunk, specs), chunks, threads=threads, many=True)


def encode_chunk(spec: SideSpec, sentences: Sequence[str]) -> EncodedChunk:
    """Moses, then subwords, of each sentence, as :meth:`mmt.text.TextPipeline.encode_source` (and
    ``encode_target`` when ``spec.eos``) do one by one; a blank sentence is reported by its index, not raised."""
    moses, processor = _side_tools(spec.lang, spec.lowercase, spec.model)
    tokenised = [moses.preprocess(sentence) if sentence.strip() else "" for sentence in sentences]
    # one call for the chunk, on one thread: the chunks are what runs in parallel
    encoded: list[list[int]] = processor.encode(tokenised, out_type=int, num_threads=1)
    rows: list[list[int]] = []
    truncated = unknown = 0
    empty = -1
    for index, ids in enumerate(encoded):
        if not ids:
            empty = index
            break
        if len(ids) > spec.limit:
            ids, truncated = ids[: spec.limit], truncated + 1
        unknown += ids.count(UNK_ID)
        rows.append([*ids, EOS_ID] if spec.eos else ids)
    lengths = np.fromiter((len(row) for row in rows), dtype=np.int32, count=len(rows))
    flat = np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int32, count=int(lengths.sum()))
    return EncodedChunk(flat, lengths, truncated, unknown, empty)


def map_chunks(
    worker: Callable[[Chunk], Result], chunks: Iterable[Chunk], *, threads: int, many: bool
) -> Iterator[Result]:
    """``worker`` over ``chunks`` in order: in this process with one thread or when not ``many`` chunks, else in
    ``threads`` fresh processes (spawned: forking a process that runs threads, as a Prefect flow does, can copy a
    held lock into the child)."""
    if threads == 1 or not many:
        yield from map(worker, chunks)
        return
    with ProcessPoolExecutor(max_workers=threads, mp_context=multiprocessing.get_context("spawn")) as pool:
        # a bounded window of chunks in flight keeps memory flat when the chunks are streamed
        pending: list[Future[Result]] = []
        for chunk in chunks:
            pending.append(pool.submit(worker, chunk))
            if len(pending) >= 2 * threads:
                yield pending.pop(0).result()
        for future in pending:
            yield future.result()


def _encode_pair_chunk(
    specs: tuple[SideSpec, SideSpec], chunk: tuple[Sequence[str], Sequence[str]]
) -> tuple[EncodedChunk, EncodedChunk]:
    return encode_chunk(specs[0], chunk[0]), encode_chunk(specs[1], chunk[1])


def _tokenise_chunk(lang: str, lowercase: bool, texts: list[str]) -> list[str]:
    moses = _moses(lang, lowercase)
    return [moses.preprocess(text) for text in texts]


@functools.lru_cache(maxsize=4)
def _moses(lang: str, lowercase: bool) -> MosesText:
    return MosesText(lang, lowercase)


@functools.lru_cache(maxsize=4)
def _side_tools(lang: str, lowercase: bool, model: bytes) -> tuple[MosesText, spm.SentencePieceProcessor]:
    return _moses(lang, lowercase), spm.SentencePieceProcessor(model_proto=model)
