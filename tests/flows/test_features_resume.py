"""Kill the features stage mid-extraction (SIGKILL), rerun it: finished shards are kept and the final store is
byte-identical to that of an uninterrupted run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from corpora.languages import Languages
from corpora.multi30k import Multi30kSplit, read_multi30k
from corpora.prepared import write_prepared
from corpora.synthetic import SyntheticConfig, generate
from corpora.synthetic.config import SplitCounts
from tests.command_line import flags
from tests.flows.helpers import REPO, tiny_params_tree, write_params

pytestmark = pytest.mark.slow

IMAGES = 60
STORE_FILES = ("regions.npy", "boxes.npy", "index.parquet", "meta.json")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("resume")
    config = SyntheticConfig(image_size=64, splits=SplitCounts(IMAGES - 10, 5, 5), parallel_pairs=SplitCounts(1, 1, 1))
    generate(config, root / "raw", seed=0, languages=Languages("en", ("de", "fr", "cs")))
    splits = {split: Multi30kSplit(split, split) for split in ("train", "val", "test")}
    corpus = read_multi30k(root / "raw", languages=["en"], splits=splits, image_root=root / "raw" / "images")
    write_prepared(corpus, root / "prepared")
    tree = tiny_params_tree(features={"shard_size": 1, "batch_size": 1, "probe": False})
    tree["features"]["compact"]["training"].update(epochs=1)
    write_params(root / "params.yaml", tree)
    return root


def command(root: Path, name: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "flows.features",
        *flags(
            params=root / "params.yaml",
            prepared=root / "prepared",
            images=root / "raw" / "images",
            boxes=root / "raw" / "objects.parquet",
            inputs=root / "inputs",
            work=root / f"work-{name}",
            out=root / f"store-{name}",
            metrics=root / f"metrics-{name}.json",
        ),
    ]


def receipts(root: Path, name: str) -> int:
    return len(list((root / f"work-{name}").glob("*/done/shard-*.json")))


def test_killed_run_resumes_to_the_same_store(dataset: Path, prefect_api_url: str) -> None:
    env = {**os.environ, "PREFECT_API_URL": prefect_api_url}
    subprocess.run(command(dataset, "whole"), cwd=REPO, env=env, check=True, capture_output=True)

    killed = subprocess.Popen(
        command(dataset, "killed"),
        cwd=REPO,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 180
    while receipts(dataset, "killed") < 5 and killed.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    os.killpg(killed.pid, signal.SIGKILL)
    killed.wait()
    done_at_kill = receipts(dataset, "killed")
    assert 5 <= done_at_kill < IMAGES, f"the kill came too late to test resuming ({done_at_kill} shards done)"
    assert not (dataset / "store-killed").exists()

    resumed = subprocess.run(command(dataset, "killed"), cwd=REPO, env=env, check=True, capture_output=True, text=True)
    assert resumed.returncode == 0
    for name in STORE_FILES:
        whole = (dataset / "store-whole" / name).read_bytes()
        assert (dataset / "store-killed" / name).read_bytes() == whole, name
    assert (dataset / "metrics-killed.json").read_bytes() == (dataset / "metrics-whole.json").read_bytes()
