"""The translator interface shared by every MT backend (the regional MMT with or without regions, Marian)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable


@runtime_checkable
class Translator(Protocol):
    """Translates detokenised sentences (and, for a multimodal system, their images) into detokenised sentences.

    Attributes:
        name: Identifier of the system, recorded as ``system`` next to the captions it produced.
    """

    name: str

    def translate(
        self,
        sentences: Sequence[str],
        image_ids: Sequence[str] | None = None,
        *,
        beam: int = 5,
        batch_size: int = 32,
        max_len: int = 100,
    ) -> list[str]:
        """Translate ``sentences`` with beam search; one output per input, in input order.

        Args:
            sentences: Source sentences, detokenised.
            image_ids: The image of each sentence; a multimodal system needs them, a text-only one ignores them.
            beam: Beam width (1 is greedy search).
            batch_size: Sentences per forward pass.
            max_len: Most subwords generated per sentence.
        """
        ...
