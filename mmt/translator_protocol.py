"""The translator interface shared by every MT backend (the regional MMT with or without regions, Marian)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Protocol, runtime_checkable


@runtime_checkable
class Translator(Protocol):
    """Translates detokenised sentences (and, for a multimodal system, their images) into detokenised sentences, and
    scores given translations.

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
        stop: threading.Event | None = None,
    ) -> list[str]:
        """Translate ``sentences`` with beam search; one output per input, in input order.

        Args:
            sentences: Source sentences, detokenised.
            image_ids: The image of each sentence; a multimodal system needs them, a text-only one ignores them.
            beam: Beam width (1 is greedy search).
            batch_size: Sentences per forward pass.
            max_len: Most subwords generated per sentence.
            stop: Checked before each batch: once set, the translation is given up
                (:class:`common.stopping.Cancelled`).
        """
        ...

    def score(
        self,
        sources: Sequence[str],
        targets: Sequence[str],
        image_ids: Sequence[str] | None = None,
        *,
        batch_size: int = 32,
    ) -> list[float]:
        """Log-probability of each target given its source (and image): teacher-forced, the sum over the target's
        subwords, end of sentence included, of the log-softmax of the model's output over its whole vocabulary.

        Args:
            sources: Source sentences, detokenised.
            targets: One target sentence per source, detokenised.
            image_ids: The image of each pair; a multimodal system needs them, a text-only one ignores them.
            batch_size: Pairs per forward pass.

        Returns:
            One log-probability (<= 0) per pair, in input order.
        """
        ...
