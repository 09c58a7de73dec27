"""Synthesis shards on a Dask cluster (two worker processes) give the same files as the local runner."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows import synthesize
from tests.command_line import flags
from tests.flows.conftest import TinyDataset
from tests.flows.helpers import tiny_params_tree, write_params

pytestmark = pytest.mark.slow

PASSES = 4  # mmt and mt, each forward and back (synthesis.hops 2)
SHARDS_PER_PASS = 3  # 6 train images x 5 comparable English captions, synthesis.shard_size 10 (tests/flows/helpers)


def run_synthesize(dataset: TinyDataset, trained: Path, root: Path, params: Path) -> None:
    """The `synthesize@de` stage with the `trained` fixture's systems and features; every output under ``root``."""
    synthesize.main(
        flags(
            params=params,
            target="de",
            prepared=dataset.prepared,
            store=trained / "features" / "compact",
            models=trained / "models",
            work=root / "work",
            out=root / "synthesized" / "de.parquet",
            metrics=root / "metrics" / "synthesis" / "de.json",
        )
    )


def tree_bytes(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` by its relative path."""
    return {path.relative_to(root).as_posix(): path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file()}


def test_dask_runner_matches_local(tiny_dataset: TinyDataset, trained: Path, tmp_path: Path, scheduler: str) -> None:
    distributed = pytest.importorskip("distributed")
    run_synthesize(tiny_dataset, trained, tmp_path / "local", tiny_dataset.params)
    tree = tiny_params_tree(raw=tiny_dataset.raw)
    tree["runner"].update(kind="dask", address=scheduler)
    params = write_params(tmp_path / "dask.yaml", tree)
    # A client of our own records the scheduler's task stream: which worker ran which task
    with distributed.Client(scheduler, set_as_default=False) as client:
        workers = set(client.scheduler_info()["workers"])
        with distributed.get_task_stream(client=client) as stream:
            run_synthesize(tiny_dataset, trained, tmp_path / "dask", params)
    local, on_dask = tree_bytes(tmp_path / "local"), tree_bytes(tmp_path / "dask")
    shards = [name for name in local if name.startswith("work/") and name.endswith(".parquet")]
    assert len(shards) == PASSES * SHARDS_PER_PASS
    assert {"synthesized/de.parquet", "metrics/synthesis/de.json"} <= set(local)
    assert sorted(on_dask) == sorted(local)
    for name, content in local.items():
        assert on_dask[name] == content, name
    # Every shard ran as a Dask task on the cluster's workers, and both workers took some
    ran = [task for task in stream.data if task["key"].startswith("translate_shard")]
    assert len(ran) == len(shards), sorted({task["key"].rsplit("-", 1)[0] for task in stream.data})
    assert {task["worker"] for task in ran} == workers
