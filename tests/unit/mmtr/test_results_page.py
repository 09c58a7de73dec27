"""`mmtr results`: the published numbers come from the metrics files, under a stamp, into marked blocks only."""

from __future__ import annotations

import dataclasses
import datetime
from pathlib import Path

import pytest

from common.errors import InputError
from common.files import write_json
from common.metrics_files import write_metrics
from mmtr.params import Params, load_params
from mmtr.results_page import (
    PipelineMetrics,
    Stamp,
    glance_block,
    make_stamp,
    pivot_chart,
    published_tables,
    read_pipeline_metrics,
    replace_block,
    results_page,
    stages_markdown,
    table_sections,
)
from retrieval.significance import STATISTICS

REPO = Path(__file__).resolve().parents[3]
STAMP = Stamp(commit="abc1234", modified=False, date="2026-11-27", command="mmtr results")


def _recalls(r1: float) -> dict[str, float]:
    return {"r1": r1, "r5": r1 + 20, "r10": r1 + 30, "meanr": 4.0, "medr": 1.0}


def _retrieval(rsum_en: float) -> dict[str, object]:
    language = {"i2t": _recalls(40.0), "t2i": _recalls(30.0), "rsum": rsum_en, "mr": rsum_en / 6}
    return {"en": language, "de": {**language, "rsum": rsum_en + 100}, "protocol": "full"}


@pytest.fixture
def params(tmp_path: Path) -> Params:
    """The repository's params with the metrics folder in ``tmp_path``, holding one run per variant it names."""
    loaded = load_params(REPO / "params.yaml")
    loaded = dataclasses.replace(loaded, paths=dataclasses.replace(loaded.paths, metrics="metrics"))
    for index, name in enumerate(loaded.retrieval.run_names()):
        write_metrics(tmp_path / "metrics" / "retrieval" / f"{name}.json", _retrieval(300.0 + index))
    comparison = {
        "system": 75.234,
        "baseline": 61.15,
        "delta": 14.084,
        "mean": 75.3,
        "ci": 3.7,
        "p_value": 0.001,
        "samples": 1000,
        "signature": "s",
    }
    write_metrics(tmp_path / "metrics" / "mmt" / "mmt-vs-mt-en-de.json", comparison)
    write_metrics(tmp_path / "metrics" / "mmt" / "mmt-en-de.json", {"bleu": 75.234, "chrf": 80.0, "meteor": None})
    return loaded


def test_the_metrics_are_read_back_with_their_notes_and_without_notes_files(params: Params, tmp_path: Path) -> None:
    metrics = read_pipeline_metrics(params, tmp_path)
    assert list(metrics.retrieval) == params.retrieval.run_names()
    assert metrics.retrieval[params.retrieval.run_names()[0]]["protocol"] == "full"
    assert set(metrics.translation) == {"mmt-en-de"} and set(metrics.comparisons) == {"en-de"}
    assert metrics.translation["mmt-en-de"]["meteor"] is None  # a note, joined back


def test_a_missing_run_names_its_file(params: Params, tmp_path: Path) -> None:
    first = params.retrieval.run_names()[0]
    (tmp_path / "metrics" / "retrieval" / f"{first}.json").unlink()
    with pytest.raises(InputError, match=rf"{first}\.json: no metrics file .*run the pipeline first"):
        read_pipeline_metrics(params, tmp_path)


def test_the_glance_block_shows_each_number_once_rounded_as_written(params: Params, tmp_path: Path) -> None:
    block = glance_block(read_pipeline_metrics(params, tmp_path), params, STAMP, None)
    assert block.startswith("_From the metrics that `dvc.lock` records at commit abc1234; written on 2026-11-27 by")
    assert "| en → de | 75.2 | 61.1 |" in block  # 61.15 rounds half to even in the float the file holds
    first = params.retrieval.run_names()[0]
    model, variant, role = first.split("-", 2)
    label = {name: v.display_name() for name, v in params.augment.variants.items()}[variant]
    assert f"| {model.upper()} | `{label}` | {role} | 300.0 | 400.0 |" in block
    assert "took" not in block  # no stage record, no time


