"""Training pairs held compactly: every sentence's subword ids in one flat array per side, with offsets.

A million pairs of Python tuples of ints take gigabytes; the same ids as uint16 (a vocabulary up to 65,536
ids; int32 above) take a few hundred megabytes. :class:`EncodedPairs` is a ``Sequence[Example]``: training
(:func:`mmt.train.fit`) builds each :class:`~mmt.train.Example` when its batch needs it, and plans batches on
the length arrays alone.
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import SupportsIndex, overload

import numpy as np

from common.errors import InputError
from common.files import atomic_dir
from mmt.text import TextPipeline
from mmt.text_workers import SideSpec, encode_pair_chunks
from mmt.train import Example

logger = logging.getLogger(__name__)


class EncodedPairs(Sequence[Example]):
    """Encoded sentence pairs (source ids, target ids ending in EOS, optional image rows) in flat arrays.

    Args:
        src_ids: Every source sentence's ids, one sentence after the other.
        src_lengths: Ids per source sentence.
        tgt_ids: Every target sentence's ids (EOS included).
        tgt_lengths: Ids per target sentence.
        image_rows: Each pair's image row in the region store; None for text-only data.
    """

    def __init__(
        self,
        src_ids: np.ndarray,
        src_lengths: np.ndarray,
        tgt_ids: np.ndarray,
        tgt_lengths: np.ndarray,
        image_rows: np.ndarray | None = None,
    ) -> None:
        count = len(src_lengths)
        if len(tgt_lengths) != count or (image_rows is not None and len(image_rows) != count):
            rows = "" if image_rows is None else f", {len(image_rows)} image rows"
            raise ValueError(f"encoded pairs: {count} source and {len(tgt_lengths)} target lengths{rows}")
        if int(src_lengths.sum()) != len(src_ids) or int(tgt_lengths.sum()) != len(tgt_ids):
            raise ValueError("encoded pairs: the lengths do not add up to the ids")
        self.src_ids, self.tgt_ids, self.image_rows = src_ids, tgt_ids, image_rows
        self.src_lengths = src_lengths.astype(np.int32, copy=False)
        self.tgt_lengths = tgt_lengths.astype(np.int32, copy=False)
        self._src_starts = _starts(self.src_lengths)
        self._tgt_starts = _starts(self.tgt_lengths)

    def lengths(self) -> tuple[np.ndarray, np.ndarray]:
        """Source and target ids per pair (:func:`mmt.train.length_batches` plans batches on them)."""
        return self.src_lengths, self.tgt_lengths

    @property
    def nbytes(self) -> int:
        """Bytes held by the arrays."""
        arrays = [self.src_ids, self.tgt_ids, self.src_lengths, self.tgt_lengths, self._src_starts, self._tgt_starts]
        return sum(array.nbytes for array in arrays) + (0 if self.image_rows is None else self.image_rows.nbytes)

    def __len__(self) -> int:
        return len(self.src_lengths)

    @overload
    def __getitem__(self, index: SupportsIndex) -> Example: ...

    @overload
    def __getitem__(self, index: slice) -> list[Example]: ...

    def __getitem__(self, index: SupportsIndex | slice) -> Example | list[Example]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        i = operator.index(index)
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(f"pair {index} of {len(self)}")
        src_start, tgt_start = int(self._src_starts[i]), int(self._tgt_starts[i])
        src = self.src_ids[src_start : src_start + int(self.src_lengths[i])].tolist()
        tgt = self.tgt_ids[tgt_start : tgt_start + int(self.tgt_lengths[i])].tolist()
        return Example(tuple(src), tuple(tgt), None if self.image_rows is None else int(self.image_rows[i]))

    def __iter__(self) -> Iterator[Example]:
        return (self[i] for i in range(len(self)))


ARRAYS = ("src_ids", "src_lengths", "tgt_ids", "tgt_lengths")  # each <name>.npy in an encoded folder
IMAGE_ROWS = "image_rows"  # <name>.npy too, when the pairs have images


def write_encoded(encoded: EncodedPairs, folder: Path) -> None:
    """Write ``encoded`` as one ``.npy`` file per array into ``folder``, which appears whole or not at all."""
    arrays = dict(
        zip(ARRAYS, (encoded.src_ids, encoded.src_lengths, encoded.tgt_ids, encoded.tgt_lengths), strict=True)
    )
    if encoded.image_rows is not None:
        arrays[IMAGE_ROWS] = encoded.image_rows
    with atomic_dir(folder) as tmp:
        for name, array in arrays.items():
            np.save(tmp / f"{name}.npy", np.ascontiguousarray(array))


def open_encoded(folder: Path) -> EncodedPairs:
    """The pairs :func:`write_encoded` wrote in ``folder``, memory-mapped read-only: the ids stay on disk (in the page
    cache, shared by every process that opens them) and only the batches being built are read.

    Raises:
        InputError: a missing or unreadable array, named.
    """
    names = [*ARRAYS, IMAGE_ROWS] if (folder / f"{IMAGE_ROWS}.npy").is_file() else list(ARRAYS)
    arrays: list[np.ndarray] = []
    for name in names:
        path = folder / f"{name}.npy"
        try:
            arrays.append(np.load(path, mmap_mode="r"))
        except (OSError, ValueError) as error:
            raise InputError(f"{path}: not an encoded array ({error})") from None
    try:
        return EncodedPairs(*arrays)
    except ValueError as error:
        raise InputError(f"{folder}: {error}") from None


def id_dtype(vocab_size: int) -> type[np.unsignedinteger] | type[np.signedinteger]:
    """The smallest array type of ids below ``vocab_size``: uint16 up to 65,536 ids, else int32."""
    return np.uint16 if vocab_size <= 1 << 16 else np.int32


def encode_pairs(
    text: TextPipeline,
    chunks: Iterable[tuple[Sequence[str], Sequence[str]]],
    *,
    threads: int = 1,
    image_rows: np.ndarray | None = None,
) -> EncodedPairs:
    """Encode sentence pairs, given in chunks (e.g. one per Parquet row group), into :class:`EncodedPairs`.

    Each pair's ids are those of ``text.encode_source`` and ``text.encode_target``; chunks go to ``threads``
    processes and come back in order, so the result does not depend on ``threads``. Truncated sentences are
    counted and logged as a warning.

    Raises:
        InputError: a sentence without any subword, named by its side and index over all chunks.
    """
    parts: list[tuple[np.ndarray, ...]] = list(_encoded_chunks(text, chunks, threads=threads))
    dtypes = (id_dtype(text.src_vocab.size), np.int32, id_dtype(text.tgt_vocab.size), np.int32)
    arrays = [
        np.concatenate([part[index] for part in parts]) if parts else np.zeros(0, dtype=dtype)
        for index, dtype in enumerate(dtypes)
    ]
    src_ids, src_lengths, tgt_ids, tgt_lengths = arrays
    if image_rows is not None and len(image_rows) != len(src_lengths):
        raise ValueError(f"{len(image_rows)} image rows for {len(src_lengths)} sentence pairs")
    return EncodedPairs(src_ids, src_lengths, tgt_ids, tgt_lengths, image_rows)


def encode_pairs_into(
    text: TextPipeline, chunks: Iterable[tuple[Sequence[str], Sequence[str]]], folder: Path, *, threads: int = 1
) -> None:
    """:func:`encode_pairs` of text-only pairs written into ``folder`` as :func:`write_encoded` writes them, each chunk
    as it comes: the encoding process holds a few chunks, not the corpus's ids (the folder appears whole)."""
    dtypes = (id_dtype(text.src_vocab.size), np.int32, id_dtype(text.tgt_vocab.size), np.int32)
    with atomic_dir(folder) as tmp:
        raw = [tmp / f"{name}.raw" for name in ARRAYS]
        sizes = [0] * len(ARRAYS)
        files = [path.open("wb") for path in raw]
        try:
            for part in _encoded_chunks(text, chunks, threads=threads):
                for index, array in enumerate(part):
                    files[index].write(array.astype(dtypes[index], copy=False).tobytes())
                    sizes[index] += len(array)
        finally:
            for file in files:
                file.close()
        for name, path, size, dtype in zip(ARRAYS, raw, sizes, dtypes, strict=True):
            stored = np.lib.format.open_memmap(tmp / f"{name}.npy", mode="w+", dtype=dtype, shape=(size,))
            if size:  # through the page cache, a block at a time
                stored[:] = np.memmap(path, dtype=dtype, mode="r", shape=(size,))
            stored.flush()
            del stored
            path.unlink()


