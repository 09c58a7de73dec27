"""The Multi30K text bench's bookkeeping: a stopped run continued with more time keeps the stopped run's clock, and
the docs section shows the continuation beside the run."""

from __future__ import annotations

from typing import Any

from bench import multi30k_text

STOPPED = [
    {"epoch": 13, "loss": 3.275, "score": 31.59, "seconds": 5632.2},
    {"epoch": 14, "loss": 3.268, "score": 32.12, "seconds": 5951.7},
]


def validation(seconds: float, epoch: int, score: float) -> str:
    return (
        f"{seconds}\tmt-en-de finetune · epoch {epoch}/24 · step {epoch * 454} · loss 3.260 · val BLEU {score}"
        f" (best {score}) · 400.0 s/epoch · at most ~1 h left"
    )


def resumed(seconds: float, epoch: int) -> str:
    return f"{seconds}\tmt-en-de finetune: resuming after epoch {epoch} of 24 from states/finetune.state.safetensors"


def test_a_continuation_in_two_processes_continues_the_stopped_runs_clock() -> None:
    lines = [
        "8.7\tmmt-en-de pretrain · best val BLEU 0.04 at epoch 1 (step 157)",
        resumed(24.9, 14),
        validation(424.9, 15, 31.93),
        validation(824.9, 16, 32.08),
        validation(1100.0, 17, 32.15),  # the process was stopped during epoch 18; the next resumes after 17
        resumed(12.2, 17),
        validation(312.2, 18, 32.19),
        "700.0\tmt-en-de finetune · best val BLEU 32.19 at epoch 18 (step 8172)",
    ]

    curve, offset = multi30k_text.continued_curve(STOPPED, lines)

    # epoch 15 ends 400 s after the resume, on the clock that stopped at epoch 14's 5951.7 s; epoch 18 ends 300 s
    # after the second resume, which took up at epoch 17's 6851.7 s
    assert [(row["epoch"], row["score"], row["seconds"]) for row in curve] == [
        (15, 31.93, 6351.7),
        (16, 32.08, 6751.7),
        (17, 32.15, 7026.8),
        (18, 32.19, 7326.8),
    ]
    assert offset == 7026.8 - 12.2


def test_without_a_resume_nothing_continues() -> None:
    assert multi30k_text.continued_curve(STOPPED, [validation(400.0, 1, 11.1)]) == ([], None)


def test_the_docs_show_the_continuation_beside_the_run_and_mark_its_epochs() -> None:
    test = {"bleu": 31.64, "sacrebleu": 31.41, "chrf": 56.43, "meteor": 51.33, "test_sentences": 1000}
    run: dict[str, Any] = {
        "test": test,
        "curve": STOPPED,
        "seconds": {"train_and_test": 5981.0},
        "machine": "2 CPU cores (x86_64, Linux)",
        "threads": 1,
        "load_average": {"start": [8.5, 8, 8], "end": [6.7, 7, 7]},
        "settings": {"mmt": {"beam": 5}},
        "sample_translations": [],
        "more_time": {
            "curve": [{"epoch": 15, "loss": 3.26, "score": 32.3, "seconds": 6351.7}],
            "ended_after_epoch": 15,
            "best_epoch": 15,
            "test": {**test, "bleu": 32.04, "sacrebleu": 31.8},
            "seconds": {"train_and_test": 6700.0},
            "load_average": {"start": [1.0, 1, 1], "end": [2.0, 2, 2]},
        },
    }

    text = multi30k_text.markdown({"directions": {"en-de": run}})

    assert "| en→de | 31.6 | 31.4 | 56.4 | 51.3 | 2 | 99 min 41 s |" in text
    assert "| en→de, the same run with more time | 32.0 | 31.8 | 56.4 | 51.3 | 15 (best 15) | 111 min 40 s |" in text
    assert "| 2 | 32.1 (99 min 12 s) |" in text
    assert "| 3 | +32.3 (105 min 52 s) |" in text
