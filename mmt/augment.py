"""The augmented caption variants of the paper's tables, and the lexical diversity they add (section 4.3).

A variant is the prepared (human) captions plus the synthesized captions of one system (``mt``: text-only,
``mmt``: multimodal) from some of the synthesis passes ("hops"). Passes alternate, starting forward: hop 1
translates the human pivot captions into a target language, hop 2 translates hop 1's outputs back into the
pivot, hop 3 those forward again, and so on (see :mod:`mmt.synthesis`). A :class:`Variant` names its system,
how many passes it follows and which of them it keeps.

Presets (:data:`VARIANTS`, generalised to every target language), as Huang et al. 2020 define them (section 4.2:
"MMT(f) models contain original English and MMT-translated German descriptions whereas MMT(f + b) models contain
English and MMT-translated English descriptions"): the k-pass variant is the human captions plus the captions of
the k-th pass alone.
- ``none``: the prepared captions alone;
- ``mt_f`` / ``mmt_f``: plus forward translations of the pivot's captions into each target (hop 1);
- ``mt_fb`` / ``mmt_fb``: plus those translated back into the pivot (hop 2 alone: pivot paraphrases);
- ``mt_fbf`` / ``mmt_fbf``: plus the paraphrases translated forward again (hop 3 alone, section 4.3's three-hop);
- ``mt_fbfb`` / ``mmt_fbfb``: plus those translated back again (hop 4 alone, the four-hop);
- ``mt_f_fb`` / ``mmt_f_fb``: plus hops 1 and 2 together, ``MT(f)+(f+b)``.
- ``mt_to_pivot`` / ``mmt_to_pivot``: plus each target's own human captions translated into the pivot (MULE,
  Kim et al. 2020, Table 4(b); made when ``synthesis.to_pivot`` is set).
Rows keep their provenance columns, so a retrieval model can still select among them by language and origin.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from common.checks import SettingError, check, check_range
from corpora.tables import validate_captions
from mmt.synthesis import MAX_HOPS, Origin, to_pivot_mask

_SYSTEM_LABELS: dict[Origin, str] = {"mt": "MT", "mmt": "MMT"}


@dataclass(frozen=True)
class Variant:
    """Which synthesized captions a caption variant adds to the human ones.

    Attributes:
        origin: The system whose translations are added (``mt`` or ``mmt``); null: none (human captions only).
        hops: The passes followed: 1 forward (f), 2 forward then back (f+b), 3 f+b+f, ...; 0 exactly when
            ``origin`` is null.
        keep: The hops whose captions are added, each 1..``hops``; empty: every hop.
        to_pivot: Also add the targets' human captions translated into the pivot (``synthesis.to_pivot``); with
            it, ``hops`` may be 0 (those translations alone).
    """

    origin: Origin | None = None
    hops: int = 0
    keep: tuple[int, ...] = ()
    to_pivot: bool = False

    def __post_init__(self) -> None:
        check(self.origin in (None, *_SYSTEM_LABELS), "origin", self.origin, "mt, mmt or null")
        check_range("hops", self.hops, 0, MAX_HOPS)
        if self.origin is None and (self.hops or self.to_pivot):
            asked = f"hops {self.hops} need" if self.hops else "to_pivot needs"
            raise SettingError("origin", f"missing: {asked} a system to translate with (mt or mmt)")
        if self.origin is not None and not self.hops and not self.to_pivot:
            raise SettingError("hops", f"got 0, allowed: 1 to {MAX_HOPS} with origin {self.origin}")
        for index, hop in enumerate(self.keep):
            allowed = f"a hop from 1 to {self.hops}" if self.hops else "none (this variant has no hops)"
            check(1 <= hop <= self.hops, f"keep[{index}]", hop, allowed)
        if len(set(self.keep)) != len(self.keep):
            raise SettingError("keep", f"got {list(self.keep)}: a hop is listed twice")

    def kept_hops(self) -> tuple[int, ...]:
        """The hops whose synthesized captions this variant takes, in increasing order."""
        return tuple(sorted(self.keep)) if self.keep else tuple(range(1, self.hops + 1))

    def display_name(self) -> str:
        """The paper's notation, one parenthesised pass sequence per kept hop: ``-``, ``MT(f)``, ``MMT(f+b)``,
        ``MMT(f+b+f)``, ``MMT(f)+(f+b)`` (hops 1 and 2). A kept hop's captions do not depend on later passes, so
        the passes followed beyond the last kept hop do not show. The targets' captions translated into the pivot
        read ``MMT(t→p)`` (``MMT(f)+(t→p)`` beside forward translations)."""
        if self.origin is None:
            return "-"
        passes = ["+".join("f" if hop % 2 else "b" for hop in range(1, kept + 1)) for kept in self.kept_hops()]
        if self.to_pivot:
            passes.append("t→p")
        return f"{_SYSTEM_LABELS[self.origin]}({')+('.join(passes)})"


VARIANTS: dict[str, Variant] = {
    "none": Variant(),
    "mt_f": Variant("mt", hops=1),
    "mt_fb": Variant("mt", hops=2, keep=(2,)),
    "mt_fbf": Variant("mt", hops=3, keep=(3,)),
    "mt_fbfb": Variant("mt", hops=4, keep=(4,)),
    "mt_f_fb": Variant("mt", hops=2),
    "mmt_f": Variant("mmt", hops=1),
    "mmt_fb": Variant("mmt", hops=2, keep=(2,)),
    "mmt_fbf": Variant("mmt", hops=3, keep=(3,)),
    "mmt_fbfb": Variant("mmt", hops=4, keep=(4,)),
    "mmt_f_fb": Variant("mmt", hops=2),
}

# Names of earlier presets that are gone -> what a params file that still uses one is told.
RETIRED: dict[str, str] = {
    f"{system}_b": f"{system}_b is retired: the back-translated pivot captions alone (hop 2) are now {system}_fb, "
    f"{label}(f+b) as the paper defines it; hops 1 and 2 together are {system}_f_fb"
    for system, label in _SYSTEM_LABELS.items()
}
# The targets' human captions translated into the pivot (MULE's Table 4(b)), alone.
VARIANTS |= {
    "mt_to_pivot": Variant("mt", to_pivot=True),
    "mmt_to_pivot": Variant("mmt", to_pivot=True),
}


def build_variant(prepared: pa.Table, synthesized: pa.Table, variant: Variant, *, pivot: str) -> pa.Table:
    """The prepared captions plus the synthesized rows of ``variant``'s origin and kept hops, and with
    ``to_pivot`` its translations of the targets' captions into ``pivot`` (validated).

    A captions table holds the parent of every caption. Where the variant drops a hop below a kept one (``mmt_fb``
    keeps hop 2 but not hop 1), a kept caption's ``parent_id`` is pointed at its nearest ancestor the variant
    holds (for ``mmt_fb``: the human caption); its ``caption_id`` still spells the whole chain of systems and its
    ``hop`` the passes it went through.
    """
    if variant.origin is None:
        return prepared
    from_origin = synthesized.filter(pc.equal(synthesized.column("origin"), variant.origin))
    to_pivot = to_pivot_mask(from_origin, pivot)
    chains = from_origin.filter(pc.invert(to_pivot))
    kept = variant.kept_hops()
    chosen = chains.filter(pc.is_in(chains.column("hop"), pa.array(kept, pa.int32())))
    if kept and kept != tuple(range(1, kept[-1] + 1)):  # a hop is dropped below a kept one
        chosen = _point_at_kept_ancestors(chosen, chains)
    added = [chosen, from_origin.filter(to_pivot)] if variant.to_pivot else [chosen]
    table = pa.concat_tables([prepared, *added])
    validate_captions(table, source=f"variant {variant.display_name()}")
    return table


def _point_at_kept_ancestors(chosen: pa.Table, lineage: pa.Table) -> pa.Table:
    """``chosen`` with each ``parent_id`` walked up ``lineage`` (synthesized rows: caption -> parent) until it is
    a caption of ``chosen`` or not a synthesized one (a human caption)."""
    ids, parent_ids = lineage.column("caption_id").to_pylist(), lineage.column("parent_id").to_pylist()
    parent_of = dict(zip(ids, parent_ids, strict=True))
    held = set(chosen.column("caption_id").to_pylist())
    parents = []
    for parent in chosen.column("parent_id").to_pylist():
        while parent not in held and parent in parent_of:
            parent = parent_of[parent]
        parents.append(parent)
    index = chosen.schema.get_field_index("parent_id")
    return chosen.set_column(index, chosen.schema.field(index), pa.array(parents, pa.string()))