def _encoded_chunks(
    text: TextPipeline, chunks: Iterable[tuple[Sequence[str], Sequence[str]]], *, threads: int
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """(source ids, source lengths, target ids, target lengths) of each chunk in order, the ids narrowed to
    :func:`id_dtype`; a sentence without any subword raises, truncated sentences are logged once at the end."""
    specs = (_spec(text, side="source"), _spec(text, side="target"))
    dtypes = (id_dtype(text.src_vocab.size), id_dtype(text.tgt_vocab.size))
    offset = truncated_src = truncated_tgt = 0
    for encoded in encode_pair_chunks(chunks, specs, threads=threads):
        for chunk, spec in zip(encoded, specs, strict=True):
            if chunk.empty >= 0:
                index = offset + chunk.empty
                raise InputError(f"{spec.side} sentence {index}: empty (every sentence must hold some text)")
        source, target = encoded
        yield source.ids.astype(dtypes[0]), source.lengths, target.ids.astype(dtypes[1]), target.lengths
        truncated_src, truncated_tgt = truncated_src + source.truncated, truncated_tgt + target.truncated
        offset += len(source.lengths)
    if truncated_src or truncated_tgt:
        logger.warning(
            "Truncated %d source and %d target sentences to %d subwords",
            truncated_src,
            truncated_tgt,
            text.config.max_len,
        )


def _spec(text: TextPipeline, *, side: str) -> SideSpec:
    config = text.config
    if side == "source":
        return SideSpec(config.src_lang, config.lowercase, text.src_vocab.serialized, config.max_len, False, side)
    return SideSpec(config.tgt_lang, config.lowercase, text.tgt_vocab.serialized, config.max_len - 1, True, side)


def _starts(lengths: np.ndarray) -> np.ndarray:
    starts = np.zeros(len(lengths), dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    return starts
