"""The numbers the README and docs/results.md publish are those of the committed metrics: `mmtr results` wrote
them, and nobody typed or left one behind. After a pipeline run whose metrics are committed, run `mmtr results`."""

from __future__ import annotations

import re
from pathlib import Path

from mmtr.params import load_params
from mmtr.results_page import (
    Stamp,
    glance_block,
    published_tables,
    read_pipeline_metrics,
    results_page,
    table_sections,
)

REPO = Path(__file__).resolve().parents[2]
ANY_STAMP = Stamp(commit="-", modified=False, date="-", command="mmtr results")
STAMP_LINE = re.compile(
    r"From the metrics that `dvc.lock` records at commit [0-9a-f]{7,}; written on \d{4}-\d\d-\d\d by"
)


def _block(text: str, name: str) -> str:
    found = re.search(rf"<!-- {name}:begin -->\n(.*?)<!-- {name}:end -->", text, re.DOTALL)
    assert found, f"README.md has no {name} block"
    return found[1]


def test_docs_results_holds_the_tables_of_the_committed_metrics() -> None:
    params = load_params(REPO / "params.yaml")
    page = (REPO / "docs" / "results.md").read_text(encoding="utf-8")
    regenerated = results_page(read_pipeline_metrics(params, REPO), params, ANY_STAMP, None)
    assert STAMP_LINE.search(page), "docs/results.md: no stamp of a committed run (run `mmtr results`)"
    assert table_sections(page) == table_sections(regenerated)


def test_the_readme_glance_holds_the_numbers_of_the_committed_metrics() -> None:
    params = load_params(REPO / "params.yaml")
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    block = _block(readme, "results")
    assert STAMP_LINE.search(block)
    regenerated = glance_block(read_pipeline_metrics(params, REPO), params, ANY_STAMP, None)
    assert published_tables(block) == published_tables(regenerated)
    assert "```mermaid" in _block(readme, "dag")
