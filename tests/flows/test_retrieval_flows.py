"""train_retrieval, report and `mmtr search` end to end on the tiny dataset (tiny models: the plumbing)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch
import yaml

from common.files import read_json
from common.metrics_files import read_metrics
from common.runtime import Runtime
from common.tensor_tree import load_tree, save_tree
from corpora.prepared import read_prepared
from flows import report, train_retrieval, translate_queries
from mmt.systems import load_system
from mmtr import cli
from retrieval.significance import read_ranks
from retrieval.zoo.registry import MODELS
from tests.command_line import flags
from tests.flows.conftest import TinyDataset
from tests.flows.helpers import tiny_params_tree, write_params

pytestmark = pytest.mark.slow


def run_stage(tiny_dataset: TinyDataset, trained: Path, model: str, variant: str, role: str = "all") -> Path:
    name = f"{model}-{variant}-{role}"
    out, metrics = trained / "retrieval" / name, trained / "metrics" / "retrieval"
    train_retrieval.main(
        flags(
            params=tiny_dataset.params,
            model=model,
            variant=variant,
            role=role,
            augmented=trained / "augmented",
            store=trained / "features" / "compact",
            word_vectors=trained / "word-vectors",
            queries=trained / "queries",
            out=out,
            metrics=metrics / f"{name}.json",
        )
    )
    return out


ROLE_RUNS = ("san-mmt_f-discard_human_targets", "san-mmt_f-pivot_only")


@pytest.fixture(scope="module")
def runs(tiny_dataset: TinyDataset, trained: Path) -> dict[str, Path]:
    """Every registered model on mmt_f, SAN on none too, and SAN in two more language roles."""
    done = {f"{name}-mmt_f-all": run_stage(tiny_dataset, trained, name, "mmt_f") for name in MODELS}
    done["san-none-all"] = run_stage(tiny_dataset, trained, "san", "none")
    for name in ROLE_RUNS:
        model, variant, role = name.split("-")
        done[name] = run_stage(tiny_dataset, trained, model, variant, role)
    return done


def test_every_model_writes_metrics_in_the_spec_schema(runs: dict[str, Path], trained: Path) -> None:
    for name in (name for name in runs if name not in ROLE_RUNS):
        metrics = read_metrics(trained / "metrics" / "retrieval" / f"{name}.json")
        for lang in ("en", "de"):
            entry = metrics[lang]
            for direction in ("i2t", "t2i"):
                assert {"r1", "r5", "r10", "medr", "meanr"} <= set(entry[direction]), (name, lang)
                assert 0 <= entry[direction]["r1"] <= entry[direction]["r5"] <= entry[direction]["r10"] <= 100
            recalls = [entry[d][f"r{k}"] for d in ("i2t", "t2i") for k in (1, 5, 10)]
            assert entry["rsum"] == pytest.approx(sum(recalls), abs=1e-3)
            assert entry["mr"] == pytest.approx(sum(recalls) / 6, abs=1e-3)
        # 3 test images: R@5 of text->image is always 100
        assert metrics["en"]["t2i"]["r5"] == 100.0
        assert set(metrics["translate_search"]) == {"de"}
        checkpoint = json.loads((runs[name] / "model.json").read_text())
        assert checkpoint["model"] == name.split("-")[0]


def test_synthesized_captions_reach_training(runs: dict[str, Path]) -> None:
    with_synthesis = json.loads((runs["san-mmt_f-all"] / "model.json").read_text())
    without = json.loads((runs["san-none-all"] / "model.json").read_text())
    assert "de-mmt" in with_synthesis["type_names"] and "de-mmt" not in without["type_names"]


def test_language_roles_choose_what_a_run_trains_and_tests_on(runs: dict[str, Path], trained: Path) -> None:
    """Table 4's role drops the human German captions but tests German; Table 5's English model tests English
    only, with translate-search beside it."""
    table4 = json.loads((runs["san-mmt_f-discard_human_targets"] / "model.json").read_text())
    assert table4["type_names"] == ["de-mmt", "en-human"]
    english = json.loads((runs["san-mmt_f-pivot_only"] / "model.json").read_text())
    assert english["type_names"] == ["en-human"] and english["vocab"]["languages"] == ["en"]
    metrics = trained / "metrics" / "retrieval"
    assert set(read_metrics(metrics / "san-mmt_f-discard_human_targets.json")) >= {"en", "de"}
    english_metrics = read_metrics(metrics / "san-mmt_f-pivot_only.json")
    assert (
        "de" not in english_metrics and "en" in english_metrics and set(english_metrics["translate_search"]) == {"de"}
    )


def test_report_tables_every_run(
    runs: dict[str, Path], trained: Path, tiny_dataset: TinyDataset, tmp_path: Path
) -> None:
    """Every run the params name that has metrics, and only those: the metrics file of a run since dropped from the
    params (here a role they do not list) stays out of the tables."""
    out = trained / "reports"
    metrics = trained / "metrics" / "retrieval"
    tree = yaml.safe_load(tiny_dataset.params.read_text(encoding="utf-8"))
    tree["retrieval"].update(
        models=list(MODELS), variants=["none", "mmt_f"], roles=["all", "discard_human_targets", "pivot_only"]
    )
    params = write_params(tmp_path / "params.yaml", tree)
    stale = metrics / "san-none-pivot_test.json"
    stale.write_bytes((metrics / "san-none-all.json").read_bytes())
    try:
        report.main(
            flags(
                params=params,
                metrics=metrics,
                synthesized=trained / "synthesized",
                prepared=tiny_dataset.prepared,
                corpus="synthetic",
                out=out,
                diversity=trained / "metrics" / "augment.json",
                round_trips=trained / "metrics" / "synthesis",
                translation=trained / "metrics" / "mmt",
                significance=trained / "metrics" / "significance.json",
            )
        )
    finally:
        stale.unlink()
    markdown = (out / "results.md").read_text()
    assert "pivot_test" not in markdown
    assert markdown.startswith("# Retrieval results\n\n**Findings.** Retrieval (")
    tested = "one seed; paired bootstrap of rsum over the test images, significant at p < 0.05."
    assert tested in markdown and "Translation (en→de): the MMT scores " in markdown
    assert (
        "## Translation (test captions)" in markdown and "| en→de | MMT |" in markdown and "| de→en | MT |" in markdown
    )
    assert "| en→de | Δ MMT − MT |" in markdown and "mmt-vs-mt" not in markdown
    assert "## The MMT against the text-only MT (paired bootstrap of BLEU)" in markdown
    assert "## Caption diversity (train split)" in markdown and "| MMT(f+b) | en |" in markdown
    assert "## Round trips that changed their source" in markdown and "| de | mmt | 2 | 30 |" in markdown
    for name in MODELS:
        assert f"| {name} | MMT(f) | all |" in markdown
    assert "| san | - | all |" in markdown and "translate-search" in markdown
    assert "| san | MMT(f) | discard_human_targets |" in markdown and "| san | MMT(f) | pivot_only |" in markdown
    page = (out / "index.html").read_text()
    section = markdown.split("## Examples: where the MT and the MMT translate differently")[1]
    examples = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| image |")]
    assert examples and page.count("data:image/png;base64,") == len(examples)  # each beside its image
    assert "<th>MT (text-only)</th>" in page and "<th>de (human, same image)</th>" in page
    assert "<p><strong>Findings.</strong> Retrieval (" in page and "`" not in page  # Markdown rendered, not printed
    assert "<h2>Round trips that changed their source</h2>" in page and "<th>changed (%)</th>" in page
    assert "<h2>In the paper's layout</h2>" in page
    tests = read_json(trained / "metrics" / "significance.json")  # a variant against `-`; Table 5's comparison
    assert set(tests["san-mmt_f-all/en"]) == {"san-none-all/en"}
    search = tests["san-mmt_f-discard_human_targets/de"]["san-mmt_f-pivot_only/translate_search.de"]
    assert search["samples"] == 1000 and 0 < search["rsum"]["p_value"] <= 1


def test_runs_keep_their_query_ranks_and_the_report_tests_them(runs: dict[str, Path], trained: Path) -> None:
    """Each run's ranks file holds every test set it was scored on, a row per seed, its queries those of the other
    runs (translate-search's German queries too: they keep their ids)."""
    metrics = trained / "metrics" / "retrieval"
    ranked = read_ranks(metrics / "san-mmt_f-all.ranks.npz")
    assert set(ranked) == {"en", "de", "translate_search.de"}
    assert ranked["en"].i2t.shape == (1, 3) and ranked["en"].t2i.shape[0] == 1  # one seed, 3 test images
    english = read_ranks(metrics / "san-mmt_f-pivot_only.ranks.npz")
    assert set(english) == {"en", "translate_search.de"}
    assert english["translate_search.de"].same_queries(ranked["de"])


def test_search_cli_ranks_the_gallery_and_caches_it(
    runs: dict[str, Path], trained: Path, tiny_dataset: TinyDataset, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The gallery cache lives outside the model folder (a DVC output reading must not change); a corrupt or
    planted cache is rebuilt, never trusted."""
    cache = tmp_path / "cache"
    common = [
        "--prepared",
        str(tiny_dataset.prepared),
        "--images",
        str(tiny_dataset.raw / "images"),
        "-k",
        "2",
        "--store",
        str(trained / "features" / "compact"),
        "--cache-dir",
        str(cache),
    ]
    model = runs["san-mmt_f-all"]
    before = sorted(path.name for path in model.iterdir())
    cli.main(["search", "ein roter kreis", "--model", str(model), "--lang", "de", *common])
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and lines[0].split()[0] == "1" and lines[0].split()[2].startswith("syn")
    scores = [float(line.split()[1]) for line in lines]
    assert scores == sorted(scores, reverse=True)
    assert sorted(path.name for path in model.iterdir()) == before
    [cached_file] = list(cache.glob("gallery-*.safetensors"))
    cli.main(["search", "ein roter kreis", "--model", str(model), "--lang", "de", "--json", *common])
    cached = json.loads(capsys.readouterr().out)
    assert [hit["score"] for hit in cached] == pytest.approx(scores, abs=1e-4)  # the table shows 4 decimals
    stored = load_tree(cached_file)
    for planted in (b"not a checkpoint", None):
        if planted is None:  # the right identity and images, but vectors that would rank garbage
            save_tree(cached_file, {**stored, "vectors": torch.full_like(stored["vectors"], float("nan"))})
        else:
            cached_file.write_bytes(planted)
        cli.main(["search", "ein roter kreis", "--model", str(model), "--lang", "de", "--json", *common])
        assert [hit["score"] for hit in json.loads(capsys.readouterr().out)] == pytest.approx(scores, abs=1e-4)
        assert torch.equal(load_tree(cached_file)["vectors"], stored["vectors"])  # rebuilt
    cli.main(["search", "a red circle", "--model", str(runs["scan-mmt_f-all"]), "--lang", "en", *common])
    assert len(capsys.readouterr().out.splitlines()) == 2
    assert len(list(cache.glob("gallery-*.safetensors"))) == 1  # SCAN's image side depends on the query: nothing cached


def test_search_cli_errors(
    runs: dict[str, Path], trained: Path, tiny_dataset: TinyDataset, capsys: pytest.CaptureFixture[str]
) -> None:
    common = flags(
        prepared=tiny_dataset.prepared, images=tiny_dataset.raw / "images", store=trained / "features" / "compact"
    )
    with pytest.raises(SystemExit):
        cli.main(["search", "un cercle", "--model", str(runs["san-mmt_f-all"]), "--lang", "fr", *common])
    assert "trained on en, de" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["search", " ", "--model", str(runs["san-mmt_f-all"]), "--lang", "en", *common])
    assert "has no words" in capsys.readouterr().err


def test_unknown_model_variant_and_role_list_the_known_ones(
    tiny_dataset: TinyDataset, trained: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        run_stage(tiny_dataset, trained, "clip", "mmt_f")
    assert "unknown retrieval model 'clip'; known: dan, mule" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        run_stage(tiny_dataset, trained, "san", "mmt_x")
    assert (
        "unknown caption variant 'mmt_x'; known: none, mt_f, mt_fb, mt_fbf, mt_fbfb, mt_f_fb,"
        in capsys.readouterr().err
    )
    with pytest.raises(SystemExit):
        run_stage(tiny_dataset, trained, "san", "mmt_f", "table4")
    assert "unknown language role 'table4'; known: all, discard_human_targets, pivot_test, pivot_only" in (
        capsys.readouterr().err
    )


def test_translate_search_queries_are_translated_once_by_their_own_stage(
    trained: Path, tiny_dataset: TinyDataset, tmp_path: Path
) -> None:
    """translate_queries: every human de test caption, translated by mt-de-en; the retrieval runs read this file."""
    captions = read_prepared(tiny_dataset.prepared).captions.to_pylist()
    expected = sorted(
        {row["text"] for row in captions if (row["split"], row["origin"], row["lang"]) == ("test", "human", "de")}
    )
    table = pq.read_table(trained / "queries" / "de-en.parquet").to_pylist()
    assert [row["text"] for row in table] == expected and all(row["translation"].strip() for row in table)
    system = load_system(str(trained / "models" / "mt-de-en"), None, Runtime())
    assert [row["translation"] for row in table] == system.translate(expected, None, beam=2)
    manifest = json.loads((trained / "queries" / "queries.json").read_text())
    assert manifest == {"pivot": "en", "beam": 2, "queries": {"de": len(expected)}}
    # without translate-search languages the folder holds the manifest alone (it is still a DVC output)
    tree = tiny_params_tree()
    tree["retrieval"]["translate_search"]["languages"] = []
    params = write_params(tmp_path / "params.yaml", tree)
    translate_queries.main(
        flags(params=params, prepared=tiny_dataset.prepared, models=trained / "models", out=tmp_path / "queries")
    )
    assert sorted(path.name for path in (tmp_path / "queries").iterdir()) == ["queries.json"]
