"""Prefect tasks for the data stages: thin wrappers over ``corpora`` that add logging and artifacts."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from prefect import get_run_logger, task
from prefect.artifacts import create_table_artifact, update_progress_artifact
from prefect.cache_policies import NO_CACHE
from tqdm import tqdm

from common.text_input import TextCleaner, TextConfig
from corpora.adapters import read_corpus
from corpora.languages import Languages
from corpora.prepared import Corpus, write_prepared
from corpora.synthetic import GenerationSummary, SyntheticConfig, generate
from corpora.wmt import ParallelConfig, write_parallel_pair
from tasks import named_by, progress_artifact

# Every task: cache_policy=NO_CACHE, persist_result=False. DVC decides what reruns; Prefect's own result
# cache would be a second cache keyed on path strings, blind to changed file contents.


@task(cache_policy=NO_CACHE, persist_result=False)
def generate_synthetic_dataset(
    config: SyntheticConfig, out_dir: str, seed: int, languages: Languages
) -> GenerationSummary:
    """Render the built-in dataset into ``out_dir``, with a CLI bar and a Prefect progress artifact."""
    artifact_id = progress_artifact("Synthetic images rendered")
    with tqdm(total=sum(config.splits.as_dict().values()), unit="img", desc="generate") as bar:

        def report(done: int, total: int) -> None:
            bar.total = total  # the second corpus's images come after the first's
            bar.update(done - bar.n)
            update_progress_artifact(artifact_id=artifact_id, progress=100.0 * done / total)

        summary = generate(config, out_dir, seed=seed, languages=languages, progress=report)
    get_run_logger().info("Wrote the synthetic dataset to %s", out_dir)
    return summary


@dataclass(frozen=True)
class CorpusSource:
    """Where one corpus's images and human captions are read from, and by which adapter."""

    format: str  # the adapter that reads it (multi30k | karpathy | scan | hf: corpora.adapters)
    path: str  # a Multi30K-layout folder, a Karpathy JSON file or a SCAN folder
    image_root: str | None  # the image folder the image sizes are read from; None: sizes are not read
    dataset: str  # the name written to the images table's `dataset` column
    outside_allowed: bool = False  # image paths may lead out of image_root (prepare.images_outside_root)


@task(cache_policy=NO_CACHE, persist_result=False, retries=1, retry_delay_seconds=2)
def read_captioned_images(source: CorpusSource, config: object, languages: Languages, text: TextConfig) -> Corpus:
    """Read images and human captions through the adapter ``source.format`` (``config``: its settings; image sizes
    from ``source.image_root``; ``text``: how captions are cleaned, the count of removed characters kept)."""
    image_root = Path(source.image_root) if source.image_root else None
    clean = TextCleaner(text.control_characters)
    corpus = read_corpus(
        source.format,
        config,
        Path(source.path),
        image_root=image_root,
        languages=languages,
        dataset=source.dataset,
        text=clean,
        outside_allowed=source.outside_allowed,
    )
    if clean.removed:
        print(f"Removed {clean.removed} control characters from the captions (prepare.text.control_characters)")
        corpus = replace(corpus, removed_characters=clean.removed)
    get_run_logger().info(
        "Read %d images and %d captions (%s format) from %s",
        corpus.images.num_rows,
        corpus.captions.num_rows,
        source.format,
        source.path,
    )
    return corpus


def _prepare_pair_name(parameters: dict[str, Any]) -> str:
    return f"prepare parallel {parameters['pivot']}-{parameters['target']}"


@task(
    cache_policy=NO_CACHE,
    persist_result=False,
    retries=1,
    retry_delay_seconds=2,
    task_run_name=named_by(_prepare_pair_name),
)
def prepare_parallel_pair(
    config: ParallelConfig, pivot: str, target: str, parallel_dir: str, out: str, text: TextConfig
) -> list[dict[str, object]]:
    """Stream the text-only corpus of the pair ``pivot``-``target`` into the table ``out`` (sentences cleaned as
    ``text`` says); its counts per split."""
    clean = TextCleaner(text.control_characters)
    counts = write_parallel_pair(
        Path(parallel_dir), pair=(pivot, target), splits=config.splits, out=Path(out), text=clean
    )
    if clean.removed:
        print(f"Removed {clean.removed} control characters from the sentences (prepare.text.control_characters)")
    get_run_logger().info("Wrote %d sentence pairs for %s-%s to %s", sum(counts.values()), pivot, target, out)
    return [{"pair": f"{pivot}-{target}", "split": split, "pairs": count} for split, count in counts.items()]


@task(cache_policy=NO_CACHE, persist_result=False)
def write_prepared_tables(corpus: Corpus, out_dir: str) -> None:
    """Validate and atomically write the images and captions tables to ``out_dir``."""
    write_prepared(corpus, out_dir)
    get_run_logger().info("Wrote prepared tables to %s", out_dir)


@task(cache_policy=NO_CACHE, persist_result=False)
def publish_counts(rows: list[dict[str, object]], key: str, description: str) -> None:
    """Show per-split/per-language counts as a Prefect table artifact and in the log."""
    create_table_artifact(key=key, table=rows, description=description)
    logger = get_run_logger()
    for row in rows:
        logger.info("%s", "  ".join(f"{name}={value}" for name, value in row.items()))
