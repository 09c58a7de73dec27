"""A retrieval run's numbers as files and tables: rounded metrics, learning-curve rows, replicates combined.

:func:`rounded` keeps float noise out of metrics files; :func:`history_rows` turns a fit's history into one row per
epoch; :func:`replicate_seeds` and :func:`combine_replicates` run a model x variant x role several times and write
their mean and sample standard deviation in the schema of one run; :func:`flat_metrics` is one language's row.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

VALIDATION_KEYS = ("rsum", "i2t_r1", "t2i_r1")  # per validation language in a fit's history (retrieval.train)


def rounded(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """Values to 4 decimals (nested ones too), so metrics files and tables do not carry float noise such as
    88.60000000000001."""

    def round_value(value: Any) -> Any:
        if isinstance(value, dict):
            return {key: round_value(inner) for key, inner in value.items()}
        return round(value, 4) if isinstance(value, float) else value

    return {key: round_value(value) for key, value in metrics.items()}


def history_rows(history: Sequence[Mapping[str, Any]], seed: int) -> list[dict[str, Any]]:
    """One row per epoch of a fit's history, for learning curves: seed, epoch (counted from 1, as the fit's history
    counts it), lr, loss (and the caption-caption loss), validation rsum (summed over the validation languages: what
    selects the model), then per validation language its rsum (of 600) and R@1 both ways: ``val_rsum_<lang>``,
    ``val_i2t_r1_<lang>``, ``val_t2i_r1_<lang>``. Timings are left out: the file must be identical for identical
    runs."""
    rows = []
    for entry in history:
        row: dict[str, Any] = {
            "seed": seed,
            "epoch": entry["epoch"],
            "lr": entry["lr"],
            "loss": entry["loss"],
            "c2c_loss": entry["c2c_loss"],
            "val_rsum": entry["val_rsum"],
        }
        for key in VALIDATION_KEYS:
            row |= {f"val_{key}_{lang}": summary[key] for lang, summary in entry["val"].items()}
        rows.append(row)
    return rows


def replicate_seeds(seed: int, replicates: int) -> list[int]:
    """The training seeds of a run's replicates: ``seed``, ``seed + 1``, ..."""
    return [seed + index for index in range(replicates)]


def combine_replicates(runs: Sequence[Mapping[str, Any]], seeds: Sequence[int]) -> dict[str, Any]:
    """The test metrics of replicate runs as one metrics file: every number the mean over the runs (rounded to 2
    decimals, the schema of one run), ``std`` the sample standard deviation of each (same keys) and ``seeds``.
    One run is returned as it is.

    Raises:
        ValueError: no runs, a seed count that differs, or runs whose metrics have different keys.
    """
    if not runs or len(runs) != len(seeds):
        raise ValueError(f"{len(runs)} replicate runs for {len(seeds)} seeds")
    if len(runs) == 1:
        return dict(runs[0])
    mean, spread = _mean_and_std(runs, path="metrics")
    assert isinstance(mean, dict) and isinstance(spread, dict)
    return {**mean, "std": spread, "seeds": list(seeds)}


def _mean_and_std(values: Sequence[Any], *, path: str) -> tuple[Any, Any]:
    """(mean, std) of one key across runs: mappings key by key, numbers averaged, anything else kept (equal)."""
    first = values[0]
    if isinstance(first, Mapping):
        if any(not isinstance(value, Mapping) or value.keys() != first.keys() for value in values):
            raise ValueError(f"{path}: the replicate runs' metrics have different keys")
        pairs = {key: _mean_and_std([value[key] for value in values], path=f"{path}.{key}") for key in first}
        spreads = {key: spread for key, (_, spread) in pairs.items() if spread is not None}
        return {key: mean for key, (mean, _) in pairs.items()}, spreads or None
    if isinstance(first, int | float) and not isinstance(first, bool):
        numbers = np.asarray(values, dtype=np.float64)
        return round(float(numbers.mean()), 2), round(float(numbers.std(ddof=1)), 2)
    if any(value != first for value in values):
        raise ValueError(f"{path}: the replicate runs disagree ({values!r})")
    return first, None


def flat_metrics(metrics: dict[str, Any]) -> dict[str, float]:
    """One language's metrics as one row: i2t_r1 .. t2i_r10, rsum, mr."""
    recalls = {f"{direction}_r{k}": metrics[direction][f"r{k}"] for direction in ("i2t", "t2i") for k in (1, 5, 10)}
    return recalls | {"rsum": metrics["rsum"], "mr": metrics["mr"]}
