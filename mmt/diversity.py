"""How much new wording synthesized captions bring (Huang et al. 2020, section 4.3).

The paper's gain comes from lexical diversity: forward then backward MMT raised the English token types from
8,830 to 9,128. :func:`lexical_diversity` counts distinct tokens and distinct bigrams per language;
:func:`changed_share` says how often a round trip (hop 2, 4, ...) rewrote the caption it started from rather
than returning it word for word. Texts are compared as lowercased Moses tokens, so case and spacing alone are
not a change.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

import pyarrow as pa
import pyarrow.compute as pc
from sacremoses import MosesTokenizer


def lexical_diversity(captions: pa.Table, *, split: str = "train") -> dict[str, dict[str, int]]:
    """Per language among the captions of ``split``: ``token_types`` (distinct tokens) and ``bigrams``
    (distinct pairs of adjacent tokens within a caption)."""
    rows = captions.filter(pc.equal(captions.column("split"), split))
    counts: dict[str, dict[str, int]] = {}
    for lang in sorted(pc.unique(rows.column("lang")).to_pylist()):
        texts = rows.filter(pc.equal(rows.column("lang"), lang)).column("text").to_pylist()
        types: set[str] = set()
        bigrams: set[tuple[str, str]] = set()
        for words in tokenized(texts, lang):
            types.update(words)
            bigrams.update(pairwise(words))
        counts[lang] = {"token_types": len(types), "bigrams": len(bigrams)}
    return counts


def changed_share(sources: Sequence[str], results: Sequence[str], lang: str) -> float:
    """The share of ``results[i]`` whose tokens differ from those of ``sources[i]`` (both in ``lang``)."""
    if len(sources) != len(results):
        raise ValueError(f"{len(sources)} sources but {len(results)} results")
    return _changed(tokenized(sources, lang), tokenized(results, lang))


def _changed(before: Sequence[list[str]], after: Sequence[list[str]]) -> float:
    """The share of token lists that differ pairwise (0 for none)."""
    return sum(old != new for old, new in zip(before, after, strict=True)) / len(before) if before else 0.0


def tokenized(texts: Sequence[str], lang: str) -> list[list[str]]:
    """Lowercased Moses tokens of each text."""
    tokenizer = MosesTokenizer(lang=lang)
    return [tokenizer.tokenize(text.lower(), escape=False) for text in texts]


def round_trip_changes(sources: pa.Table, hops: Sequence[pa.Table]) -> dict[str, dict[str, float | int]]:
    """For every hop from 2 on (``hops[0]`` is hop 1): how many captions it has (``captions``), the share that differ
    from the caption two hops up their ``parent_id`` chain, in the same language (``changed``; for hop 2: the human
    source), its distinct tokens (``token_types``) and how many of them no caption two hops up has (``new_types``:
    for hop 2, the words the round trip brought that the human captions it started from never use)."""
    text_of: dict[str, str] = {}
    parent_of: dict[str, str] = {}
    for table in (sources, *hops):
        text_of.update(zip(table.column("caption_id").to_pylist(), table.column("text").to_pylist(), strict=True))
        parent_of.update(
            zip(table.column("caption_id").to_pylist(), table.column("parent_id").to_pylist(), strict=True)
        )
    changes: dict[str, dict[str, float | int]] = {}
    for hop, table in enumerate(hops, start=1):
        if hop < 2 or table.num_rows == 0:
            continue
        ids, langs = table.column("caption_id").to_pylist(), set(table.column("lang").to_pylist())
        if len(langs) != 1:
            raise ValueError(f"hop {hop}: captions in several languages {sorted(langs)}")
        lang = langs.pop()
        before = tokenized([text_of[parent_of[parent_of[caption_id]]] for caption_id in ids], lang)
        after = tokenized(table.column("text").to_pylist(), lang)
        types, known = set().union(*after), set().union(*before)
        changes[f"hop{hop}"] = {
            "captions": len(ids),
            "changed": _changed(before, after),
            "token_types": len(types),
            "new_types": len(types - known),
        }
    return changes
