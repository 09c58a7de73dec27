"""``FeaturesConfig``: the `features` section of params.yaml, and what each extractor needs of it.

:data:`EXTRACTOR_CHECKS` names every extractor in the order of :data:`features.extractors.EXTRACTORS` (a test keeps
the two tables in step), each with the check of the settings it needs; the registry's rows say how each one runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from common.checks import SettingError, check, check_range
from features.bottom_up.extractor import BUTDSettings
from features.compact import CompactPreset
from features.importers import ImportConfig
from features.regions import RegionConfig


@dataclass(frozen=True)
class FeaturesConfig:
    """The `features` section of params.yaml.

    Attributes:
        extractor: A name of :data:`~features.extractors.EXTRACTORS`.
        regions: How regions are chosen.
        shard_size: Images per shard (the unit of resumption and of distribution).
        batch_size: Images per forward pass.
        on_bad_image: fail (an error naming every bad file, after all shards ran) or skip (recorded).
        probe: Train linear probes on the features for every label column of the boxes table.
        compact: The built-in preset (extractor compact).
        butd: The bottom-up-attention checkpoint and image scale (extractors butd, butd-detectron2).
        imported: The files to import (extractors scan-npy, butd-tsv).
    """

    extractor: str = "compact"
    regions: RegionConfig = field(default_factory=lambda: RegionConfig(mode="given"))  # what compact needs
    shard_size: int = 200
    batch_size: int = 16
    on_bad_image: Literal["fail", "skip"] = "fail"
    probe: bool = True
    compact: CompactPreset = field(default_factory=CompactPreset)
    butd: BUTDSettings = field(default_factory=BUTDSettings)
    imported: ImportConfig = field(default_factory=ImportConfig)

    def __post_init__(self) -> None:
        check(self.extractor in EXTRACTOR_CHECKS, "extractor", self.extractor, ", ".join(EXTRACTOR_CHECKS))
        check_range("shard_size", self.shard_size, 1, 1_000_000)
        check_range("batch_size", self.batch_size, 1, 4096)
        EXTRACTOR_CHECKS[self.extractor](self)


def _compact_check(config: FeaturesConfig) -> None:
    if config.regions.mode != "given":
        raise SettingError("regions.mode", f"got {config.regions.mode!r}, allowed with extractor compact: given")


def _butd_check(config: FeaturesConfig) -> None:
    if not config.butd.checkpoint:
        raise SettingError("butd.checkpoint", f"missing: extractor {config.extractor} needs a checkpoint file name")


def _tsv_check(config: FeaturesConfig) -> None:
    if not config.imported.tsv_files:
        raise SettingError("imported.tsv_files", "empty: extractor butd-tsv needs at least one TSV file")


def _no_check(config: FeaturesConfig) -> None:
    return None


EXTRACTOR_CHECKS: dict[str, Callable[[FeaturesConfig], None]] = {
    "compact": _compact_check,
    "butd": _butd_check,
    "butd-detectron2": _butd_check,  # the same settings; detectron2 itself is checked when the stage runs
    "scan-npy": _no_check,
    "butd-tsv": _tsv_check,
}
