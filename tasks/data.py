"""Prefect tasks for the data stages: thin wrappers over ``corpora`` that add logging and artifacts."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from uuid import UUID

import pyarrow as pa
import pyarrow.compute as pc
from prefect import get_run_logger, task
from prefect.artifacts import create_progress_artifact, create_table_artifact, update_progress_artifact
from prefect.cache_policies import NO_CACHE
from tqdm import tqdm

from corpora.karpathy import read_karpathy
from corpora.multi30k import Multi30kSplit, read_multi30k
from corpora.prepared import Corpus, write_prepared
from corpora.scan_captions import read_scan_captions
from corpora.synthetic import GenerationSummary, SyntheticConfig, generate
from corpora.wmt import read_parallel_corpus
from flows.params import Languages, PrepareParams

# Every task: cache_policy=NO_CACHE, persist_result=False. DVC decides what reruns; Prefect's own result
# cache would be a second cache keyed on path strings, blind to changed file contents.


@task(cache_policy=NO_CACHE, persist_result=False)
def generate_synthetic_dataset(config: SyntheticConfig, out_dir: str) -> GenerationSummary:
    """Render the built-in dataset into ``out_dir``, with a CLI bar and a Prefect progress artifact."""
    total = config.train_images + config.val_images + config.test_images
    artifact_id = create_progress_artifact(progress=0.0, description="Synthetic images rendered")
    assert isinstance(artifact_id, UUID)  # the sync API inside a sync task returns the id itself
    with tqdm(total=total, unit="img", desc="generate") as bar:

        def report(done: int, total: int) -> None:
            bar.update(done - bar.n)
            update_progress_artifact(artifact_id=artifact_id, progress=100.0 * done / total)

        summary = generate(config, out_dir, progress=report)
    get_run_logger().info("Wrote the synthetic dataset to %s", out_dir)
    return summary


def _read_multi30k(params: PrepareParams, languages: Languages, source: Path, images: Path | None) -> Corpus:
    splits = {
        name: Multi30kSplit(task1=stems.task1, task2=stems.task2) for name, stems in params.multi30k.splits.items()
    }
    return read_multi30k(
        source,
        languages=languages.all,
        splits=splits,
        image_root=images,
        dataset=params.dataset,
        tasks=params.multi30k.tasks,
        tokenized=params.multi30k.tokenized,
    )


def _read_karpathy(params: PrepareParams, languages: Languages, source: Path, images: Path | None) -> Corpus:
    return read_karpathy(
        source,
        dataset=params.dataset,
        image_root=images,
        lang=languages.pivot,
        captions_per_image=params.karpathy.captions_per_image,
        restval=params.karpathy.restval,
    )


def _read_scan(params: PrepareParams, languages: Languages, source: Path, images: Path | None) -> Corpus:
    return read_scan_captions(
        source,
        splits=params.scan.splits,
        dataset=params.dataset,
        lang=languages.pivot,
        captions_per_image=params.scan.captions_per_image,
    )


_ADAPTERS: dict[str, Callable[[PrepareParams, Languages, Path, Path | None], Corpus]] = {
    "multi30k": _read_multi30k,
    "karpathy": _read_karpathy,
    "scan": _read_scan,
}


@task(cache_policy=NO_CACHE, persist_result=False, retries=1, retry_delay_seconds=2)
def read_captioned_images(params: PrepareParams, languages: Languages, source: str, images: str) -> Corpus:
    """Read images and human captions through the adapter named by ``params.format``."""
    image_root = Path(images) if params.read_image_sizes else None
    corpus = _ADAPTERS[params.format](params, languages, Path(source), image_root)
    get_run_logger().info(
        "Read %d images and %d captions (%s format) from %s",
        corpus.images.num_rows,
        corpus.captions.num_rows,
        params.format,
        source,
    )
    return corpus


@task(cache_policy=NO_CACHE, persist_result=False, retries=1, retry_delay_seconds=2)
def read_parallel_text(params: PrepareParams, languages: Languages, parallel_dir: str) -> dict[str, pa.Table]:
    """Read the text-only corpus of every pivot-target pair."""
    pairs = [(languages.pivot, target) for target in languages.targets]
    parallel = read_parallel_corpus(Path(parallel_dir), pairs=pairs, splits=params.parallel.splits)
    for name, table in parallel.items():
        get_run_logger().info("Read %d sentence pairs for %s", table.num_rows, name)
    return parallel


@task(cache_policy=NO_CACHE, persist_result=False)
def write_prepared_tables(corpus: Corpus, out_dir: str) -> None:
    """Validate and atomically write images, captions and parallel tables to ``out_dir``."""
    write_prepared(corpus, out_dir)
    get_run_logger().info("Wrote prepared tables to %s", out_dir)


def count_captions(corpus: Corpus) -> list[dict[str, object]]:
    """Per split and language: images, comparable captions, translation captions."""
    images, captions = corpus.images, corpus.captions
    rows: list[dict[str, object]] = []
    for split in pc.unique(images.column("split")).to_pylist():
        in_split = captions.filter(pc.equal(captions.column("split"), split))
        split_images = pc.sum(pc.equal(images.column("split"), split)).as_py()
        for lang in sorted(pc.unique(in_split.column("lang")).to_pylist()):
            kinds = in_split.filter(pc.equal(in_split.column("lang"), lang)).column("kind")
            rows.append(
                {
                    "split": split,
                    "lang": lang,
                    "images": split_images,
                    "comparable": pc.sum(pc.equal(kinds, "comparable")).as_py() or 0,
                    "translation": pc.sum(pc.equal(kinds, "translation")).as_py() or 0,
                }
            )
    return rows


def count_parallel(corpus: Corpus) -> list[dict[str, object]]:
    """Per language pair and split: sentence pairs of the text-only corpus."""
    rows: list[dict[str, object]] = []
    for name, table in sorted(corpus.parallel.items()):
        for split in pc.unique(table.column("split")).to_pylist():
            rows.append({"pair": name, "split": split, "pairs": pc.sum(pc.equal(table.column("split"), split)).as_py()})
    return rows


@task(cache_policy=NO_CACHE, persist_result=False)
def publish_counts(rows: list[dict[str, object]], key: str, description: str) -> None:
    """Show per-split/per-language counts as a Prefect table artifact and in the log."""
    create_table_artifact(key=key, table=rows, description=description)
    logger = get_run_logger()
    for row in rows:
        logger.info("%s", "  ".join(f"{name}={value}" for name, value in row.items()))


def with_parallel(corpus: Corpus, parallel: dict[str, pa.Table]) -> Corpus:
    return Corpus(images=corpus.images, captions=corpus.captions, parallel=parallel)
