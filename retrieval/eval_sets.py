"""Extra evaluation sets (the ``eval:<name>`` splits of the captions table), scored beside the primary test split.

Each set is scored in every test language it has human captions of, in the shape of the primary test metrics
(``<lang>`` and, with the ``both`` protocol, ``<lang>-folds``); beside them ``images`` (the set's images),
``protocol`` (the one applied) and, when the set lacks some test languages, ``absent`` (those languages, not
scored). ``retrieval.evaluation.protocol`` applies to every set whose images divide into whole folds of
``fold_images``: a set that does not (Multi30K's 461 Ambiguous COCO images against folds of 1,000) is scored whole,
its ``protocol`` then says ``full``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from common.errors import InputError
from common.runtime import Runtime
from corpora.prepared import caption_variant_files
from corpora.tables import eval_set_name, eval_split
from features.store import FeatureStore
from retrieval.checkpoint import LoadedModel
from retrieval.data import Caption
from retrieval.experiment import encode_test_set, evaluation_captions, read_captions, score_test_set
from retrieval.inference import EvaluationConfig

logger = logging.getLogger(__name__)

Protocol = Literal["full", "folds", "both"]
# (captions of one language, images per fold or None for the whole set) -> metrics in the schema of one language
Score = Callable[[list[Caption], int | None], dict[str, Any]]


def eval_set_names(captions_path: Path, languages: Sequence[str] | None = None) -> list[str]:
    """The evaluation sets of the captions at ``captions_path`` (a captions table, or a caption variant's folder of
    which ``languages`` are read), in the order of their first rows."""
    if captions_path.is_dir():
        files = caption_variant_files(captions_path, languages)
        splits = pa.concat_tables([pq.read_table(path, columns=["split"]) for path in files]).column("split")
    elif captions_path.is_file():
        splits = pq.read_table(captions_path, columns=["split"]).column("split")
    else:
        raise InputError(f"{captions_path}: captions table not found")
    return [name for split in pc.unique(splits).to_pylist() if (name := eval_set_name(split)) is not None]


def set_protocol(protocol: Protocol, fold_images: int, images: int) -> Protocol:
    """The protocol applied to a set of ``images`` images: ``protocol`` when they divide into whole folds of
    ``fold_images`` (or it is ``full``), else ``full``."""
    divides = images >= fold_images and images % fold_images == 0
    return protocol if divides else "full"


def score_eval_set(
    rows: Sequence[dict[str, Any]],
    languages: Sequence[str],
    evaluation: EvaluationConfig,
    score: Score,
    *,
    name: str,
) -> dict[str, Any]:
    """The metrics of one evaluation set (``rows``: its human caption rows) per language of ``languages`` it has.

    A language's captions are its comparable ones (5 per image) when there are any, else its translation ones, as
    on the primary test split.
    """
    images = len({row["image_id"] for row in rows})
    applied = set_protocol(evaluation.protocol, evaluation.fold_images, images)
    metrics: dict[str, Any] = {}
    absent = []
    for lang in languages:
        own = [row for row in rows if row["lang"] == lang]
        if not own:
            absent.append(lang)
            continue
        captions = evaluation_captions(own, lang, source=f"evaluation set {name}")
        metrics[lang] = score(captions, evaluation.fold_images if applied == "folds" else None)
        if applied == "both":
            metrics[f"{lang}-folds"] = score(captions, evaluation.fold_images)
    if absent:
        logger.info("evaluation set %s: no captions of %s (not scored)", name, ", ".join(absent))
    return {**metrics, "images": images, "protocol": applied, **({"absent": absent} if absent else {})}


def score_eval_sets(
    loaded: LoadedModel,
    captions_path: Path,
    store: FeatureStore,
    evaluation: EvaluationConfig,
    languages: Sequence[str],
    *,
    runtime: Runtime,
) -> dict[str, dict[str, Any]]:
    """The model's metrics on every evaluation set of the captions table at ``captions_path`` (none: an empty
    mapping), by name; each set in the ``languages`` it has."""

    def scorer(source: str) -> Score:
        def score(captions: list[Caption], fold_images: int | None) -> dict[str, Any]:
            encoded = encode_test_set(loaded, captions, store, source)
            return score_test_set(loaded, encoded, store, evaluation, fold_images, runtime=runtime)

        return score

    metrics = {}
    for name in eval_set_names(captions_path, languages):
        split = eval_split(name)
        rows = read_captions(captions_path, split=split, languages=languages, kinds=None, human_only=True)
        metrics[name] = score_eval_set(rows, languages, evaluation, scorer(f"{captions_path} ({split})"), name=name)
    return metrics
