"""synthesis.to_pivot end to end on the tiny dataset: each system translates the German human train captions into
English, beside the forward and backward passes it leaves as they were, resumes from its finished shards, and the
variant mmt_to_pivot adds exactly those translations."""

from __future__ import annotations

from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from corpora.prepared import read_caption_variant, read_prepared
from flows import augment, synthesize
from mmt.synthesis import select_sources
from tests.command_line import flags
from tests.flows.conftest import TinyDataset
from tests.flows.helpers import tiny_params_tree, write_params

pytestmark = pytest.mark.slow


def test_the_targets_captions_are_translated_into_the_pivot_and_form_their_variant(
    trained: Path, tiny_dataset: TinyDataset, tmp_path: Path
) -> None:
    tree = tiny_params_tree()
    tree["synthesis"].update(to_pivot=True)
    tree["retrieval"].update(variants=["none", "mmt_to_pivot"])
    params = write_params(tmp_path / "to-pivot.yaml", tree)
    out = tmp_path / "synthesized" / "de.parquet"
    stage = flags(
        params=params,
        target="de",
        prepared=tiny_dataset.prepared,
        store=trained / "features" / "compact",
        models=trained / "models",
        work=trained / "work",  # the two-hop run's shards of hops 1 and 2 are reused
        out=out,
        metrics=tmp_path / "synthesis.json",
    )
    synthesize.main(stage)
    table = pq.read_table(out)
    to_pivot = table.filter(pc.and_(pc.equal(table.column("hop"), 1), pc.equal(table.column("lang"), "en")))
    assert table.filter(
        pc.invert(pc.and_(pc.equal(table.column("hop"), 1), pc.equal(table.column("lang"), "en")))
    ).equals(pq.read_table(trained / "synthesized" / "de.parquet"))
    captions = read_prepared(tiny_dataset.prepared).captions
    german = select_sources(captions, lang="de", split="train", kinds=["comparable"])
    assert german.num_rows == 6 * 5  # 6 train images x 5 comparable German captions
    for origin in ("mmt", "mt"):
        rows = to_pivot.filter(pc.equal(to_pivot.column("origin"), origin))
        assert rows.column("parent_id").to_pylist() == german.column("caption_id").to_pylist()
        assert rows.column("image_id").to_pylist() == german.column("image_id").to_pylist()
        assert rows.column("caption_id").to_pylist() == [
            f"{parent}>{origin}-de-en" for parent in german["caption_id"].to_pylist()
        ]
        assert set(rows.column("system").to_pylist()) == {f"{origin}-de-en"}
        assert set(rows.column("split").to_pylist()) == {"train"} and set(rows.column("kind").to_pylist()) == {
            "comparable"
        }

    shards = sorted((trained / "work").rglob("shard-*.parquet"))
    written = {path: path.stat().st_mtime_ns for path in shards}
    synthesize.main(stage)  # a rerun translates nothing again: every shard is finished
    assert {path: path.stat().st_mtime_ns for path in shards} == written
    assert sorted((trained / "work").rglob("shard-*.parquet")) == shards
    assert pq.read_table(out).equals(table)

    augment.main(
        flags(
            params=params,
            prepared=tiny_dataset.prepared,
            synthesized=tmp_path / "synthesized",
            out=tmp_path / "augmented",
            metrics=tmp_path / "augment.json",
        )
    )
    human = read_caption_variant(tmp_path / "augmented" / "none")
    variant = read_caption_variant(tmp_path / "augmented" / "mmt_to_pivot")
    added = variant.filter(pc.not_equal(variant.column("origin"), "human"))
    assert variant.num_rows == human.num_rows + 30
    assert sorted(added.column("caption_id").to_pylist()) == sorted(
        f"{parent}>mmt-de-en" for parent in german["caption_id"].to_pylist()
    )
    assert set(added.column("lang").to_pylist()) == {"en"} and set(added.column("hop").to_pylist()) == {1}
