"""mmtr.doc_sections: a generated section replaces what its markers hold, again and again, and nothing else."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from mmtr.doc_sections import markers, publish_section, replace_section


def test_the_section_replaces_what_its_markers_hold_and_nothing_else(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    start, end = markers("figures")
    other_start, other_end = markers("other")
    page.write_text(f"before\n{start}\nold\n{end}\nmiddle\n{other_start}\nkept\n{other_end}\n")
    for _ in range(2):  # a second run replaces the first text instead of adding one
        replace_section(page, "figures", "| a | b |\n")
    assert page.read_text() == f"before\n{start}\n\n| a | b |\n\n{end}\nmiddle\n{other_start}\nkept\n{other_end}\n"


@pytest.mark.parametrize("text", ["no markers\n", "<!-- figures:end -->\n<!-- figures:start -->\n"])
def test_a_page_without_the_markers_in_order_is_refused_naming_both(tmp_path: Path, text: str) -> None:
    page = tmp_path / "page.md"
    page.write_text(text)
    expected = f"{page}: needs the lines <!-- figures:start --> and <!-- figures:end -->, in that order"
    with pytest.raises(SystemExit, match=re.escape(expected)):
        replace_section(page, "figures", "new\n")
    assert page.read_text() == text


def test_publish_writes_the_rendered_record_into_the_page_or_prints_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record, page = tmp_path / "run.json", tmp_path / "page.md"
    record.write_text('{"seconds": 12.5}')
    start, end = markers("figures")
    page.write_text(f"{start}\n{end}\n")

    def render(data: dict[str, float]) -> str:
        return f"took {data['seconds']} s\n"

    assert publish_section(argparse.Namespace(markdown=record, into=page), "figures", render)
    assert page.read_text() == f"{start}\n\ntook 12.5 s\n\n{end}\n"
    assert publish_section(argparse.Namespace(markdown=record, into=None), "figures", render)
    assert capsys.readouterr().out == "took 12.5 s\n"
    assert not publish_section(argparse.Namespace(markdown=None, into=None), "figures", render)  # the bench runs
    with pytest.raises(SystemExit, match="--into goes with --markdown"):
        publish_section(argparse.Namespace(markdown=None, into=page), "figures", render)
