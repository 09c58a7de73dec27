"""Real text through the stages: Multi30K task 1 (no images) and a WMT sample, on the text-only route.

`prepare` reads the real Multi30K layout without images, `prepare_parallel` the WMT-style text, `train_mmt`
pre-trains on it and fine-tunes the text-only MT system on the Multi30K translations (mmt.systems: [mt]), and
`synthesize` translates the English training captions into German and back: the stages, not the bench.
Two thousand training sentences keep it to two minutes; the full command is in the README ("Real text").
"""

from __future__ import annotations

import gzip
import json
from itertools import islice
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from common.metrics_files import read_metrics
from tests.command_line import flags
from tests.flows.helpers import tiny_params_tree, write_params

pytestmark = pytest.mark.slow

TRAIN_SENTENCES, VAL_SENTENCES, WMT_SENTENCES = 2000, 300, 2000


def _head_gz(source: Path, target: Path, lines: int | None) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(source, "rt", encoding="utf-8") as reader, gzip.open(target, "wt", encoding="utf-8") as writer:
        writer.writelines(islice(reader, lines))


def _head(source: Path, target: Path, lines: int | None) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    with source.open(encoding="utf-8") as reader:
        target.write_text("".join(islice(reader, lines)), encoding="utf-8")


def multi30k_slice(shared: Path, out: Path) -> Path:
    """Task 1 of Multi30K (en, de), the first sentences of train and val and the whole test2016 split."""
    task1 = shared / "multi30k" / "task1"
    for stem, lines in (("train", TRAIN_SENTENCES), ("val", VAL_SENTENCES), ("test_2016_flickr", None)):
        _head(task1 / "image_splits" / f"{stem}.txt", out / "task1" / "image_splits" / f"{stem}.txt", lines)
        for lang in ("en", "de"):
            _head_gz(task1 / "raw" / f"{stem}.{lang}.gz", out / "task1" / "raw" / f"{stem}.{lang}.gz", lines)
    return out


def wmt_sample(shared: Path, out: Path) -> Path:
    """The WMT sample laid out as the parallel corpus reader expects: en-de/<split>.<lang>."""
    sample = shared / "wmt-sample" / "opennmt-toy-ende"
    for split in ("train", "val", "test"):
        _head(sample / f"src-{split}.txt", out / "en-de" / f"{split}.en", WMT_SENTENCES)
        _head(sample / f"tgt-{split}.txt", out / "en-de" / f"{split}.de", WMT_SENTENCES)
    return out


def test_text_only_mt_trains_and_translates_real_multi30k(
    shared_data: Path, tmp_path: Path, prefect_api_url: str
) -> None:
    from flows import prepare, prepare_parallel, synthesize, train_mmt

    source, parallel = multi30k_slice(shared_data, tmp_path / "multi30k"), wmt_sample(shared_data, tmp_path / "wmt")
    tree = tiny_params_tree()
    tree["languages"]["targets"] = ["de"]
    no_images = str(tmp_path / "no-images")
    tree["corpora"] = {
        "multi30k": {
            "format": "multi30k",
            "dataset": "multi30k",
            "source": str(source),
            "images": no_images,
            "boxes": no_images,
        }
    }
    tree["corpus_roles"] = {"mmt_finetune": "multi30k", "target": "multi30k"}
    tree["prepare"]["read_image_sizes"] = False
    tree["prepare"]["text"] = {"control_characters": "remove"}  # the WMT sample holds C1 controls
    tree["prepare"]["multi30k"].update(tasks=["task1"])
    tree["prepare"]["multi30k"]["splits"]["test"] = {"task1": "test_2016_flickr", "task2": "test"}
    tree["mmt"].update(systems=["mt"], beam=2)
    tree["mmt"]["text"].update(vocab_size=1000, lowercase=True)
    tree["mmt"]["model"].update(emb_dim=64, hidden=128)
    tree["mmt"]["pretrain"].update(epochs=1, batch_size=64)
    tree["mmt"]["finetune"].update(epochs=6, batch_size=32, lr=0.002, patience=6)
    tree["synthesis"].update(kinds=["translation"], shard_size=1000, hops=2)
    tree["distributed"]["parallel_directions"] = True  # the text-only route through the process pool, and faster
    tree["retrieval"].update(variants=["none", "mt_f", "mt_fb"])
    params = str(write_params(tmp_path / "params.yaml", tree))

    prepared, prepared_parallel, models = tmp_path / "prepared", tmp_path / "parallel", tmp_path / "models"
    prepare.main(flags(params=params, corpus="multi30k", out=prepared))
    prepare_parallel.main(flags(params=params, target="de", parallel=parallel, out=prepared_parallel / "en-de.parquet"))
    images = pq.read_table(prepared / "images.parquet")
    assert images.num_rows == TRAIN_SENTENCES + VAL_SENTENCES + 1000
    assert images.column("width").null_count == images.num_rows  # no image was opened

    common = flags(params=params, target="de", prepared=prepared, models=models)
    train_mmt.main(
        [*common, *flags(parallel=prepared_parallel, mt_models=tmp_path / "mt-models", metrics=tmp_path / "metrics")]
    )
    assert sorted(path.name for path in models.iterdir()) == ["mmt-de-en", "mmt-en-de", "mt-de-en", "mt-en-de"]
    assert not (models / "mmt-en-de" / "finetune.safetensors").exists(), "the MMT needs images: not trained here"
    for name in ("mt-en-de", "mt-de-en"):
        metrics = read_metrics(tmp_path / "metrics" / f"{name}.json")
        assert metrics["test_sentences"] == 1000, f"{name}: scored on the whole test2016 split"
        assert metrics["bleu"] > 4.0, f"{name}: BLEU {metrics['bleu']:.2f} on test2016 after training on real text"

    synthesize.main(
        [
            *common,
            *flags(work=tmp_path / "work", out=tmp_path / "synthesized.parquet", metrics=tmp_path / "round-trips.json"),
        ]
    )
    synthesized = pq.read_table(tmp_path / "synthesized.parquet").to_pylist()
    assert {row["origin"] for row in synthesized} == {"mt"}
    assert [sum(row["hop"] == hop for row in synthesized) for hop in (1, 2)] == [TRAIN_SENTENCES] * 2
    assert {row["lang"] for row in synthesized if row["hop"] == 1} == {"de"}
    assert {row["lang"] for row in synthesized if row["hop"] == 2} == {"en"}
    assert sum(bool(row["text"].strip()) for row in synthesized) == len(synthesized)
    round_trips = json.loads((tmp_path / "round-trips.json").read_text(encoding="utf-8"))
    assert round_trips["mt"]["hop2"]["captions"] == TRAIN_SENTENCES
    assert round_trips["mt"]["hop2"]["changed"] > 0.5, "a weak real-text system rewrites most round trips"
