"""The sentence pairs one translation direction trains and tests on, taken from the prepared tables.

Pre-training reads the text-only parallel corpus of the pivot-target pair (WMT-style); fine-tuning and
testing read the translation captions (Multi30K task 1 style) of the same images in both languages.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from common.distributed import barrier, is_writer
from common.errors import InputError
from corpora.prepared import Corpus
from corpora.tables import SPLITS
from features.store import FeatureStore
from mmt.encoded import EncodedPairs, encode_pairs, encode_pairs_into, open_encoded
from mmt.text import TextPipeline
from mmt.text_workers import CHUNK_SENTENCES


@dataclass(frozen=True)
class Pairs:
    """Aligned sentences of one split (with the image of each pair for caption data).

    Attributes:
        src: Source sentences.
        tgt: Target sentences.
        image_ids: The image of each pair (caption data), else None.
        tgt_words: The words of each target that its image decides (empty for none), where the corpus records them
            (:attr:`Corpus.image_dependent`); None where it does not.
    """

    src: list[str]
    tgt: list[str]
    image_ids: list[str] | None = None
    tgt_words: list[list[str]] | None = None


@dataclass(frozen=True)
class ParallelText:
    """One split of a direction's text-only corpus, read a chunk at a time: never held as Python strings, since a
    WMT-size training split is millions of sentences.

    Attributes:
        source: The prepared parallel table's Parquet file (what the stage reads), or the table itself (built in
            memory: a small corpus, tests).
        split: The split's name.
        columns: The table's columns that are the direction's source and target: ``("src", "tgt")`` for
            pivot->target, ``("tgt", "src")`` the other way.
    """

    source: str | pa.Table
    split: str
    columns: tuple[str, str] = ("src", "tgt")

    def chunks(self, size: int = CHUNK_SENTENCES) -> Iterator[tuple[list[str], list[str]]]:
        """(source, target) sentences of the split in table order, at most ``size`` pairs a chunk."""
        for batch in self._batches(size, ["split", *self.columns]):
            rows = batch.filter(pc.equal(batch.column("split"), self.split))
            if rows.num_rows:
                yield rows.column(self.columns[0]).to_pylist(), rows.column(self.columns[1]).to_pylist()

    def side(self, index: int) -> Iterator[str]:
        """The source (``index`` 0) or target (1) sentences of the split, one at a time."""
        for batch in self._batches(CHUNK_SENTENCES, ["split", self.columns[index]]):
            rows = batch.filter(pc.equal(batch.column("split"), self.split))
            yield from rows.column(self.columns[index]).to_pylist()

    def count(self) -> int:
        """Pairs in the split (reads the split column alone)."""
        batches = self._batches(1 << 16, ["split"])
        return sum(int(pc.sum(pc.equal(batch.column("split"), self.split)).as_py() or 0) for batch in batches)

    def pairs(self) -> Pairs:
        """The whole split as lists of strings: for the small splits (validation, test) only."""
        src: list[str] = []
        tgt: list[str] = []
        for chunk_src, chunk_tgt in self.chunks():
            src += chunk_src
            tgt += chunk_tgt
        return Pairs(src, tgt)

    def _batches(self, size: int, columns: list[str]) -> Iterator[pa.RecordBatch]:
        if isinstance(self.source, pa.Table):
            yield from self.source.select(columns).to_batches(max_chunksize=size)
        else:
            yield from pq.ParquetFile(self.source).iter_batches(batch_size=size, columns=columns)


@dataclass(frozen=True)
class ContrastiveItem:
    """An ambiguous source sentence, two images, and the right translation with each (a row of
    :attr:`Corpus.contrastive`)."""

    source: str
    image_a: str
    image_b: str
    translation_a: str
    translation_b: str


@dataclass(frozen=True)
class DirectionData:
    corpus: dict[str, ParallelText]  # split -> text-only parallel corpus (pre-training), read a chunk at a time
    captions: dict[str, Pairs]  # split -> translation captions of the same images (fine-tuning, test)
    contrastive: list[ContrastiveItem] | None = None  # the direction's items; None: the corpus has none at all


def direction_data(
    corpus: Corpus, *, pivot: str, target: str, src: str, tgt: str, parallel_file: str | None = None
) -> DirectionData:
    """The parallel corpus of the pivot-target pair and the translation captions, oriented src -> tgt.

    The parallel corpus is read from ``parallel_file`` (the pair's prepared table, checked by the caller) when it is
    given, else from the table in ``corpus.parallel``; either way a chunk at a time (:class:`ParallelText`).

    Raises:
        InputError: the prepared tables have no parallel corpus for the pair.
    """
    name = f"{pivot}-{target}"
    if parallel_file is None and name not in corpus.parallel:
        raise InputError(f"prepared tables: no parallel corpus {name}.parquet (check paths.parallel)")
    source = parallel_file if parallel_file is not None else corpus.parallel[name]
    columns = ("src", "tgt") if src == pivot else ("tgt", "src")
    text = {split: ParallelText(source, split, columns) for split in SPLITS}
    captions = {split: caption_pairs(corpus.captions, src, tgt, split, corpus.image_dependent) for split in SPLITS}
    contrastive = None if corpus.contrastive is None else contrastive_items(corpus.contrastive, src, tgt)
    return DirectionData(text, captions, contrastive)


CORPUS_USE = {"train": "pre-training learns from it", "val": "pre-training selects its epoch by it"}
CAPTION_USE = {
    "train": "fine-tuning learns from it",
    "val": "fine-tuning selects its epoch by it",
    "test": "the systems are tested on it",
}


def require_splits(data: DirectionData, *, direction: str, parallel: str, captions: str) -> None:
    """Every split the direction's training and test read holds pairs: an empty one would train on nothing, select
    the epoch by a BLEU of no sentences or report a test score of none. ``parallel`` and ``captions`` name the
    tables the pairs came from.

    Raises:
        InputError: the first empty split, the table it comes from and what needs it.
    """
    for split, use in CORPUS_USE.items():
        if not data.corpus[split].count():
            raise InputError(f"{parallel}: the {split} split is empty, but {use} ({direction})")
    for split, use in CAPTION_USE.items():
        if not data.captions[split].src:
            raise InputError(
                f"{captions}: no {direction} translation pairs in the {split} split, but {use} (each needs an image "
                "with a translation caption in both languages)"
            )


def caption_pairs(captions: pa.Table, src: str, tgt: str, split: str, image_dependent: pa.Table | None = None) -> Pairs:
    """Translation captions (Multi30K task1 style) of ``split`` in both languages, joined on the image, with the
    image-dependent words of each target caption when ``image_dependent`` (:attr:`Corpus.image_dependent`) is given."""
    kind = captions.filter(
        pc.and_(pc.equal(captions.column("kind"), "translation"), pc.equal(captions.column("split"), split))
    )
    by_lang = {}
    for lang in (src, tgt):
        rows = kind.filter(pc.equal(kind.column("lang"), lang))
        by_lang[lang] = dict(zip(rows.column("image_id").to_pylist(), rows.column("text").to_pylist(), strict=True))
    images = [image_id for image_id in by_lang[src] if image_id in by_lang[tgt]]
    words = None
    if image_dependent is not None:
        rows = image_dependent.filter(
            pc.and_(pc.equal(image_dependent.column("split"), split), pc.equal(image_dependent.column("lang"), tgt))
        )
        recorded = dict(zip(rows.column("image_id").to_pylist(), rows.column("words").to_pylist(), strict=True))
        words = [recorded.get(image_id, []) for image_id in images]
    return Pairs([by_lang[src][i] for i in images], [by_lang[tgt][i] for i in images], images, words)


def contrastive_items(table: pa.Table, src: str, tgt: str) -> list[ContrastiveItem]:
    """The items of :attr:`Corpus.contrastive` that translate ``src`` into ``tgt``, in table order."""
    rows = table.filter(pc.and_(pc.equal(table.column("src_lang"), src), pc.equal(table.column("tgt_lang"), tgt)))
    return [
        ContrastiveItem(row["source"], row["image_a"], row["image_b"], row["translation_a"], row["translation_b"])
        for row in rows.to_pylist()
    ]


def examples(text: TextPipeline, pairs: Pairs | ParallelText, store: FeatureStore | None) -> EncodedPairs:
    """Training examples of ``pairs``: subword ids (encoded in chunks over ``text.threads`` processes, held in flat
    arrays), and the image's row in ``store`` when one is given (caption pairs)."""
    if isinstance(pairs, ParallelText):
        return encode_pairs(text, pairs.chunks(), threads=text.threads)
    rows = None
    if store is not None and pairs.image_ids is not None:
        rows = np.asarray(store.rows(pairs.image_ids), dtype=np.int64)
    size = CHUNK_SENTENCES
    chunks = (
        (pairs.src[start : start + size], pairs.tgt[start : start + size]) for start in range(0, len(pairs.src), size)
    )
    return encode_pairs(text, chunks, threads=text.threads, image_rows=rows)


def stored_examples(text: TextPipeline, pairs: ParallelText, folder: Path) -> EncodedPairs:
    """The training examples of a text-only corpus, encoded into ``folder`` once, a chunk at a time
    (:func:`mmt.encoded.encode_pairs_into`), and memory-mapped from there: a fit holds a few batches of them, not the
    corpus. ``folder`` names what the ids depend on (the caller's choice: the subword models and the pairs), so a
    later fit with the same ones (the systems' fine-tuning, which mixes corpus pairs in) reuses it. Under torchrun
    rank 0 encodes and every rank maps the same files."""
    if is_writer() and not folder.is_dir():
        encode_pairs_into(text, pairs.chunks(), folder, threads=text.threads)
    barrier()
    return open_encoded(folder)
