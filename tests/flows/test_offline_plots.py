"""`mmtr plots` on a tiny repository: the learning curves of the generated dvc.yaml, drawn into a page that loads
nothing from the network, with a title and a legend that tell the charts and their lines apart."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from mmtr import cli
from mmtr.dvc_yaml import update_dvc_yaml

REPO = Path(__file__).resolve().parents[2]
SPEC = re.compile(r"var spec = (\{.*?\});\n\s*vegaEmbed\('#([^']+)', spec\);", re.S)  # DVC's chart scripts
LANGUAGES = ("en", "de")  # the demo's retrieval languages, every run validated on both (role all)
RUNS = ("san-none-all", "san-mt_f-all", "san-mmt_f-all")


class Tags(HTMLParser):
    """Every <script> and <link> tag's attributes, and the text of the inline scripts."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("script", "link"):
            self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"
        if self._in_script:
            self.scripts.append("")

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False if tag == "script" else self._in_script

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.scripts[-1] += data


def write_histories(root: Path) -> None:
    """Learning curves as the stages write them: MMT BLEU per step over both phases, retrieval rsum per seed, epoch
    and language (two seeds)."""
    mmt = root / "data" / "metrics" / "mmt"
    mmt.mkdir(parents=True)
    for direction in ("en-de", "de-en"):
        rows = ["phase\tstep\tphase_step\tepoch\tloss\tval_bleu", "pretrain\t10\t10\t1\t2.5\t12.5"]
        rows += ["pretrain\t20\t20\t2\t1.5\t20.25", "finetune\t24\t4\t1\t1.0\t31.0"]
        (mmt / f"mmt-{direction}.history.tsv").write_text("\n".join(rows) + "\n")
    retrieval = root / "data" / "metrics" / "retrieval"
    retrieval.mkdir(parents=True)
    header = "\t".join(["seed", "epoch", "lr", "loss", "val_rsum", *(f"val_rsum_{lang}" for lang in LANGUAGES)])
    for run in RUNS:
        rows = [header]
        rows += [
            f"{seed}\t{epoch}\t0.0005\t{9 - epoch}\t{300 + 20 * epoch}\t{160 + epoch}\t{140 + epoch}"
            for seed in (0, 1)
            for epoch in (1, 2, 3)
        ]
        (retrieval / f"{run}.history.tsv").write_text("\n".join(rows) + "\n")


DVC_ENV = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}


@pytest.fixture(scope="module")
def drawn(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A git + DVC repository with the demo's params, its generated dvc.yaml, the chart template and curves, after
    `mmtr plots` ran in it: (the repository, what the command printed)."""
    root = tmp_path_factory.mktemp("plots")
    shutil.copy(REPO / "params.yaml", root / "params.yaml")
    update_dvc_yaml(root / "params.yaml")
    for command in (["git", "init", "-q"], ["dvc", "init", "-q"], ["dvc", "config", "core.analytics", "false"]):
        subprocess.run(command, cwd=root, env=DVC_ENV, check=True, capture_output=True)
    (root / ".dvc" / "plots").mkdir()
    shutil.copy(REPO / ".dvc" / "plots" / "learning_curve.json", root / ".dvc" / "plots")
    write_histories(root)
    printed = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(printed):
        patch.chdir(root / "data")  # found from a folder inside the repository, as DVC finds it
        cli.main(["plots"])
    return root, printed.getvalue()


def test_the_page_draws_every_curve_once_and_loads_nothing_from_the_network(drawn: tuple[Path, str]) -> None:
    root, printed = drawn
    page = root / "dvc_plots" / "index.html"
    assert printed.startswith(f"{page}: the learning curves")
    assert "set in .dvc/config.local" in printed
    html = page.read_text(encoding="utf-8")
    tags = Tags()
    tags.feed(html)
    assert tags.tags and all("src" not in attrs and "href" not in attrs for _, attrs in tags.tags), tags.tags
    assert not [attrs for _, attrs in tags.tags if "https://" in json.dumps(attrs)]
    libraries = [script for script in tags.scripts if "window.vegaEmbed=" in script]
    assert len(libraries) == 1 and "window.vegaLite=" in libraries[0] and "window.vega=" in libraries[0]

    specs = [json.loads(spec) for spec, _ in SPEC.findall(html)]
    assert len(specs) == 2  # one chart per family, none per file
    mmt, san = specs
    assert mmt["title"]["text"].startswith("MMT en→de and de→en: validation BLEU (greedy) per training step")
    assert san["title"]["text"].startswith("SAN: validation rsum per epoch, of 600 per language")
    # a line per file and column, per seed; the legend names the run (from the file name) and the column
    assert mmt["encoding"]["color"]["field"] == "run" and mmt["encoding"]["detail"]["field"] == "seed"
    assert mmt["layer"][0]["encoding"]["strokeDash"]["field"] == "field"
    lines = {(row["filename"], row["field"]) for row in san["data"]["values"]}
    assert lines == {(f"{run}.history.tsv", f"val_rsum_{lang}") for run in RUNS for lang in LANGUAGES}
    assert {row["filename"] for row in mmt["data"]["values"]} == {"mmt-en-de.history.tsv", "mmt-de-en.history.tsv"}
    assert sorted({int(row["epoch"]) for row in san["data"]["values"]}) == [1, 2, 3]


def test_a_plain_dvc_plots_show_then_takes_the_offline_template(drawn: tuple[Path, str]) -> None:
    root, _ = drawn
    subprocess.run(["dvc", "plots", "show", "-o", "plain"], cwd=root, env=DVC_ENV, check=True, capture_output=True)
    plain = (root / "plain" / "index.html").read_text(encoding="utf-8")
    assert "window.vegaEmbed=" in plain and "cdn.jsdelivr.net" not in plain


def test_the_page_renders_in_a_browser_without_network(drawn: tuple[Path, str]) -> None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("no headless Chromium on PATH (chromium or chromium-browser): the page is checked as HTML only")
    done = subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--proxy-server=127.0.0.1:9",  # nothing listens there: any request to the web fails
            "--host-resolver-rules=MAP * ~NOTFOUND",
            "--virtual-time-budget=10000",
            "--dump-dom",
            (drawn[0] / "dvc_plots" / "index.html").as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    # vega-embed draws each chart as an <svg class="marks"> (or a canvas), legends and all; without the libraries
    # the divs stay empty
    charts = re.findall(r'<(?:svg|canvas)[^>]*class="marks"', done.stdout)
    assert len(charts) == 2, done.stdout[-2000:]
    labels = set(re.findall(r"<text[^>]*>([^<]*)</text>", done.stdout))
    assert {"mmt-en-de", "san-mmt_f-all", "val_rsum_de", "workspace"} <= labels, sorted(labels)
