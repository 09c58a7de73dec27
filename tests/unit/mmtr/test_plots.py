"""The offline page's HTML template (mmtr/plots.py): the libraries inline, DVC's placeholders kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.errors import InputError
from mmtr.plots import page_template, repository_root

BUNDLE = "const spec=1;function f(){};window.vegaEmbed=f;"


def test_the_bundle_is_inline_in_a_function_and_dvcs_placeholders_remain() -> None:
    page = page_template(BUNDLE, "Vega 6")
    assert "<script>\n(() => {\n" + BUNDLE + "\n})();\n</script>" in page
    assert "{plot_divs}" in page and "{refresh_tag}" in page
    # without {scripts}, DVC adds no script tag of its own (its default loads the libraries from a CDN)
    assert "{scripts}" not in page and "src=" not in page
    assert '<meta charset="utf-8">' in page  # the titles hold arrows (en→de)


@pytest.mark.parametrize("text", ["x='</SCRIPT>'", "x='<!--'", "x='{plot_divs}'", "x='{scripts}'"])
def test_a_bundle_that_would_break_the_page_is_refused(text: str) -> None:
    with pytest.raises(InputError, match=r"the JavaScript bundle \(Vega 6\) holds .*: it cannot be inlined"):
        page_template(BUNDLE + text, "Vega 6")


def test_the_repository_is_the_nearest_folder_with_a_dvc_folder(tmp_path: Path) -> None:
    (tmp_path / ".dvc").mkdir()
    (tmp_path / "data" / "metrics").mkdir(parents=True)
    assert repository_root(tmp_path / "data" / "metrics") == tmp_path.resolve()
    with pytest.raises(InputError, match="not inside a DVC repository"):
        repository_root(tmp_path.parent)
