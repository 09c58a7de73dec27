"""The grammars, one module per language; adding a language is one module plus one row of ``GRAMMARS``."""

from __future__ import annotations

from corpora.synthetic.grammars import cs, de, en, fr
from corpora.synthetic.grammars.common import Grammar

GRAMMARS: dict[str, Grammar] = {
    "en": en.GRAMMAR,
    "de": de.GRAMMAR,
    "fr": fr.GRAMMAR,
    "cs": cs.GRAMMAR,
}

__all__ = ["GRAMMARS", "Grammar"]
