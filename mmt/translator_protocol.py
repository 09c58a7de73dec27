"""The text-only translator interface shared by every MT backend (Marian, the regional MMT's text mode)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable


@runtime_checkable
class Translator(Protocol):
    """Translates detokenised sentences into detokenised sentences.

    Attributes:
        name: Identifier of the system, recorded as ``system`` next to the captions it produced.
    """

    name: str

    def translate(
        self, sentences: Sequence[str], *, beam: int = 5, batch_size: int = 32, max_len: int = 100
    ) -> list[str]:
        """Translate ``sentences`` with beam search; one output per input, in input order.

        Args:
            sentences: Source sentences, detokenised.
            beam: Beam width (1 is greedy search).
            batch_size: Sentences per forward pass.
            max_len: Most subwords generated per sentence.
        """
        ...
