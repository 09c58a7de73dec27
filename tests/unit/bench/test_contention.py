"""bench/contention.py: its summary against hand-computed shares, and the docs section written from its committed
run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import contention
from mmtr.doc_sections import markers

REPO = Path(__file__).resolve().parents[3]


def _runs(rates: dict[tuple[str, str], float]) -> list[dict[str, object]]:
    return [
        {"workload": "mmt", "policy": policy, "condition": condition, "steps_per_s": rate}
        for (policy, condition), rate in rates.items()
    ]


def test_summary_shares_and_goals_by_hand() -> None:
    rates = {("spin", "alone"): 10.0, ("short", "alone"): 9.8, ("spin", "burners"): 0.5, ("short", "burners"): 4.9}
    (row,) = contention.summarize(_runs(rates))
    assert row["spin_share"] == pytest.approx(0.05)
    assert row["short_share"] == pytest.approx(0.5)
    assert row["lone_change"] == pytest.approx(-0.02)
    assert row["share_met"] and row["lone_met"]
    rates[("short", "alone")] = 9.6  # 4% slower alone, and 4.9 / 9.6 is still over a third
    (row,) = contention.summarize(_runs(rates))
    assert not row["lone_met"] and row["share_met"]
    rates[("short", "burners")] = 3.0  # 3.0 / 9.6 < 1/3
    (row,) = contention.summarize(_runs(rates))
    assert not row["share_met"]


def test_the_docs_section_is_the_committed_run() -> None:
    record = json.loads((REPO / "bench" / "results" / "contention.json").read_text(encoding="utf-8"))
    start, end = markers(contention.SECTION)
    page = (REPO / "docs" / "scaling.md").read_text(encoding="utf-8")
    assert page.split(start)[1].split(end)[0].strip() == contention.markdown(record).strip()
