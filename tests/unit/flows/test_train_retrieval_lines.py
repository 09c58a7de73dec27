"""The train_retrieval stage's console lines count epochs the same way."""

from __future__ import annotations

from flows.train_retrieval import best_epoch_line
from tasks.retrieval import epoch_summary


def test_the_best_epoch_line_names_the_epoch_as_its_progress_line_does() -> None:
    """Patience stopped a 6-epoch schedule after 3 epochs; the best was the second (0-based epoch 1)."""
    rsums = (300.0, 380.0, 370.0)
    history = [{"epoch": epoch, "loss": 1.0, "val": {"en": {"rsum": rsum}}} for epoch, rsum in enumerate(rsums)]
    summary = {"best_epoch": 1, "best_val_rsum": 380.0, "epochs": 3}  # as tasks.retrieval.train_retrieval_model returns
    progress = epoch_summary(history[summary["best_epoch"]], 6)
    assert progress == "epoch 2/6, loss 1.000, val rsum en 380.0"
    line = best_epoch_line("san-none-all", 0, summary, 6)
    assert line == "san-none-all (seed 0): best validation rsum 380.0 at epoch 2/6"
