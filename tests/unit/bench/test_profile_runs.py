"""bench/profile_runs.py: what it reads back from a finished profile run (each run's rsum with its spread and seeds,
the paired tests of the report) and the docs section it writes from that record."""

from __future__ import annotations

import json
from pathlib import Path

from bench import profile_runs


def _write(path: Path, data: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _scores(rsum: float) -> dict[str, object]:
    recall = {"r1": 1.0, "r5": 2.0, "r10": 3.0, "medr": 1.0, "meanr": 1.0}
    return {"i2t": recall, "t2i": recall, "rsum": rsum, "mr": rsum / 6}


def test_run_metrics_reads_the_profiles_runs_rsum_spread_and_seeds(tmp_path: Path) -> None:
    folder = tmp_path / "retrieval"
    _write(
        folder / "san-mmt_f-pivot_test.json",
        {"en": _scores(300.5), "std": {"en": {"rsum": 4.25}}},
    )
    _write(folder / "san-mmt_f-pivot_test.notes.json", {"protocol": "full", "seeds": [1, 2, 3]})
    _write(folder / "san-none-pivot_test.json", {"en": _scores(280.0), "de": _scores(200.0)})
    _write(folder / "san-none-all.json", {"en": _scores(250.0)})  # a run made before the profile's
    dvc_yaml = tmp_path / "dvc.yaml"
    stages = {"train_retrieval": {"foreach": {"san-none-pivot_test": {}, "san-mmt_f-pivot_test": {}}}, "report": {}}
    dvc_yaml.write_text(json.dumps({"stages": stages}), encoding="utf-8")  # JSON is YAML

    names = profile_runs.profile_runs(dvc_yaml)
    runs = profile_runs.run_metrics(folder, names)

    assert names == ["san-mmt_f-pivot_test", "san-none-pivot_test"]

    assert runs == {
        "san-mmt_f-pivot_test": {"sets": {"en": {"rsum": 300.5, "std": 4.25}}, "seeds": 3},
        "san-none-pivot_test": {
            "sets": {"en": {"rsum": 280.0, "std": None}, "de": {"rsum": 200.0, "std": None}},
            "seeds": 1,
        },
    }


def test_key_tests_lists_every_paired_test_of_rsum(tmp_path: Path) -> None:
    rsum = {"system": 310.0, "baseline": 300.0, "delta": 10.0, "p_value": 0.0004, "ci": 3.0}
    path = _write(
        tmp_path / "significance.json",
        {
            "san-mmt_f-pivot_test/en": {"san-mt_f-pivot_test/en": {"rsum": rsum, "images": 100}},
            "dan-mmt_f-pivot_test/en": {"dan-none-pivot_test/en": {"rsum": {**rsum, "p_value": 0.2}}},
        },
    )

    tests = profile_runs.key_tests(path)

    assert tests == [
        {
            "system": "dan-mmt_f-pivot_test/en",
            "baseline": "dan-none-pivot_test/en",
            "system_rsum": 310.0,
            "baseline_rsum": 300.0,
            "delta": 10.0,
            "p_value": 0.2,
        },
        {
            "system": "san-mmt_f-pivot_test/en",
            "baseline": "san-mt_f-pivot_test/en",
            "system_rsum": 310.0,
            "baseline_rsum": 300.0,
            "delta": 10.0,
            "p_value": 0.0004,
        },
    ]
    assert profile_runs.key_tests(tmp_path / "absent.json") == []


PROFILE_RUN = {  # a profile's record, less its findings, runs and tests
    "date": "2026-11-27",
    "machine": "2 CPU cores (x86_64, Linux)",
    "seconds": 1865.4,
    "load_average": {"start": [1.5, 1.0, 1.0], "end": [3.25, 2.0, 2.0]},
    "tests": [],
}


def test_markdown_gives_time_findings_and_mmt_against_mt_per_model() -> None:
    record = {
        "table1": {
            **PROFILE_RUN,
            "findings": "MMT(f) beats MT(f).",
            "runs": {"san-mmt_f-pivot_test": {"sets": {}, "seeds": 3}, "san-mt_f-pivot_test": {"sets": {}, "seeds": 3}},
            "tests": [
                {
                    "system": "san-mmt_f-pivot_test/en",
                    "baseline": "san-mt_f-pivot_test/en",
                    "system_rsum": 310.04,
                    "baseline_rsum": 300.0,
                    "delta": 10.04,
                    "p_value": 0.0004,
                },
                {  # against `-`: not in the MMT(f) against MT(f) table
                    "system": "san-mmt_f-pivot_test/en",
                    "baseline": "san-none-pivot_test/en",
                    "system_rsum": 310.0,
                    "baseline_rsum": 290.0,
                    "delta": 20.0,
                    "p_value": 0.01,
                },
            ],
        }
    }

    text = profile_runs.markdown(record)

    assert "| `table1` | 2 | 3 | 31 min 5 s | 2 CPU cores (x86_64, Linux), 1.5, 3.2 | 2026-11-27 |" in text
    assert "**`table1`.** MMT(f) beats MT(f)." in text
    assert "| san | en | 310.0 | 300.0 | +10.0 | < 0.001 |" in text
    assert "290.0" not in text


def test_a_profile_of_training_setups_gets_a_table_of_its_runs_instead_of_its_findings() -> None:
    runs = {
        "vsepp-none-low_de_bi": {"sets": {"de": {"rsum": 287.66, "std": 18.31}, "en": {"rsum": 202.2, "std": None}}},
        "vsepp-none-low_de": {"sets": {"de": {"rsum": 123.6, "std": 8.26}}},
    }
    findings = "Retrieval (vsepp, role low_de, de): only no augmentation was run."
    with_seeds = {name: {**run, "seeds": 3} for name, run in runs.items()}
    record = {"kadar2018": {**PROFILE_RUN, "findings": findings, "runs": with_seeds}}

    text = profile_runs.markdown(record)

    assert "only no augmentation" not in text
    assert "rsum per test set, mean ± sd over 3 seeds." in text
    table = text[text.index("| run | de | en |") :].splitlines()
    assert table[2:4] == [  # runs in name order; a set the run was not tested on left empty
        "| `vsepp-none-low_de` | 123.6 ± 8.3 |  |",
        "| `vsepp-none-low_de_bi` | 287.7 ± 18.3 | 202.2 |",
    ]
