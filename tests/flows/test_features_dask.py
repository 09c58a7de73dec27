"""Feature shards on a Dask cluster (two worker processes) give the same store as the local runner."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.flows.conftest import TinyDataset
from tests.flows.helpers import tiny_params_tree, write_params
from tests.flows.test_features_flow import run_features

pytestmark = pytest.mark.slow


def test_dask_runner_matches_local(tiny_dataset: TinyDataset, tmp_path: Path, scheduler: str) -> None:
    local, _ = run_features(tiny_dataset, tmp_path / "local", tiny_dataset.raw / "images", tiny_dataset.params)
    tree = tiny_params_tree()
    tree["runner"].update(kind="dask", address=scheduler)
    params = write_params(tmp_path / "dask.yaml", tree)
    on_dask, _ = run_features(tiny_dataset, tmp_path / "dask", tiny_dataset.raw / "images", params)
    for name in ("regions.npy", "boxes.npy", "index.parquet", "meta.json"):
        assert (on_dask / name).read_bytes() == (local / name).read_bytes(), name
