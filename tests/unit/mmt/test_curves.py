"""The MMT learning curve for `dvc plots`: pre-training then fine-tuning on one step axis."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.errors import InputError
from common.files import write_tsv
from mmt.curves import COLUMNS, learning_curve


def _history(path: Path, steps: list[int], bleu: list[float]) -> None:
    # the columns fit_system writes: step, epoch, loss, score, val_bleu
    write_tsv(
        path,
        [
            {"step": step, "epoch": index + 1, "loss": 2.0 / (index + 1), "score": value, "val_bleu": value}
            for index, (step, value) in enumerate(zip(steps, bleu, strict=True))
        ],
    )


def test_fine_tuning_steps_continue_from_the_last_pretraining_step(tmp_path: Path) -> None:
    _history(tmp_path / "pretrain.history.tsv", [10, 20], [5.5, 9.25])
    _history(tmp_path / "finetune.history.tsv", [4, 8, 12], [30.0, 41.0, 40.5])
    rows = learning_curve(tmp_path)
    assert [tuple(row) for row in rows] == [COLUMNS] * 5
    assert [(row["phase"], row["step"], row["phase_step"], row["epoch"]) for row in rows] == [
        ("pretrain", 10, 10, 1),
        ("pretrain", 20, 20, 2),
        ("finetune", 24, 4, 1),
        ("finetune", 28, 8, 2),
        ("finetune", 32, 12, 3),
    ]
    assert [row["val_bleu"] for row in rows] == [5.5, 9.25, 30.0, 41.0, 40.5]
    assert rows[3]["loss"] == 1.0


def test_a_phase_without_history_is_left_out(tmp_path: Path) -> None:
    _history(tmp_path / "finetune.history.tsv", [3], [12.0])
    assert [(row["phase"], row["step"]) for row in learning_curve(tmp_path)] == [("finetune", 3)]
    assert learning_curve(tmp_path / "nothing") == []


def test_a_history_without_the_columns_or_with_text_is_an_input_error(tmp_path: Path) -> None:
    (tmp_path / "pretrain.history.tsv").write_text("step\tepoch\tloss\n1\t1\t0.5\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"pretrain\.history\.tsv: no column val_bleu \(a learning curve needs"):
        learning_curve(tmp_path)
    (tmp_path / "pretrain.history.tsv").write_text("step\tepoch\tloss\tval_bleu\n1\t1\tnan?\t3\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"pretrain\.history\.tsv: line 2: .*'loss': 'nan\?'.* is not all numbers"):
        learning_curve(tmp_path)
