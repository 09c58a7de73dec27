"""A retrieval run's numbers as files and tables: rounding, one language's row, replicates combined with their
standard deviation, and the learning-curve rows of a fit's history."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.files import write_tsv
from retrieval.results import combine_replicates, flat_metrics, history_rows, replicate_seeds, rounded


def test_rounded_and_flat_metrics() -> None:
    metrics = {
        "i2t": {"r1": 88.60000000000001, "r5": 95.123449, "r10": 100.0, "medr": 1.0, "meanr": 1.23456789},
        "t2i": {"r1": 1 / 3, "r5": 2 / 3, "r10": 99.99999, "medr": 2.0, "meanr": 3.0},
        "rsum": 385.45679,
        "mr": 64.2427983,
        "folds": 5,
    }
    result = rounded(metrics)  # type: ignore[arg-type]
    assert result == {
        "i2t": {"r1": 88.6, "r5": 95.1234, "r10": 100.0, "medr": 1.0, "meanr": 1.2346},
        "t2i": {"r1": 0.3333, "r5": 0.6667, "r10": 100.0, "medr": 2.0, "meanr": 3.0},
        "rsum": 385.4568,
        "mr": 64.2428,
        "folds": 5,
    }
    assert isinstance(result["folds"], int)
    assert flat_metrics(result) == {
        "i2t_r1": 88.6,
        "i2t_r5": 95.1234,
        "i2t_r10": 100.0,
        "t2i_r1": 0.3333,
        "t2i_r5": 0.6667,
        "t2i_r10": 100.0,
        "rsum": 385.4568,
        "mr": 64.2428,
    }
    assert list(flat_metrics(result)) == ["i2t_r1", "i2t_r5", "i2t_r10", "t2i_r1", "t2i_r5", "t2i_r10", "rsum", "mr"]


def test_combining_replicates_checks_its_inputs_and_keeps_one_run_as_it_is() -> None:
    assert replicate_seeds(7, 3) == [7, 8, 9] and replicate_seeds(0, 1) == [0]
    one = {"en": {"rsum": 400.0}, "protocol": "full"}
    assert combine_replicates([one], [0]) == one  # a single run: the metrics file of before, no std keys
    two = combine_replicates([{"en": {"rsum": 400.0, "mr": 60.0}}, {"en": {"rsum": 410.0, "mr": 70.0}}], [3, 4])
    assert two == {"en": {"rsum": 405.0, "mr": 65.0}, "std": {"en": {"rsum": 7.07, "mr": 7.07}}, "seeds": [3, 4]}
    with pytest.raises(ValueError, match="2 replicate runs for 3 seeds"):
        combine_replicates([one, one], [0, 1, 2])
    with pytest.raises(ValueError, match=r"metrics\.en: the replicate runs' metrics have different keys"):
        combine_replicates([{"en": {"rsum": 1.0}}, {"en": {"mr": 1.0}}], [0, 1])
    with pytest.raises(ValueError, match=r"metrics\.protocol: the replicate runs disagree"):
        combine_replicates([{"protocol": "full"}, {"protocol": "folds"}], [0, 1])


def test_history_rows_are_one_per_epoch_without_timings(tmp_path: Path) -> None:
    history = [
        {
            "epoch": 1,
            "lr": 5e-4,
            "loss": 0.75,
            "c2c_loss": None,
            "steps_per_s": 3.3,
            "val_rsum": 400.0,
            "val": {
                "en": {"rsum": 200.0, "i2t_r1": 30.0, "t2i_r1": 20.0},
                "de": {"rsum": 200.0, "i2t_r1": 25.0, "t2i_r1": 21.0},
            },
        },
        {
            "epoch": 2,
            "lr": 5e-5,
            "loss": 0.5,
            "c2c_loss": None,
            "steps_per_s": 2.9,
            "val_rsum": 410.5,
            "val": {
                "en": {"rsum": 205.5, "i2t_r1": 31.0, "t2i_r1": 21.0},
                "de": {"rsum": 205.0, "i2t_r1": 26.0, "t2i_r1": 22.0},
            },
        },
    ]
    rows = history_rows(history, seed=3)
    assert rows[1] == {
        "seed": 3,
        "epoch": 2,  # the fit's history counts epochs from 1; the file keeps its numbers
        "lr": 5e-5,
        "loss": 0.5,
        "c2c_loss": None,
        "val_rsum": 410.5,
        "val_rsum_en": 205.5,
        "val_rsum_de": 205.0,
        "val_i2t_r1_en": 31.0,
        "val_i2t_r1_de": 26.0,
        "val_t2i_r1_en": 21.0,
        "val_t2i_r1_de": 22.0,
    }
    write_tsv(tmp_path / "h.tsv", rows)
    lines = (tmp_path / "h.tsv").read_text().splitlines()
    assert lines[0].split("\t")[:6] == ["seed", "epoch", "lr", "loss", "c2c_loss", "val_rsum"]
    assert lines[2].split("\t")[:6] == ["3", "2", "5e-05", "0.5", "", "410.5"]
    assert lines[0].split("\t")[6:8] == ["val_rsum_en", "val_rsum_de"]
    with pytest.raises(ValueError, match="no rows"):
        write_tsv(tmp_path / "e.tsv", [])
