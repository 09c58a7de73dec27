"""What every grammar shares: the ``Grammar`` record and sentence-level spelling helpers."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from corpora.synthetic.meaning import Meaning


@dataclass(frozen=True)
class Grammar:
    """One language: its ISO 639-1 code, its English name and its realiser (meaning -> sentence)."""

    code: str
    name: str
    realise: Callable[[Meaning], str]


def sentence(text: str) -> str:
    """Capitalise the first letter (only that one: nouns and accents stay as written) and end with a period."""
    text = " ".join(text.split())
    return text[:1].upper() + text[1:] + "."


def enumerate_phrases(phrases: Sequence[str], conjunction: str) -> str:
    """Join as "a, b and c": commas between the items, the conjunction before the last (no serial comma)."""
    if len(phrases) == 1:
        return phrases[0]
    return ", ".join(phrases[:-1]) + f" {conjunction} " + phrases[-1]
