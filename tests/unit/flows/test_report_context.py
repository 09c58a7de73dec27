"""The report is a DVC output: the same inputs give the same bytes, at any commit."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from flows import report
from mmtr.params import load_params

REPO = Path(__file__).resolve().parents[3]


def test_the_report_header_names_the_settings_but_no_commit_or_date(monkeypatch: pytest.MonkeyPatch) -> None:
    images = pa.table({"split": ["train", "test", "test", "val"]})
    monkeypatch.setattr(report, "read_images", lambda path: images)
    monkeypatch.setattr("mmtr.stage.git_commit", lambda: "0123456789abcdef")
    params = load_params(REPO / "params.yaml")
    context = report.report_context(params, "prepared")
    assert len(context.header) == 1
    assert context.header[0].startswith(f"Models {', '.join(params.retrieval.models)}; variants ")
    assert "0123456" not in context.header[0] and "commit" not in context.header[0]
    assert context.test_images[params.languages.pivot] == 2
