"""One line per epoch (or validation) of any training, in one format, for logs and progress artifacts:

    mmt-en-de finetune · epoch 3/12 · step 450 · loss 2.314 · val BLEU 41.27 (best 41.27) · 38.2 s/epoch
        · at most ~6 min left
    san-mmt_f-all seed 0 · epoch 2/5 · loss 0.412 · val rsum en 301.4 de 262.4 = 563.8 (best 563.8)
        · 12.1 s/epoch · ~36 s left

(each one line; wrapped here).

Epochs are counted from 1 in everything written for people. The time left is the mean epoch time so far times the
epochs still to run; with early stopping the training may end sooner, and the line says "at most".
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

SEPARATOR = " · "


@dataclass(frozen=True)
class EpochLine:
    """The figures of one epoch's (or one validation's) line.

    Attributes:
        run: What trains, with its phase (``mmt-en-de finetune``, ``san-mmt_f-all seed 0``).
        epoch: The epoch the validation ended or fell in, counted from 1.
        epochs: The epochs the schedule has.
        loss: Mean training loss since the previous line; None when no step computed it.
        score_name: What the scores are (``val BLEU``, ``val rsum``, ``val loss``); empty: no validation.
        scores: Validation score per language (``{"en": 301.4, "de": 262.4}``), or one score under the key ``""``.
        best: Best validation score so far (for several languages: of their sum, which selects the model).
        decimals: Decimals of the scores (BLEU 2, rsum 1, a loss 3).
        step: Optimiser steps so far, where the training counts them.
        seconds_per_epoch: Mean wall time of an epoch so far.
        seconds_left: Estimated time to the end of the schedule (:func:`seconds_left`).
        may_stop_early: Early stopping may end the training before ``epochs``.
    """

    run: str
    epoch: int
    epochs: int
    loss: float | None
    score_name: str = ""
    scores: Mapping[str, float] = field(default_factory=dict)
    best: float | None = None
    decimals: int = 2
    step: int | None = None
    seconds_per_epoch: float | None = None
    seconds_left: float | None = None
    may_stop_early: bool = False


def format_epoch(line: EpochLine) -> str:
    """The line of :class:`EpochLine`, its parts joined by `` · ``; parts without a figure are left out, and so is the
    time left after the last epoch."""
    parts = [line.run, f"epoch {line.epoch}/{line.epochs}"]
    if line.step is not None:
        parts.append(f"step {line.step}")
    parts.append("loss -" if line.loss is None else f"loss {line.loss:.3f}")
    if line.score_name and line.scores:
        parts.append(_scores(line))
    if line.seconds_per_epoch is not None:
        parts.append(f"{line.seconds_per_epoch:.1f} s/epoch")
    if line.seconds_left is not None and line.seconds_left > 0:
        parts.append(f"{'at most ' if line.may_stop_early else ''}~{format_duration(line.seconds_left)} left")
    return SEPARATOR.join(parts)


def _scores(line: EpochLine) -> str:
    digits = line.decimals
    if list(line.scores) == [""]:
        text = f"{line.score_name} {line.scores['']:.{digits}f}"
    else:
        text = f"{line.score_name} " + " ".join(f"{name} {value:.{digits}f}" for name, value in line.scores.items())
        if len(line.scores) > 1:
            text += f" = {sum(line.scores.values()):.{digits}f}"
    if line.best is not None:
        text += f" (best {line.best:.{digits}f})"
    return text


def seconds_left(elapsed: float, done: float, total: int) -> float:
    """Mean epoch time so far (``elapsed`` over the ``done`` epochs, a fraction when a validation falls inside an
    epoch) times the epochs left of ``total``; 0 when none is done yet or none is left."""
    if done <= 0 or done >= total:
        return 0.0
    return elapsed / done * (total - done)


def format_duration(seconds: float) -> str:
    """``45 s``, ``4 min`` (from a minute, rounded up), ``2 h 05 min`` (from an hour): an estimate, not a clock."""
    if seconds < 59.5:
        return f"{max(1, round(seconds))} s"
    minutes = math.ceil(seconds / 60)
    if minutes < 60:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60:02d} min"
