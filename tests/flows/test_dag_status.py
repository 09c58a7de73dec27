"""The DAG on real corpora, checked with DVC itself: a real-layout tree (Multi30K text over Flickr30K images, the
Flickr30K Karpathy JSON over the same images, WMT-style text, bottom-up TSV or SCAN precomp features), every stage
recorded in dvc.lock as if it had run (`dvc commit`), then one edit at a time and `dvc status`: only the stages the
edit touches are out of date.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from mmtr.dag import build_pipeline
from mmtr.dvc_yaml import update_dvc_yaml
from mmtr.params import load_params
from tests.flows.helpers import REPO, write_params

pytestmark = pytest.mark.slow

CODE = ("common", "corpora", "features", "mmt", "retrieval", "report", "mmtr", "tasks", "flows")
IMAGES = [f"{1000 + n}.jpg" for n in range(6)]


def write_real_layout(root: Path, languages: tuple[str, ...] = ("en", "de", "it")) -> None:
    """Small files in the layouts of the public releases (their contents are never read: no stage runs)."""
    images = root / "data/raw/flickr30k-images"
    images.mkdir(parents=True)
    for name in IMAGES:
        (images / name).write_bytes(b"\xff\xd8" + name.encode())
    multi30k = root / "data/raw/multi30k"
    for split, names in (("train", IMAGES[:4]), ("val", IMAGES[4:5]), ("test_2016_flickr", IMAGES[5:])):
        (multi30k / "task1/image_splits").mkdir(parents=True, exist_ok=True)
        (multi30k / f"task1/image_splits/{split}.txt").write_text("\n".join(names) + "\n")
        (multi30k / "task1/raw").mkdir(parents=True, exist_ok=True)
        for lang in languages:
            (multi30k / f"task1/raw/{split}.{lang}").write_text("".join(f"a {lang} caption\n" for _ in names))
    karpathy = {
        "images": [
            {"filename": name, "split": "train" if n < 4 else "val" if n == 4 else "test", "sentences": []}
            for n, name in enumerate(IMAGES)
        ]
    }
    (root / "data/raw/dataset_flickr30k.json").write_text(json.dumps(karpathy))
    for lang in languages[1:]:
        pair = root / f"data/raw/wmt/en-{lang}"
        pair.mkdir(parents=True)
        for split in ("train", "val", "test"):
            for side in ("en", lang):
                (pair / f"{split}.{side}").write_text(f"a {side} sentence\n")
    inputs = root / "data/raw/feature-inputs"
    inputs.mkdir(parents=True)
    (inputs / "trainval_resnet101_faster_rcnn_genome_36.tsv").write_text("image_id\tboxes\n")
    for stem in ("train", "dev", "test"):
        (inputs / f"{stem}_ims.npy").write_bytes(b"\x93NUMPY")
        (inputs / f"{stem}_caps.txt").write_text("a caption\n")


def real_params(extractor: str = "butd-tsv") -> dict[str, Any]:
    tree: dict[str, Any] = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
    images = "data/raw/flickr30k-images"
    tree["corpora"] = {
        "multi30k": {
            "format": "multi30k",
            "dataset": "multi30k",
            "source": "data/raw/multi30k",
            "images": images,
            "boxes": "data/raw/boxes.parquet",
        },
        "flickr30k": {
            "format": "karpathy",
            "dataset": "flickr30k",
            "source": "data/raw/dataset_flickr30k.json",
            "images": images,
            "boxes": "data/raw/boxes.parquet",
        },
    }
    tree["corpus_roles"] = {"mmt_finetune": "multi30k", "target": "flickr30k"}
    tree["paths"]["parallel"] = "data/raw/wmt"
    tree["prepare"]["multi30k"]["tasks"] = ["task1"]
    tree["prepare"]["multi30k"]["splits"] = {
        "train": {"task1": "train", "task2": None},
        "val": {"task1": "val", "task2": None},
        "test": {"task1": "test_2016_flickr", "task2": None},
    }
    tree["features"]["extractor"] = extractor
    tree["features"]["regions"].update(mode="fixed", count=36)
    tree["features"]["probe"] = False
    tree["features"]["imported"]["tsv_files"] = ["trainval_resnet101_faster_rcnn_genome_36.tsv"]
    tree["languages"]["targets"] = ["de"]
    tree["mmt"]["targets"] = ["de"]
    tree["retrieval"]["models"] = ["san"]
    tree["retrieval"]["variants"] = ["none", "mmt_f", "mmt_fb"]
    tree["retrieval"]["languages"] = ["en", "de"]
    tree["synthesis"]["hops"] = 2
    return tree


def placeholder_outputs(root: Path) -> None:
    """Every output the DAG declares, as a small file or folder (the DVC record of a run, without the run)."""
    pipeline = build_pipeline(load_params(root / "params.yaml"), root=root)
    for stages in pipeline.groups.values():
        for stage in stages.values():
            for out in (*stage.outs, *stage.uncached, *stage.metrics):
                path = root / out
                if path.exists():
                    continue
                if path.suffix in (".parquet", ".json", ".tsv"):
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text("{}\n" if path.suffix == ".json" else "x\n")
                else:
                    path.mkdir(parents=True, exist_ok=True)
                    for name in ("images.parquet", "captions.parquet"):  # a prepared folder's tables, or any
                        (path / name).write_text(out)
    for variant in ("none", "mmt_f", "mmt_fb"):  # the files a retrieval run reads, one per language
        (root / f"data/augmented/{variant}").mkdir(parents=True, exist_ok=True)
        for lang in ("en", "de"):
            (root / f"data/augmented/{variant}/captions.{lang}.parquet").write_text(f"{variant} {lang}\n")


class Project:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
        self.env.pop("PYTHONPATH", None)

    def dvc(self, *args: str) -> str:
        done = subprocess.run(["dvc", *args], cwd=self.root, env=self.env, capture_output=True, text=True, check=False)
        assert done.returncode == 0, f"dvc {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
        return done.stdout

    def edit(self, tree: dict[str, Any]) -> str:
        """Write the params and the DAG they give (as `mmtr dag` does)."""
        write_params(self.root / "params.yaml", tree)
        return update_dvc_yaml(self.root / "params.yaml")

    def stages(self) -> list[str]:
        return [line.split()[0] for line in self.dvc("stage", "list").splitlines() if line.strip()]

    def out_of_date(self) -> set[str]:
        """The stages `dvc status` reports (changed deps, params, outputs, or never recorded)."""
        return set(json.loads(self.dvc("status", "--json") or "{}"))

    def record(self, *stages: str) -> None:
        """Record ``stages`` (all: none given) in dvc.lock as they are now, as a finished run would."""
        self.dvc("commit", "--force", *stages)


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Project]:
    for name in CODE:
        shutil.copytree(REPO / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(REPO / ".dvcignore", tmp_path / ".dvcignore")
    write_real_layout(tmp_path)
    subprocess.run([sys.executable, "-m", "dvc", "init", "-q", "--no-scm"], cwd=tmp_path, check=True)
    project = Project(tmp_path)
    project.edit(real_params())
    placeholder_outputs(tmp_path)
    project.record()
    yield project


def test_real_corpora_have_no_generate_stage_and_share_one_feature_store(project: Project) -> None:
    stages = project.stages()
    assert "generate" not in stages
    assert [stage for stage in stages if stage.startswith("features@")] == ["features@multi30k"]
    assert project.out_of_date() == set()
    lock = yaml.safe_load((project.root / "dvc.lock").read_text(encoding="utf-8"))["stages"]
    deps = [dep["path"] for dep in lock["features@multi30k"]["deps"]]
    # both corpora's images, the TSV file the importer reads, not the whole feature-inputs folder
    assert "data/prepared/multi30k/images.parquet" in deps and "data/prepared/flickr30k/images.parquet" in deps
    assert "data/raw/feature-inputs/trainval_resnet101_faster_rcnn_genome_36.tsv" in deps
    every_dep = [dep["path"] for stage in lock.values() for dep in stage.get("deps", [])]
    assert "data/raw/feature-inputs" not in deps and not [dep for dep in every_dep if "synthetic" in dep]
    train_mmt = [dep["path"] for dep in lock["train_mmt@de"]["deps"]]
    assert "data/prepared/parallel/en-de.parquet" in train_mmt and "data/raw/mt-models" not in train_mmt


def test_unrelated_files_and_settings_rerun_nothing(project: Project) -> None:
    inputs = project.root / "data/raw/feature-inputs"
    (inputs / "faster_rcnn_from_caffe_attr.pkl").write_bytes(b"a COCO run's checkpoint")
    (inputs / "testall_ims.npy").write_bytes(b"another corpus's features")
    (project.root / "data/raw/mt-models/opus-mt-en-fr").mkdir(parents=True)
    (project.root / "data/raw/mt-models/opus-mt-en-fr/config.json").write_text("{}")
    tree = real_params()
    tree["features"]["butd"]["test_scale"] = 800  # another extractor's setting
    tree["features"]["compact"]["training"]["epochs"] = 3
    tree["retrieval"]["configs"]["dan"]["hidden"] = 64  # a model no run trains
    tree["retrieval"]["custom_roles"] = {"en_only": {"train": ["en:human"], "test": ["en"]}}  # a role no run has
    tree["languages"]["targets"] = ["de", "fr"]  # listed, but no MMT for it
    project.edit(tree)
    assert project.out_of_date() == set()


def test_a_new_language_runs_its_own_stages_alone(project: Project) -> None:
    tree = real_params()
    tree["languages"]["targets"] = ["de", "it"]  # Italian: no built-in grammar, and none is needed here
    tree["mmt"]["targets"] = ["de", "it"]
    message = project.edit(tree)
    assert "+prepare_parallel@it" in message and "+train_mmt@it" in message and "+synthesize@it" in message
    assert project.out_of_date() == {
        "prepare_parallel@it",
        "train_mmt@it",
        "synthesize@it",
        "augment",  # its params (mmt.targets) and deps (the new synthesized file)
        "export",
        "report",
    }
    # once they ran: augment added the Italian files and rewrote the back-translated English of mmt_fb (f+b
    # through Italian too); a run reads its variant's files of retrieval.languages (en, de) alone
    placeholder_outputs(project.root)
    for variant in ("none", "mmt_f", "mmt_fb"):
        (project.root / f"data/augmented/{variant}/captions.it.parquet").write_text("it\n")
    (project.root / "data/augmented/mmt_fb/captions.en.parquet").write_text("mmt_fb en, back through de and it\n")
    project.record("prepare_parallel@it", "train_mmt@it", "synthesize@it", "augment", "export", "report")
    assert project.out_of_date() == {"train_retrieval@san-mmt_fb-all"}


def test_a_setting_reruns_the_stages_that_read_it(project: Project) -> None:
    tree = real_params()
    tree["retrieval"]["configs"]["san"]["hidden"] = 128
    tree["features"]["imported"]["tsv_files"] = ["trainval_resnet101_faster_rcnn_genome_36.tsv"]
    tree["prepare"]["karpathy"]["restval"] = "drop"
    project.edit(tree)
    runs = {f"train_retrieval@san-{variant}-all" for variant in ("none", "mmt_f", "mmt_fb")}
    assert project.out_of_date() == {"prepare@flickr30k", *runs}


def test_scan_precomp_features_depend_on_their_split_files(project: Project) -> None:
    project.edit(real_params("scan-npy"))
    runs = {f"train_retrieval@san-{variant}-all" for variant in ("none", "mmt_f", "mmt_fb")}
    # another extractor: another store (<features>/multi30k/scan-npy), so every stage that reads regions
    assert project.out_of_date() == {"features@multi30k", "train_mmt@de", "synthesize@de", "export", *runs}
    dvc_yaml = yaml.safe_load((project.root / "dvc.yaml").read_text(encoding="utf-8"))
    deps = dvc_yaml["stages"]["features"]["foreach"]["multi30k"]["deps"]
    inputs = "data/raw/feature-inputs"
    # no ids files in this folder: the importer checks the captions files instead, so they are read
    assert [dep for dep in deps if dep.startswith(inputs)] == [
        f"{inputs}/{stem}_{kind}" for stem in ("train", "dev", "test") for kind in ("ims.npy", "caps.txt")
    ]
    assert "data/prepared/multi30k/captions.parquet" in deps  # what the captions files are checked against
    for stem in ("train", "dev", "test"):  # a release with ids files (COCO precomp): those are read instead
        (project.root / inputs / f"{stem}_ids.txt").write_text("1\n")
    assert "written" in project.edit(real_params("scan-npy"))
    dvc_yaml = yaml.safe_load((project.root / "dvc.yaml").read_text(encoding="utf-8"))
    deps = dvc_yaml["stages"]["features"]["foreach"]["multi30k"]["deps"]
    assert f"{inputs}/dev_ids.txt" in deps and f"{inputs}/dev_caps.txt" not in deps


def test_a_stage_refuses_a_stale_dag(project: Project) -> None:
    tree = real_params()
    tree["mmt"]["targets"] = []
    tree["retrieval"]["variants"] = ["none"]
    write_params(project.root / "params.yaml", tree)  # and no `mmtr dag`
    arguments = ["--metrics", "m", "--synthesized", "s", "--prepared", "p", "--corpus", "flickr30k", "--out", "o"]
    arguments += ["--diversity", "d", "--round_trips", "r", "--translation", "t", "--significance", "x.json"]
    done = subprocess.run(
        [sys.executable, "-m", "flows.report", "--params", "params.yaml", *arguments],
        cwd=project.root,
        env={**project.env, "DVC_STAGE": "report"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert "dvc.yaml was not generated from params.yaml as it is now" in done.stderr
    assert "mmtr dag --params params.yaml" in done.stderr
