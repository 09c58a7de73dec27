"""Prefect tasks for the `export` stage: one caption variant as a Hugging Face dataset folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from common.files import final_path
from corpora.dataset_card import CardInfo
from corpora.hf_dataset import ExportSummary, RegionSource, export_variant
from corpora.prepared import read_caption_variant
from tasks import named_by

# cache_policy=NO_CACHE, persist_result=False: DVC decides what reruns (see tasks/data.py).


def _export_name(parameters: dict[str, Any]) -> str:
    return f"export {parameters['card'].variant}"


@task(cache_policy=NO_CACHE, persist_result=False, task_run_name=named_by(_export_name))
def export_caption_variant(
    variant_dir: str,
    images: pa.Table,
    out_dir: str,
    card: CardInfo,
    image_root: str | None,
    regions: RegionSource | None,
    outside_allowed: bool = False,
) -> ExportSummary:
    """Read one variant's captions, every language (checked against ``images``), and write them to ``out_dir`` as a
    Hugging Face dataset folder; with ``image_root`` the image files are embedded (their paths inside it unless
    ``outside_allowed``), with ``regions`` their region features."""
    captions = read_caption_variant(variant_dir, images=images)
    summary = export_variant(
        captions,
        images,
        Path(out_dir),
        card=card,
        image_root=image_root,
        with_images=image_root is not None,
        regions=regions,
        source=variant_dir,
        outside_allowed=outside_allowed,
    )
    rows = {split: sum(counts.values()) for split, counts in summary.rows.items()}
    get_run_logger().info(
        "Exported %s to %s: %s rows; columns %s",
        card.variant,
        final_path(out_dir),
        ", ".join(f"{split} {count}" for split, count in rows.items()),
        ", ".join(summary.columns),
    )
    return summary