def test_the_page_holds_the_stage_times_and_the_reports_tables(params: Params, tmp_path: Path) -> None:
    stages = {
        "command": "dvc repro",
        "machine": "2 CPU cores (x86_64, Linux)",
        "seconds": 524.4,
        "stages": [
            {"stage": "generate", "status": "ran", "seconds": 13.04},
            {"stage": "report", "status": "unchanged", "seconds": None},
        ],
    }
    page = results_page(read_pipeline_metrics(params, tmp_path), params, STAMP, stages)
    assert page.startswith("# Results\n\nFrom the metrics that `dvc.lock` records at commit abc1234;")
    assert "`dvc repro` took 8 min 44 s on 2 CPU cores (x86_64, Linux)." in page
    assert "| `generate` | ran | 13 s |" in page and "| `report` | unchanged | - |" in page
    assert "| en→de | 61.1 | 75.2 | +14.1 | 0.001 | yes | 75.3 ± 3.7 |" in page  # the report's bootstrap table
    assert "\n**Findings.** Retrieval (" in page and "Translation (en→de): the MMT scores 75.2 BLEU" in page
    assert page.count("\n## ") >= 3 and "\n# Retrieval results" not in page  # the report's title demoted
    assert len(table_sections(page)) == len(published_tables(page)) - 1  # the stage table has no committed source


def test_the_chart_is_a_standalone_svg_of_the_pivot(params: Params, tmp_path: Path) -> None:
    svg = pivot_chart(read_pipeline_metrics(params, tmp_path), params)
    assert svg.startswith('<svg xmlns="http://www.w3.org/2000/svg" ') and svg.endswith("</svg>\n")
    assert f"rsum per run, {params.languages.pivot} (test split)" in svg and ">300.0<" in svg


def test_blocks_are_replaced_between_their_markers_only() -> None:
    text = "intro\n<!-- results:begin -->\nold\n<!-- results:end -->\noutro\n"
    assert replace_block(text, "results", "new\n", source="README.md") == (
        "intro\n<!-- results:begin -->\nnew\n<!-- results:end -->\noutro\n"
    )
    with pytest.raises(InputError, match=r"README\.md: needs exactly one '<!-- dag:begin -->'"):
        replace_block(text, "dag", "x", source="README.md")


def test_stage_times_read_as_a_person_would_say_them() -> None:
    record = {"command": "dvc repro", "seconds": 65.0, "stages": [{"stage": "a", "status": "ran", "seconds": 4.25}]}
    assert stages_markdown(record)[0] == "`dvc repro` took 1 min 5 s."
    assert stages_markdown(record)[4] == "| `a` | ran | 4.2 s |"


def test_the_stamp_says_when_the_metrics_are_not_those_of_the_commit(tmp_path: Path) -> None:
    stamp = make_stamp(tmp_path, load_params(REPO / "params.yaml"), "mmtr results", datetime.date(2026, 1, 2))
    assert stamp == Stamp(commit="unknown", modified=False, date="2026-01-02", command="mmtr results")
    modified = dataclasses.replace(stamp, commit="abc1234", modified=True)
    assert "at commit abc1234 plus uncommitted metrics;" in modified.line()


def test_an_empty_pipeline_has_no_chart() -> None:
    empty = PipelineMetrics(retrieval={}, translation={}, comparisons={}, diversity={}, round_trips={})
    with pytest.raises(InputError, match="no retrieval run was tested in the pivot language"):
        pivot_chart(empty, load_params(REPO / "params.yaml"))


def test_the_reports_tests_mark_the_page_when_they_are_committed(params: Params, tmp_path: Path) -> None:
    unmarked = results_page(read_pipeline_metrics(params, tmp_path), params, STAMP, None)
    assert "not tested for significance" in unmarked and "Marks:" not in unmarked
    tested = {name: {"delta": 1.0, "p_value": 0.01, "ci": 0.5} for name in STATISTICS}
    runs = params.retrieval.run_names()  # san-none-all first, then the augmented variants
    significance = {f"{runs[2]}/en": {f"{runs[0]}/en": {**tested, "samples": 1000}}}  # MMT(f) against `-`
    write_json(tmp_path / "metrics" / "significance.json", significance)
    page = results_page(read_pipeline_metrics(params, tmp_path), params, STAMP, None)
    assert "| san | MMT(f) | all | 30.0† | 50.0† | 60.0† | 40.0† | 60.0† | 70.0† | 302.0† | 50.3 | +2.0 |" in page
    assert "+2.0 over no augmentation (`-`, 300.0; p = 0.010, significant) and +1.0 over MT(f)" in page
    assert "MT(f), the best MT variant (301.0; not tested); one seed; paired bootstrap" in page
    assert "(`-`, 400.0) and +1.0 over MT(f), the best MT variant (401.0); one seed; not tested" in page  # de: none
    assert "Marks: a difference significant at p < 0.05" in page
