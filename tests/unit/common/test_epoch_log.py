"""The one-line epoch format every training logs, and its estimate of the time left."""

from __future__ import annotations

import pytest

from common.epoch_log import EpochLine, format_duration, format_epoch, seconds_left


def test_an_mmt_validation_line_names_phase_epoch_step_loss_bleu_and_the_time_left() -> None:
    left = seconds_left(elapsed=3 * 38.2, done=3, total=12)  # 9 epochs of 38.2 s: 343.8 s
    line = EpochLine(
        run="mmt-en-de finetune",
        epoch=3,
        epochs=12,
        loss=2.31449,
        score_name="val BLEU",
        scores={"": 41.2749},
        best=41.2749,
        step=450,
        seconds_per_epoch=38.2,
        seconds_left=left,
        may_stop_early=True,
    )
    assert format_epoch(line) == (
        "mmt-en-de finetune · epoch 3/12 · step 450 · loss 2.314 · val BLEU 41.27 (best 41.27) · 38.2 s/epoch"
        " · at most ~6 min left"
    )


def test_a_retrieval_line_gives_rsum_per_language_their_sum_and_the_best_sum() -> None:
    line = EpochLine(
        run="san-mmt_f-all seed 0",
        epoch=2,
        epochs=5,
        loss=0.41234,
        score_name="val rsum",
        scores={"en": 301.44, "de": 262.43},
        best=570.06,
        decimals=1,
        seconds_per_epoch=12.1,
        seconds_left=seconds_left(elapsed=24.2, done=2, total=5),
    )
    assert format_epoch(line) == (
        "san-mmt_f-all seed 0 · epoch 2/5 · loss 0.412 · val rsum en 301.4 de 262.4 = 563.9 (best 570.1)"
        " · 12.1 s/epoch · ~36 s left"
    )


def test_the_last_epoch_has_no_time_left_and_missing_figures_are_left_out() -> None:
    line = EpochLine(run="mt-en-de train", epoch=4, epochs=4, loss=None, seconds_per_epoch=2.0, seconds_left=0.0)
    assert format_epoch(line) == "mt-en-de train · epoch 4/4 · loss - · 2.0 s/epoch"
    one_language = EpochLine(
        run="san-none-en seed 1", epoch=1, epochs=3, loss=1.0, score_name="val rsum", scores={"en": 12.0}, decimals=1
    )
    assert format_epoch(one_language) == "san-none-en seed 1 · epoch 1/3 · loss 1.000 · val rsum en 12.0"


@pytest.mark.parametrize(
    ("elapsed", "done", "total", "left"),
    [
        (30.0, 3, 10, 70.0),  # 10 s an epoch, 7 to go
        (15.0, 1.5, 4, 25.0),  # a validation half-way through the second epoch
        (30.0, 10, 10, 0.0),  # done
        (0.0, 0, 10, 0.0),  # nothing to average yet
    ],
)
def test_the_time_left_is_the_mean_epoch_time_times_the_epochs_left(
    elapsed: float, done: float, total: int, left: float
) -> None:
    assert seconds_left(elapsed, done, total) == pytest.approx(left)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.2, "1 s"),
        (36.4, "36 s"),
        (59.4, "59 s"),
        (59.6, "1 min"),
        (61.0, "2 min"),
        (3540.0, "59 min"),
        (3541.0, "1 h 00 min"),
        (7501.0, "2 h 06 min"),
    ],
)
def test_durations_read_as_seconds_minutes_or_hours(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text
