"""The generate and prepare flows end to end on a tiny synthetic dataset, under the Prefect test server."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pyarrow.compute as pc
import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

from corpora.prepared import read_parallel_tables, read_prepared
from flows import prepare
from tests.command_line import flags
from tests.flows.conftest import TinyDataset
from tests.flows.helpers import TINY_PAIRS, TINY_SPLITS, tiny_params_tree, write_params


async def _latest_artifact(key: str) -> object:
    async with get_client() as client:
        found = await client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key])))
    assert found, f"no Prefect artifact with key {key!r}"
    data = found[-1].data
    return json.loads(data) if isinstance(data, str) else data


@pytest.fixture(scope="module")
def prepared(tiny_dataset: TinyDataset) -> Path:
    return tiny_dataset.prepared


def test_prepare_writes_all_tables_with_expected_counts(prepared: Path) -> None:
    corpus = read_prepared(prepared)
    images_per_split = {split: pc.sum(pc.equal(corpus.images.column("split"), split)).as_py() for split in TINY_SPLITS}
    assert images_per_split == TINY_SPLITS
    n_images = sum(TINY_SPLITS.values())
    assert corpus.captions.num_rows == n_images * 4 * (5 + 1)  # 4 languages x (5 comparable + 1 translation)
    assert set(corpus.captions.column("lang").to_pylist()) == {"en", "de", "fr", "cs"}
    assert corpus.images.column("width").to_pylist() == [96] * n_images
    assert corpus.parallel == {}  # the text-only corpus is prepared on its own


def test_prepare_parallel_writes_one_file_per_pair(tiny_dataset: TinyDataset) -> None:
    """One `prepare_parallel@<target>` per pair, each writing its own file of the shared folder."""
    parallel = read_parallel_tables(tiny_dataset.parallel)
    assert sorted(parallel) == ["en-cs", "en-de", "en-fr"]
    assert parallel["en-de"].num_rows == sum(TINY_PAIRS.values())


def test_prepare_publishes_count_table_artifact(prepared: Path) -> None:
    rows = asyncio.run(_latest_artifact("prepare-synthetic-counts"))
    assert isinstance(rows, list) and len(rows) == 3 * 4  # splits x languages
    train_de = next(row for row in rows if row["split"] == "train" and row["lang"] == "de")
    assert train_de == {"split": "train", "lang": "de", "images": 6, "comparable": 30, "translation": 6}
    parallel = asyncio.run(_latest_artifact("prepare-parallel-fr"))
    assert {"pair": "en-fr", "split": "val", "pairs": TINY_PAIRS["val"]} in parallel
    assert len(parallel) == 3  # the pair's splits


def test_bad_params_stop_the_stage_with_the_key_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    params = write_params(tmp_path / "params.yaml", tiny_params_tree(format="coco"))
    with pytest.raises(SystemExit) as stopped:
        prepare.main(flags(params=params, corpus="synthetic", out="y"))
    assert stopped.value.code == 2
    assert "corpora.synthetic.format: got 'coco', allowed: multi30k, karpathy, scan" in capsys.readouterr().err
    params = write_params(tmp_path / "params.yaml", tiny_params_tree())
    with pytest.raises(SystemExit) as stopped:
        prepare.main(flags(params=params, corpus="flickr", out="y"))
    assert stopped.value.code == 2
    assert "unknown corpus 'flickr'; params.yaml corpora: synthetic" in capsys.readouterr().err


def test_missing_source_is_a_clear_error_and_writes_nothing(
    tmp_path: Path, prefect_api_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "no-such-dataset"
    params = write_params(tmp_path / "params.yaml", tiny_params_tree(raw=missing))
    with pytest.raises(SystemExit) as stopped:
        prepare.main(flags(params=params, corpus="synthetic", out=tmp_path / "prepared"))
    assert stopped.value.code == 2
    assert str(missing) in capsys.readouterr().err
    assert not (tmp_path / "prepared").exists()


def test_inspect_shows_every_corpus_and_the_parallel_text(
    tiny_dataset: TinyDataset, capsys: pytest.CaptureFixture[str]
) -> None:
    from mmtr import cli

    cli.main(["inspect", str(tiny_dataset.prepared.parent), "--samples", "1"])
    out = capsys.readouterr().out
    assert "== synthetic" in out and "== parallel" in out
    assert "syn000001#en#" in out and "en-de" in out
    cli.main(["inspect", str(tiny_dataset.prepared), "--samples", "1"])
    single = capsys.readouterr().out
    assert "==" not in single and "syn000001#de#" in single
    with pytest.raises(SystemExit):
        cli.main(["inspect", str(tiny_dataset.raw / "images")])
    assert "no prepared corpus here" in capsys.readouterr().err
