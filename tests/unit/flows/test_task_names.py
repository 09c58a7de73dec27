"""Task runs are named for what they do (the Prefect UI lists them by name), from their parameters: the callables
Prefect calls with ``parameters`` (its ``task_run_name`` contract), through each task's own option."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest

from mmt.synthesis import SynthesisShard, SynthesisTask
from tasks import mmt, retrieval


def run_name(task: Any, **parameters: Any) -> str:
    """The name Prefect gives a run of ``task`` called with ``parameters``."""
    name = task.task_run_name
    assert callable(name), f"{task.name} has no task_run_name callable"
    return str(name(parameters=parameters))


def test_mmt_task_runs_name_the_system_and_the_direction() -> None:
    en_de, de_en = SimpleNamespace(src="en", tgt="de"), SimpleNamespace(src="de", tgt="en")
    assert run_name(mmt.train_subwords, src="en", tgt="de") == "subwords en-de"
    assert run_name(mmt.pretrain_direction, src="de", tgt="en") == "pretrain de-en"
    assert run_name(mmt.train_translation_system, backend="mmt", request=en_de) == "train MMT en-de"
    assert run_name(mmt.train_translation_system, backend="text-only", request=de_en) == "train MT de-en (text-only)"
    assert run_name(mmt.test_translation_system, folder="models/.staged.ab12.tmp/mt-de-en") == "test MT de-en"
    assert run_name(mmt.train_direction, job=de_en) == "direction de-en"
    assert run_name(mmt.translate_texts, folder="models/mt-de-en") == "translate queries (MT de-en)"
    assert run_name(mmt.compare_systems, metrics_path="metrics/mmt-vs-mt-en-de.json") == "compare mmt-vs-mt-en-de"


def test_a_synthesis_shard_names_its_number_system_and_hop() -> None:
    shard = SynthesisShard(pa.table({"text": ["a"]}), Path("work/0f3a/shard-00003.parquet"))
    task = SynthesisTask("mmt-de-en", "mmt", "en", 2, "0" * 64)
    assert run_name(mmt.translate_shard, shard=shard, synthesis=task, system=None) == (
        "translate shard-00003 (MMT de-en, hop 2)"
    )


@pytest.mark.parametrize(
    ("task", "verb"), [(retrieval.train_retrieval_model, "train"), (retrieval.evaluate_retrieval_model, "test")]
)
def test_retrieval_task_runs_name_the_run_and_the_seed(task: Any, verb: str) -> None:
    assert run_name(task, run="san-mmt_f-all", seed=1, out_dir="m/.san.x1y2.tmp") == f"{verb} san-mmt_f-all seed 1"


def test_system_labels_read_the_folder_name() -> None:
    assert mmt.system_label("data/models/mmt/mmt-en-de") == "MMT en-de"
    assert mmt.system_label(Path("mt-fr-en")) == "MT fr-en"


def test_data_and_feature_task_runs_name_their_pair_file_or_shard() -> None:
    from features.extraction import Shard
    from tasks import data, features

    assert run_name(data.prepare_parallel_pair, pivot="en", target="de") == "prepare parallel en-de"
    assert run_name(features.extract_shard_task, shard=Shard(7, ())) == "extract shard-00007"


def test_an_export_task_run_names_its_variant() -> None:
    from tasks import export

    assert run_name(export.export_caption_variant, card=SimpleNamespace(variant="mmt_f")) == "export mmt_f"
