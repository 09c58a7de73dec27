"""Caption synthesis (Huang et al. 2020, section 3): translate captions and keep where each one came from.

Synthesis runs passes ("hops") that alternate between the two directions of one language pair, starting
forward: hop 1 translates the pivot language's human captions into a target language, hop 2 translates hop
1's outputs back into the pivot (the paper's forward-then-backward MMT), hop 3 translates hop 2's outputs
forward again, and so on (:func:`hop_languages`). Every synthesized caption records ``origin`` (``mt`` or
``mmt``), the ``system`` that produced it, its ``hop`` and its ``parent_id`` (the caption it was translated
from), so later stages can select by provenance.

Work is cut into shards of source captions; each finished shard is one Parquet file written atomically into
a work folder named by a fingerprint of the inputs, so a killed run resumes with the finished shards.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from common.errors import InputError
from common.files import atomic_path
from common.text_input import normalize
from corpora.tables import CAPTIONS_SCHEMA

Origin = Literal["mt", "mmt"]
MAX_HOPS = 8  # each pass costs a full decoding of the captions; beyond a few, paraphrases only drift further
# translate(texts, image_ids) -> translations, one per text; image_ids let a multimodal system fetch regions
TranslateFn = Callable[[Sequence[str], Sequence[str]], list[str]]


@dataclass(frozen=True)
class SynthesisTask:
    """One translation pass: ``sources`` (caption rows) through ``system`` into ``tgt_lang``."""

    system: str  # e.g. "mmt-en-de": written to the `system` column and into caption ids
    origin: Origin
    tgt_lang: str
    hop: int
    weights_sha256: str  # of the system's weights: a retrained system never reuses old shards


def hop_languages(hop: int, pivot: str, target: str) -> tuple[str, str]:
    """(source, target) language of pass ``hop`` >= 1: odd hops go pivot -> target, even hops target -> pivot."""
    return (pivot, target) if hop % 2 else (target, pivot)


def select_sources(captions: pa.Table, *, lang: str, split: str, kinds: Sequence[str]) -> pa.Table:
    """Human captions of one language, split and kind(s), in table order."""
    mask = pc.and_(
        pc.and_(pc.equal(captions.column("lang"), lang), pc.equal(captions.column("split"), split)),
        pc.and_(pc.equal(captions.column("origin"), "human"), pc.is_in(captions.column("kind"), pa.array(kinds))),
    )
    return captions.filter(mask)


def to_pivot_sources(captions: pa.Table, *, target: str, split: str, kinds: Sequence[str], source: str) -> pa.Table:
    """The human ``target`` captions that a to-pivot pass translates (:func:`select_sources`).

    Raises:
        InputError: there are none (``source`` names the table), so the pass would add nothing.
    """
    sources = select_sources(captions, lang=target, split=split, kinds=kinds)
    if not sources.num_rows:
        raise InputError(
            f"{source}: no human {target} captions of kind {', '.join(kinds)} in the {split} split to translate "
            "into the pivot (synthesis.to_pivot)"
        )
    return sources


def to_pivot_mask(captions: pa.Table, pivot: str) -> pa.ChunkedArray:
    """True for the rows a to-pivot pass wrote: synthesized, hop 1, in the ``pivot`` language."""
    return pc.and_(pc.equal(captions.column("hop"), 1), pc.equal(captions.column("lang"), pivot))


def synthesized_id(parent_id: str, system: str) -> str:
    return f"{parent_id}>{system}"


@dataclass(frozen=True)
class SynthesisShard:
    """A slice of the source captions and the file its translations go to."""

    sources: pa.Table
    path: Path

    @property
    def done(self) -> bool:
        return self.path.is_file()


def plan_shards(sources: pa.Table, task: SynthesisTask, *, work: Path, shard_size: int) -> list[SynthesisShard]:
    """Cut ``sources`` into shards whose files live in a folder named by a fingerprint of the inputs."""
    folder = work / _fingerprint(sources, task, shard_size)
    folder.mkdir(parents=True, exist_ok=True)
    return [
        SynthesisShard(sources.slice(start, shard_size), folder / f"shard-{index:05d}.parquet")
        for index, start in enumerate(range(0, sources.num_rows, shard_size))
    ]


def run_shard(shard: SynthesisShard, task: SynthesisTask, translate: TranslateFn) -> None:
    """Translate one shard and write it atomically (nothing to do when a killed run already finished it)."""
    if shard.done:
        return
    table = _translate_shard(shard.sources, task, translate)
    with atomic_path(shard.path) as tmp:
        pq.write_table(table, tmp)


def collect(shards: Sequence[SynthesisShard]) -> pa.Table:
    """The synthesized captions of finished shards, in source order (CAPTIONS_SCHEMA)."""
    missing = [shard.path.name for shard in shards if not shard.done]
    if missing:
        raise RuntimeError(f"synthesis shards not finished: {missing[:5]}")
    # Rows are built against CAPTIONS_SCHEMA; parents and images are checked when a variant is assembled.
    return (
        pa.concat_tables([pq.read_table(shard.path) for shard in shards]) if shards else CAPTIONS_SCHEMA.empty_table()
    )


def synthesize(
    sources: pa.Table,
    task: SynthesisTask,
    translate: TranslateFn,
    *,
    work: Path,
    shard_size: int,
    progress: Callable[[int, int], None] | None = None,
) -> pa.Table:
    """Translate every row of ``sources`` shard by shard in this process; finished shards are reused."""
    shards = plan_shards(sources, task, work=work, shard_size=shard_size)
    for index, shard in enumerate(shards, start=1):
        run_shard(shard, task, translate)
        if progress is not None:
            progress(index, len(shards))
    return collect(shards)


def _translate_shard(shard: pa.Table, task: SynthesisTask, translate: TranslateFn) -> pa.Table:
    texts = translate(shard.column("text").to_pylist(), shard.column("image_id").to_pylist())
    if len(texts) != shard.num_rows:
        raise RuntimeError(f"{task.system} returned {len(texts)} translations for {shard.num_rows} captions")
    parents = shard.column("caption_id").to_pylist()
    count = shard.num_rows
    # Stored text is NFC without control characters (corpora.tables), model output too. An empty translation (a
    # model that emitted only EOS) would break the tables: keep a visible marker.
    texts = [
        normalize(text, f"{task.system} translation of {parent}", remove=True)
        for text, parent in zip(texts, parents, strict=True)
    ]
    texts = [text if text.strip() else "<empty>" for text in texts]
    return pa.table(
        {
            "caption_id": [synthesized_id(parent, task.system) for parent in parents],
            "image_id": shard.column("image_id"),
            "split": shard.column("split"),
            "lang": [task.tgt_lang] * count,
            "text": texts,
            "origin": [task.origin] * count,
            "system": [task.system] * count,
            "hop": pa.array([task.hop] * count, pa.int32()),
            "parent_id": parents,
            "kind": shard.column("kind"),
        },
        schema=CAPTIONS_SCHEMA,
    )


def _fingerprint(sources: pa.Table, task: SynthesisTask, shard_size: int) -> str:
    digest = hashlib.sha256(
        json.dumps([task.system, task.origin, task.tgt_lang, task.hop, task.weights_sha256, shard_size]).encode()
    )
    for caption_id, text in zip(
        sources.column("caption_id").to_pylist(), sources.column("text").to_pylist(), strict=True
    ):
        digest.update(f"{caption_id}\t{text}\n".encode())
    return digest.hexdigest()[:16]
