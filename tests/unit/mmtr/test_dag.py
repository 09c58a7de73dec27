"""dvc.yaml generated from params.yaml (mmtr/dag.py): which stages exist and what each depends on."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from mmtr import cli
from mmtr.dag import build_pipeline, image_sets
from mmtr.dvc_yaml import describe_change, render, stage_names, stale_dvc_yaml
from mmtr.errors import ParamsError
from mmtr.params import parse_params

REPO = Path(__file__).resolve().parents[3]
BASE: dict[str, Any] = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))


def corpus(source: str, images: str, fmt: str = "karpathy", **extra: str) -> dict[str, str]:
    return {"format": fmt, "dataset": "d", "source": source, "images": images, "boxes": "data/raw/boxes", **extra}


def real_tree(**corpora: dict[str, str]) -> dict[str, Any]:
    tree = copy.deepcopy(BASE)
    tree["corpora"] = corpora or {
        "multi30k": corpus("data/raw/multi30k", "data/raw/flickr30k-images", "multi30k"),
        "flickr30k": corpus("data/raw/dataset_flickr30k.json", "data/raw/flickr30k-images"),
    }
    names = list(tree["corpora"])
    tree["corpus_roles"] = {"mmt_finetune": names[0], "target": names[-1]}
    tree["paths"]["parallel"] = "data/raw/wmt"
    tree["features"].update(extractor="butd", regions={**tree["features"]["regions"], "mode": "fixed"})
    tree["features"]["butd"]["checkpoint"] = "faster_rcnn_from_caffe_attr.pkl"
    return tree


def test_the_built_in_world_is_generated_only_when_read() -> None:
    assert "generate" in build_pipeline(parse_params(BASE)).names()
    assert "generate" not in build_pipeline(parse_params(real_tree())).names()
    only_the_text = real_tree()
    only_the_text["paths"]["parallel"] = "data/raw/synthetic/parallel"  # real corpora, built-in parallel text
    assert "generate" in build_pipeline(parse_params(only_the_text)).names()


def test_a_language_without_a_grammar_is_refused_only_for_the_built_in_world() -> None:
    tree = copy.deepcopy(BASE)
    tree["languages"]["targets"] = ["de", "it"]
    with pytest.raises(ParamsError, match=r"languages\.targets\[1\]: .* no grammar for 'it': write corpora/synthetic/"):
        parse_params(tree)
    real = real_tree()
    real["languages"]["targets"] = ["de", "it"]
    real["mmt"]["targets"] = ["de", "it"]
    names = build_pipeline(parse_params(real)).names()
    assert {"prepare_parallel@it", "train_mmt@it", "synthesize@it"} <= set(names)


def test_corpora_over_one_image_folder_share_one_store() -> None:
    params = parse_params(real_tree())
    (shared,) = image_sets(params).values()
    assert shared.name == "multi30k" and shared.corpora == ("multi30k", "flickr30k")
    stage = build_pipeline(params).groups["features"]["multi30k"]
    assert "--prepared data/prepared/multi30k --prepared data/prepared/flickr30k" in stage.cmd
    assert stage.deps[:2] == ("data/prepared/multi30k/images.parquet", "data/prepared/flickr30k/images.parquet")
    assert "data/raw/feature-inputs/faster_rcnn_from_caffe_attr.pkl" in stage.deps
    assert "data/raw/feature-inputs" not in stage.deps and "data/raw/boxes" not in stage.deps  # boxes: mode fixed
    named = real_tree()
    for entry in named["corpora"].values():
        entry["image_set"] = "flickr30k"
    assert list(image_sets(parse_params(named))) == ["flickr30k"]


def test_image_sets_that_disagree_are_refused() -> None:
    tree = real_tree()
    tree["corpora"]["flickr30k"]["image_set"] = "f30k"
    tree["corpora"]["multi30k"]["image_set"] = "flickr"
    with pytest.raises(ParamsError, match="share the image folder data/raw/flickr30k-images but name different"):
        image_sets(parse_params(tree))
    tree = real_tree()
    tree["corpora"]["flickr30k"]["boxes"] = "data/raw/other-boxes.parquet"
    with pytest.raises(ParamsError, match="but not the boxes file"):
        image_sets(parse_params(tree))
    tree = real_tree(
        a=corpus("data/raw/a.json", "data/raw/a-images", image_set="one"),
        b=corpus("data/raw/b.json", "data/raw/b-images", image_set="one"),
    )
    with pytest.raises(ParamsError, match="image set 'one' names two image folders"):
        image_sets(parse_params(tree))


def test_a_group_pads_its_shorter_dependency_lists_with_the_flow_file() -> None:
    tree = real_tree(
        coco=corpus("data/raw/dataset_coco.json", "data/raw/coco-images"),
        multi30k=corpus("data/raw/multi30k", "data/raw/flickr30k-images", "multi30k"),
        flickr30k=corpus("data/raw/dataset_flickr30k.json", "data/raw/flickr30k-images"),
    )
    text = render(build_pipeline(parse_params(tree)))
    group = yaml.safe_load(text)["stages"]["features"]
    coco, shared = group["foreach"]["coco"]["deps"], group["foreach"]["multi30k"]["deps"]
    assert len(shared) == 4 and shared[:2] == [
        "data/prepared/multi30k/images.parquet",
        "data/prepared/flickr30k/images.parquet",
    ]
    assert coco == ["data/prepared/coco/images.parquet", "data/raw/coco-images", shared[-1], "flows/features.py"]
    assert group["do"]["deps"][:4] == [f"${{item.deps[{index}]}}" for index in range(4)]
    assert group["do"]["deps"][4:] == [
        "corpora",
        "features",
        "common",
        "flows/features.py",
        "tasks/__init__.py",
        "tasks/features.py",
    ]
    assert stage_names(text)[:3] == ["prepare@coco", "prepare@multi30k", "prepare@flickr30k"]


def test_a_retrieval_run_depends_on_its_own_settings_and_languages() -> None:
    tree = real_tree()
    tree["retrieval"]["models"] = ["san", "dan"]
    tree["retrieval"]["custom_roles"] = {"en_de": {"train": ["en:human", "de:mmt"], "test": ["en"]}}
    tree["retrieval"]["roles"] = ["all", "en_de"]
    runs = build_pipeline(parse_params(tree)).groups["train_retrieval"]
    san = runs["san-mmt_f-all"]
    assert "retrieval.configs.san" in san.params and "retrieval.configs.dan" not in san.params
    assert not [key for key in san.params if key.startswith("retrieval.custom_roles")]
    assert "retrieval.custom_roles.en_de" in runs["dan-none-en_de"].params
    assert {"retrieval.models", "retrieval.variants", "retrieval.roles", "retrieval", "languages"}.isdisjoint(
        san.params
    )
    assert san.deps[:2] == ("data/augmented/mmt_f/captions.de.parquet", "data/augmented/mmt_f/captions.en.parquet")


def test_an_alias_run_depends_on_its_models_config_and_its_own_entry() -> None:
    tree = real_tree()
    tree["retrieval"]["models"] = ["san", "san_wide"]
    tree["retrieval"]["configs"] = {"san": {"hidden": 8}}
    tree["retrieval"]["aliases"] = {"san_wide": {"model": "san", "hidden": 16}}
    runs = build_pipeline(parse_params(tree)).groups["train_retrieval"]
    assert {"retrieval.configs.san", "retrieval.aliases.san_wide"} <= set(runs["san_wide-none-all"].params)
    assert not [key for key in runs["san-none-all"].params if key.startswith("retrieval.aliases")]


def test_stage_changes_are_named_briefly() -> None:
    assert describe_change(["a", "b"], ["b", "c"]) == "+c -a"
    assert describe_change(["a"], ["a"]) == "the same stages"
    assert describe_change([], [f"s{n}" for n in range(10)], shown=2) == "+s0 +s1 and 8 more added"


def test_mmtr_dag_writes_checks_and_reports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(real_tree(), sort_keys=False), encoding="utf-8")
    cli.main(["dag", "--params", str(params)])
    assert "written from" in capsys.readouterr().out
    assert not stale_dvc_yaml(parse_params(real_tree()), tmp_path / "dvc.yaml", "params.yaml")
    cli.main(["dag", "--params", str(params), "--check"])
    assert "up to date" in capsys.readouterr().out
    tree = real_tree()
    tree["mmt"]["targets"] = ["de", "fr"]
    params.write_text(yaml.safe_dump(tree, sort_keys=False), encoding="utf-8")
    with pytest.raises(SystemExit) as stopped:
        cli.main(["dag", "--params", str(params), "--check"])
    assert stopped.value.code == 2
    error = capsys.readouterr().err
    assert "+prepare_parallel@fr" in error and "+train_mmt@fr" in error and "mmtr dag --params" in error


def test_train_mmt_depends_on_its_pairs_held_folders_alone(tmp_path: Path) -> None:
    tree = real_tree()
    tree["mmt"]["targets"] = ["de", "fr"]
    tree["languages"]["targets"] = ["de", "fr"]
    tree["mmt"]["mt_system"] = "seq2seq"
    tree["mmt"]["seq2seq"]["held"] = {
        "en-de": "opus-mt-en-de",  # a folder in paths.mt_models
        "de-en": "Helsinki-NLP/opus-mt-de-en",  # an id of the Hugging Face cache: outside the repository
        "en-fr": "opus-mt-en-fr",
    }
    for name in ("opus-mt-en-de", "opus-mt-en-fr"):
        (tmp_path / "data/raw/mt-models" / name).mkdir(parents=True)
    stages = build_pipeline(parse_params(tree), root=tmp_path).groups["train_mmt"]
    held = {key: [dep for dep in stage.deps if dep.startswith("data/raw/mt-models")] for key, stage in stages.items()}
    assert held == {"de": ["data/raw/mt-models/opus-mt-en-de"], "fr": ["data/raw/mt-models/opus-mt-en-fr"]}
    assert stages["de"].deps[:2] == ("data/prepared/multi30k", "data/prepared/parallel/en-de.parquet")


@pytest.mark.parametrize("systems", [["mmt", "mt"], ["mmt"], ["mt"]])
def test_train_mmt_declares_the_systems_params_trains(systems: list[str]) -> None:
    """`mmt.systems` decides the folders, metrics and curves train_mmt declares and the folders synthesize reads: DVC
    refuses an output or input it does not find, so a system that is not trained must be neither (MULE's profile
    trains the MMT alone)."""
    tree = real_tree()
    tree["mmt"]["systems"] = systems
    tree["retrieval"]["variants"] = ["none", *(f"{system}_f" for system in systems)]
    if "mt" not in systems:
        tree["retrieval"]["translate_search"]["languages"] = []  # it translates with the MT systems
    params = parse_params(tree)
    pipeline = build_pipeline(params)
    stage = pipeline.groups["train_mmt"]["de"]
    names = [f"{system}-{direction}" for system in systems for direction in ("en-de", "de-en")]
    assert stage.outs == tuple(f"data/models/mmt/{name}" for name in names)
    compared = ["mmt-vs-mt-en-de", "mmt-vs-mt-de-en"] if len(systems) == 2 else []
    assert stage.metrics == tuple(f"data/metrics/mmt/{name}.json" for name in (*names, *compared))
    curves = ["data/metrics/mmt/mmt-en-de.history.tsv", "data/metrics/mmt/mmt-de-en.history.tsv"]
    assert [path for path in stage.uncached if path.endswith(".history.tsv")] == (curves if "mmt" in systems else [])
    assert any(plot.id == "mmt-en-de" for plot in pipeline.plots) == ("mmt" in systems)
    synthesize = pipeline.groups["synthesize"]["de"]
    assert [dep for dep in synthesize.deps if dep.startswith("data/models/")] == list(stage.outs)


def test_a_hugging_face_corpus_is_read_from_its_folder_or_its_cache_entry() -> None:
    tree = real_tree(hf=corpus("data/raw/my-dataset", "data/raw/my-dataset-images", "hf"))
    prepare = build_pipeline(parse_params(tree)).groups["prepare"]["hf"]
    # embedded images are written into the image folder by prepare: an input of features, not of prepare
    assert prepare.deps == ("data/raw/my-dataset",)
    tree = real_tree(hf=corpus("owner/captions", "data/raw/my-dataset-images", "hf"))
    tree["prepare"]["hf"]["cache_dir"] = "data/raw/hf-cache"
    assert build_pipeline(parse_params(tree)).groups["prepare"]["hf"].deps == ("data/raw/hf-cache/owner___captions",)


def test_each_family_of_learning_curves_is_one_chart_with_a_title_of_its_own() -> None:
    tree = real_tree()
    tree["mmt"]["targets"] = ["de", "fr"]
    tree["retrieval"]["models"] = ["san", "dan"]
    tree["retrieval"]["variants"] = ["none", "mmt_f"]
    tree["retrieval"]["custom_roles"] = {"en_only": {"train": ["en:human"], "test": ["en"]}}
    tree["retrieval"]["roles"] = ["all", "en_only"]
    document = yaml.safe_load(render(build_pipeline(parse_params(tree))))
    charts = {name: body for chart in document["plots"] for name, body in chart.items()}
    assert list(charts) == ["mmt-en-de", "mmt-en-fr", "retrieval-san", "retrieval-dan"]
    titles = [body["title"] for body in charts.values()]
    assert len(set(titles)) == len(titles)
    assert titles[1].startswith("MMT en→fr and fr→en: validation BLEU (greedy) per training step")
    assert titles[3].startswith("DAN: validation rsum per epoch, of 600 per language")
    assert charts["mmt-en-fr"]["x"] == "step"
    assert charts["mmt-en-fr"]["y"] == {
        "data/metrics/mmt/mmt-en-fr.history.tsv": ["val_bleu"],
        "data/metrics/mmt/mmt-fr-en.history.tsv": ["val_bleu"],
    }
    assert charts["retrieval-dan"]["x"] == "epoch"
    # every run of the model, each with its role's test languages (en_only is validated on English alone)
    assert charts["retrieval-dan"]["y"] == {
        "data/metrics/retrieval/dan-none-all.history.tsv": ["val_rsum_en", "val_rsum_de"],
        "data/metrics/retrieval/dan-none-en_only.history.tsv": ["val_rsum_en"],
        "data/metrics/retrieval/dan-mmt_f-all.history.tsv": ["val_rsum_en", "val_rsum_de"],
        "data/metrics/retrieval/dan-mmt_f-en_only.history.tsv": ["val_rsum_en"],
    }
    assert {body["template"] for body in charts.values()} == {"learning_curve"}
    assert (REPO / ".dvc" / "plots" / "learning_curve.json").is_file()


def test_a_learning_curve_is_an_uncached_output_drawn_by_its_chart_alone() -> None:
    document = yaml.safe_load(render(build_pipeline(parse_params(real_tree()))))
    drawn = {path for chart in document["plots"] for body in chart.values() for path in body["y"]}
    groups = [document["stages"]["train_mmt"], document["stages"]["train_retrieval"]]
    uncached = {path for group in groups for item in group["foreach"].values() for path in item["uncached"]}
    assert drawn == {path for path in uncached if path.endswith(".history.tsv")}
    assert len(drawn) == 2 + 3  # both MMT directions of the pair; san x 3 variants x role all
    assert not [
        name for name, stage in document["stages"].items() if "plots" in stage or "plots" in stage.get("do", {})
    ]
