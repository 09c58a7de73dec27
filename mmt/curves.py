"""A multimodal system's learning curve for ``dvc plots``: its text-only pre-training, then its fine-tuning with
regions, on one step axis.

:func:`mmt.systems.fit_system` writes one history per fit beside its checkpoint (``pretrain.history.tsv``,
``finetune.history.tsv``: step, epoch, mean loss since the previous validation, validation BLEU); the curve joins
them, fine-tuning steps counted on from the last pre-training step.
"""

from __future__ import annotations

import csv
from pathlib import Path

from common.errors import InputError

PHASES = ("pretrain", "finetune")
COLUMNS = ("phase", "step", "phase_step", "epoch", "loss", "val_bleu")


def learning_curve(folder: Path) -> list[dict[str, object]]:
    """Rows of :data:`COLUMNS`, one per validation, pre-training first; a phase without a history file is left out.

    Raises:
        InputError: a history file without the columns step, epoch, loss and val_bleu, or with a value that is not
            a number.
    """
    rows: list[dict[str, object]] = []
    offset = 0
    for phase in PHASES:
        path = folder / f"{phase}.history.tsv"
        if not path.is_file():
            continue
        history = read_history(path)
        rows += [
            {
                "phase": phase,
                "step": offset + int(entry["step"]),
                "phase_step": int(entry["step"]),
                "epoch": int(entry["epoch"]),
                "loss": entry["loss"],
                "val_bleu": entry["val_bleu"],
            }
            for entry in history
        ]
        if history:
            offset += int(history[-1]["step"])
    return rows


def read_history(path: Path) -> list[dict[str, float]]:
    """The validations of one fit's history file: step, epoch, loss and val_bleu of each, as numbers.

    Raises:
        InputError: a missing column or a value that is not a number.
    """
    wanted = ("step", "epoch", "loss", "val_bleu")
    with path.open(encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle, delimiter="\t")
        missing = [column for column in wanted if column not in (reader.fieldnames or ())]
        if missing:
            raise InputError(f"{path}: no column {', '.join(missing)} (a learning curve needs {', '.join(wanted)})")
        entries = []
        for line, row in enumerate(reader, start=2):
            try:
                entries.append({column: float(row[column]) for column in wanted})
            except (TypeError, ValueError):
                values = {column: row[column] for column in wanted}
                raise InputError(f"{path}: line {line}: {values} is not all numbers") from None
        return entries
