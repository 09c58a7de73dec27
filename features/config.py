"""``FeaturesConfig``: the `features` section of params.yaml, and what each extractor needs of it.

:data:`EXTRACTOR_NEEDS` names every extractor in the order of :data:`features.extractors.EXTRACTORS` (a test keeps
the two tables in step), each with what it needs of the settings: their check, its own section, and the files it
reads from the inputs folder (the DAG makes the features stage depend on those alone); the registry's rows say how
each one runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Literal

from common.checks import SettingError, check, check_range
from features.bottom_up.extractor import BUTDSettings
from features.compact import CompactPreset
from features.importers import ImportConfig
from features.regions import RegionConfig
from features.scan_pairing import pairing_files


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
        check(self.extractor in EXTRACTOR_NEEDS, "extractor", self.extractor, ", ".join(EXTRACTOR_NEEDS))
        check_range("shard_size", self.shard_size, 1, 1_000_000)
        check_range("batch_size", self.batch_size, 1, 4096)
        EXTRACTOR_NEEDS[self.extractor].check(self)

    def settings_read(self) -> list[str]:
        """The settings the extractor reads: every field but the other extractors' sections."""
        own = EXTRACTOR_NEEDS[self.extractor].section
        others = {needs.section for needs in EXTRACTOR_NEEDS.values()} - {own}
        return [item.name for item in fields(self) if item.name not in others]

    def input_files(self, inputs: Path) -> list[str]:
        """The names of the files the extractor reads from the inputs folder ``inputs`` (some only if present)."""
        return EXTRACTOR_NEEDS[self.extractor].input_files(self, inputs)


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


def _no_files(config: FeaturesConfig, inputs: Path) -> list[str]:
    return []  # the compact preset trains on the given boxes (the built-in world's, when it is read)


def _checkpoint(config: FeaturesConfig, inputs: Path) -> list[str]:
    return [str(config.butd.checkpoint)]


def _scan_files(config: FeaturesConfig, inputs: Path) -> list[str]:
    return [path.name for stem in config.imported.scan_splits.values() for path in pairing_files(inputs, stem)]


def _tsv_files(config: FeaturesConfig, inputs: Path) -> list[str]:
    return list(config.imported.tsv_files)


@dataclass(frozen=True)
class ExtractorNeeds:
    """What one extractor needs of the `features` settings."""

    check: Callable[[FeaturesConfig], None]  # the check of the settings it needs
    section: str  # its own section of FeaturesConfig (the others' are not read)
    input_files: Callable[[FeaturesConfig, Path], list[str]]  # what it reads from the inputs folder, by name


EXTRACTOR_NEEDS: dict[str, ExtractorNeeds] = {
    "compact": ExtractorNeeds(_compact_check, "compact", _no_files),
    "butd": ExtractorNeeds(_butd_check, "butd", _checkpoint),
    # the same settings; detectron2 itself is checked when the stage runs
    "butd-detectron2": ExtractorNeeds(_butd_check, "butd", _checkpoint),
    "scan-npy": ExtractorNeeds(_no_check, "imported", _scan_files),  # <stem>_ims.npy, and _ids.txt or _caps.txt
    "butd-tsv": ExtractorNeeds(_tsv_check, "imported", _tsv_files),
}
