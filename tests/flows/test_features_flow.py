"""The features stage end to end on the tiny dataset: store, metrics and probes, bad-image policies."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from features.store import FeatureStore
from flows import features
from tests.command_line import flags
from tests.flows.conftest import TinyDataset
from tests.flows.helpers import tiny_params_tree, write_params


def run_features(dataset: TinyDataset, root: Path, images: Path, params: Path) -> tuple[Path, Path]:
    out, metrics = root / "features" / "compact", root / "metrics" / "compact.json"
    features.main(
        flags(
            params=params,
            prepared=dataset.prepared,
            images=images,
            boxes=dataset.raw / "objects.parquet",
            inputs=root / "inputs",
            work=root / "work",
            out=out,
            metrics=metrics,
        )
    )
    return out, metrics


def test_compact_features_store_and_probe_metrics(tiny_dataset: TinyDataset, tmp_path: Path) -> None:
    out, metrics_path = run_features(tiny_dataset, tmp_path, tiny_dataset.raw / "images", tiny_dataset.params)
    store = FeatureStore.open(out)
    assert len(store) == 12 and store.dim == 16 and store.max_regions == 8
    assert store.meta["extractor"] == "compact" and len(store.meta["checkpoint_sha256"]) == 64
    metrics = json.loads(metrics_path.read_text())
    assert metrics["images"] == 12 and metrics["bad_images"] == 0
    assert metrics["regions"] == int(store.num_regions.sum()) > 12
    assert set(metrics["probe"]) == {"shape", "colour", "size", "label"}
    assert 0 <= metrics["probe"]["colour"]["accuracy"] <= 100
    assert list((tmp_path / "work").glob("*/shards")) == []  # shards are removed once the store is assembled


def test_bad_image_fails_naming_it_or_is_skipped(
    tiny_dataset: TinyDataset, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    images = tmp_path / "images"
    shutil.copytree(tiny_dataset.raw / "images", images)
    (images / "syn000002.png").write_bytes(b"not a png")
    (images / "syn000011.png").unlink()
    with pytest.raises(SystemExit) as stopped:
        run_features(tiny_dataset, tmp_path / "fail", images, tiny_dataset.params)
    assert stopped.value.code == 2
    error = capsys.readouterr().err
    assert "2 bad image(s)" in error and "syn000002.png: not a readable image" in error
    assert "syn000011.png: missing" in error
    assert not (tmp_path / "fail" / "features" / "compact").exists()

    skip = write_params(tmp_path / "skip.yaml", tiny_params_tree(features={"on_bad_image": "skip", "probe": False}))
    out, metrics_path = run_features(tiny_dataset, tmp_path / "skip", images, skip)
    store = FeatureStore.open(out)
    errors = dict(zip(store.image_ids, store.index.column("error").to_pylist(), strict=True))
    assert errors["syn000011"] == "missing" and errors["syn000001"] is None
    assert json.loads(metrics_path.read_text())["bad_images"] == 2


def test_butd_extractor_from_a_checkpoint_file(tiny_dataset: TinyDataset, tmp_path: Path) -> None:
    """The real detector path of the stage: a (tiny, random) MILVLG-layout checkpoint, 5 fixed regions."""
    from tests.unit.features.bottom_up.helpers import tiny_model
    from tests.unit.features.bottom_up.test_weights import milvlg_tensors

    (tmp_path / "inputs").mkdir()
    torch.save(milvlg_tensors(tiny_model()), tmp_path / "inputs" / "tiny-bua.pth")
    tree = tiny_params_tree(features={"extractor": "butd", "probe": False})
    tree["features"]["regions"].update(mode="fixed", count=5)
    tree["features"]["butd"].update(checkpoint="tiny-bua.pth", test_scale=96, max_size=160)
    params = write_params(tmp_path / "butd.yaml", tree)
    out, metrics_path = run_features(tiny_dataset, tmp_path, tiny_dataset.raw / "images", params)
    out = out.parent / "compact"  # run_features names the folder; the extractor inside is what counts
    store = FeatureStore.open(out)
    assert store.meta["extractor"] == "butd-r101" and store.max_regions == 5
    assert store.num_regions.tolist() == [5] * 12
    _, mask, boxes = store.batch(np.arange(12))
    assert mask.all() and (boxes[..., 2] > boxes[..., 0]).all() and (boxes[..., 2] <= 96).all()
    assert json.loads(metrics_path.read_text())["regions"] == 60
