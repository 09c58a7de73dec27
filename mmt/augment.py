"""The augmented caption variants of the paper's tables, and the lexical diversity they add (section 4.3).

Variants (generalised to every target language):
- ``none``: the prepared (human) captions;
- ``mt_f`` / ``mmt_f``: plus forward translations of the pivot's captions into each target (hop 1);
- ``mt_fb`` / ``mmt_fb``: plus, in addition, those translated back into the pivot (hop 2).
``mt_*`` use the text-only system, ``mmt_*`` the multimodal one. Rows keep their provenance columns, so a
retrieval model can still choose, e.g., the paper's monolingual "f+b" setting (pivot captions only).
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
from sacremoses import MosesTokenizer

from corpora.tables import validate_captions

VARIANTS: dict[str, tuple[str | None, tuple[int, ...]]] = {
    "none": (None, ()),
    "mt_f": ("mt", (1,)),
    "mt_fb": ("mt", (1, 2)),
    "mmt_f": ("mmt", (1,)),
    "mmt_fb": ("mmt", (1, 2)),
}


def build_variant(prepared: pa.Table, synthesized: pa.Table, variant: str) -> pa.Table:
    """The prepared captions plus the synthesized rows that ``variant`` takes (validated)."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; known: {', '.join(VARIANTS)}")
    origin, hops = VARIANTS[variant]
    if origin is None:
        return prepared
    chosen = pc.and_(
        pc.equal(synthesized.column("origin"), origin), pc.is_in(synthesized.column("hop"), pa.array(hops, pa.int32()))
    )
    table = pa.concat_tables([prepared, synthesized.filter(chosen)])
    validate_captions(table, source=f"variant {variant}")
    return table


def token_types(captions: pa.Table, *, split: str = "train") -> dict[str, int]:
    """Distinct lowercased Moses tokens per language among the captions of ``split``."""
    rows = captions.filter(pc.equal(captions.column("split"), split))
    counts: dict[str, int] = {}
    for lang in sorted(pc.unique(rows.column("lang")).to_pylist()):
        texts = rows.filter(pc.equal(rows.column("lang"), lang)).column("text").to_pylist()
        counts[lang] = len(_vocabulary(texts, lang))
    return counts


def _vocabulary(texts: Sequence[str], lang: str) -> set[str]:
    tokenizer = MosesTokenizer(lang=lang)
    words: set[str] = set()
    for text in texts:
        words.update(tokenizer.tokenize(text.lower(), escape=False))
    return words
