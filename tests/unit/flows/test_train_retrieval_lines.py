"""What the train_retrieval stage shows people: its console lines and its tables count epochs from 1, like the
history file and ``best_epoch``; the tables are narrow enough for the UI (at most 8 columns)."""

from __future__ import annotations

from flows.train_retrieval import best_epoch_line
from retrieval.results import history_rows
from tasks.retrieval import history_table, metrics_row


def _history(rsums: list[tuple[float, float]]) -> list[dict[str, object]]:
    """A fit's history as retrieval.train writes it: epochs counted from 1."""
    return [
        {
            "epoch": epoch,
            "lr": 5e-4,
            "loss": 1.0 / epoch,
            "c2c_loss": None,
            "val_rsum": en + de,
            "val": {
                "en": {"rsum": en, "i2t_r1": 10.0, "t2i_r1": 8.0},
                "de": {"rsum": de, "i2t_r1": 9.0, "t2i_r1": 7.0},
            },
        }
        for epoch, (en, de) in enumerate(rsums, start=1)
    ]


def test_the_best_epoch_line_names_the_epoch_the_history_and_the_table_mark() -> None:
    """Patience stopped a 6-epoch schedule after 3 epochs; the best was the second."""
    rows = history_rows(_history([(150.0, 150.0), (200.0, 180.04), (190.0, 180.0)]), seed=0)
    summary = {"best_epoch": 2, "best_val_rsum": 380.04, "epochs": 3}  # as tasks.retrieval.train_retrieval_model
    assert best_epoch_line("san-none-all", 0, summary, 6) == "san-none-all seed 0 · best val rsum 380.0 at epoch 2/6"
    assert history_table(rows, summary["best_epoch"]) == [
        {"epoch": 1, "loss": 1.0, "rsum en": 150.0, "rsum de": 150.0, "best": ""},
        {"epoch": 2, "loss": 0.5, "rsum en": 200.0, "rsum de": 180.0, "best": "best"},
        {"epoch": 3, "loss": 0.333, "rsum en": 190.0, "rsum de": 180.0, "best": ""},
    ]


def test_a_test_row_puts_each_directions_recalls_in_one_cell() -> None:
    metrics = {
        "i2t": {"r1": 30.04, "r5": 60.0, "r10": 70.56},
        "t2i": {"r1": 20.0, "r5": 50.0, "r10": 61.0},
        "rsum": 291.59,
        "mr": 48.598333,
    }
    assert metrics_row(metrics) == {
        "image→text R@1/5/10": "30.0 / 60.0 / 70.6",
        "text→image R@1/5/10": "20.0 / 50.0 / 61.0",
        "rsum": 291.6,
        "mR": 48.6,
    }
