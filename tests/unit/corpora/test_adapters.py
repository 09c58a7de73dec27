"""The dataset adapter registry, the `prepare` settings that select from it, and the prepared-table counts."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from common.checks import SettingError
from common.config import build
from corpora import tables
from corpora.adapters import ADAPTERS, read_corpus
from corpora.config import PrepareConfig
from corpora.hf_captions import HfConfig
from corpora.karpathy import KarpathyConfig, read_karpathy
from corpora.languages import Languages
from corpora.multi30k import Multi30kConfig, Multi30kSplit, discover_languages
from corpora.prepared import Corpus, count_captions, count_parallel
from corpora.scan_captions import ScanCaptionsConfig
from tests.unit.corpora.test_karpathy import coco_entry
from tests.unit.corpora.test_multi30k import write_layout
from tests.unit.corpora.test_scan_captions import write_caps

EN_DE = Languages("en", ("de",))


def test_registry_rows_name_the_config_type_of_their_adapter() -> None:
    """Each row pairs a format with the settings dataclass of its adapter module."""
    assert {name: adapter.config_type for name, adapter in ADAPTERS.items()} == {
        "multi30k": Multi30kConfig,
        "karpathy": KarpathyConfig,
        "scan": ScanCaptionsConfig,
        "hf": HfConfig,
    }


def test_every_registry_name_is_a_prepare_field_of_its_config_type() -> None:
    """`prepare.<format>` exists for every adapter and holds that adapter's settings dataclass."""
    fields = {field.name: field for field in dataclasses.fields(PrepareConfig)}
    defaults = PrepareConfig()
    for name, adapter in ADAPTERS.items():
        assert name in fields, name
        assert isinstance(getattr(defaults, name), adapter.config_type), name


def test_adapter_config_is_the_field_named_like_the_format() -> None:
    """adapter_config(format) is that adapter's settings, including settings changed from their defaults."""
    karpathy = KarpathyConfig(captions_per_image=3, restval="drop")
    scan = ScanCaptionsConfig(captions_per_image=2, splits={"test": "testall"})
    config = PrepareConfig(karpathy=karpathy, scan=scan)
    assert config.adapter_config("karpathy") is karpathy
    assert config.adapter_config("scan") is scan
    assert isinstance(PrepareConfig().adapter_config("multi30k"), Multi30kConfig)
    with pytest.raises(ValueError, match=r"^unknown dataset format 'coco'; known: multi30k, karpathy, scan, hf$"):
        config.adapter_config("coco")


def test_prepare_builds_from_a_params_mapping() -> None:
    """The params.yaml form of the section builds every adapter's settings into its dataclass."""
    config = build(PrepareConfig, {"scan": {"captions_per_image": 2, "splits": {"test": "testall"}}})
    assert config.adapter_config("scan") == ScanCaptionsConfig(captions_per_image=2, splits={"test": "testall"})
    with pytest.raises(SettingError, match=r"^prepare\.format: unknown key; allowed keys here: read_image_sizes, "):
        build(PrepareConfig, {"format": "flickr"}, "prepare")


def test_unknown_format_lists_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"^unknown dataset format 'coco'; known: multi30k, karpathy, scan"):
        read_corpus("coco", KarpathyConfig(), tmp_path, image_root=None, languages=EN_DE, dataset="x")


def test_config_of_another_adapter_is_refused(tmp_path: Path) -> None:
    """The check runs before anything is read (the folder here is empty)."""
    with pytest.raises(TypeError, match=r"^format karpathy takes a KarpathyConfig, got ScanCaptionsConfig$"):
        read_corpus("karpathy", ScanCaptionsConfig(), tmp_path, image_root=None, languages=EN_DE, dataset="x")
    with pytest.raises(TypeError, match="format multi30k takes a Multi30kConfig, got dict"):
        read_corpus("multi30k", {"tasks": ["task1"]}, tmp_path, image_root=None, languages=EN_DE, dataset="x")


def test_karpathy_dispatch_passes_the_pivot_and_its_settings(tmp_path: Path) -> None:
    """Captions come out in the pivot language, cut to captions_per_image, with restval dropped as configured."""
    path = tmp_path / "dataset_coco.json"
    entries = [coco_entry(1, "val2014", "test"), coco_entry(2, "train2014", "restval"), coco_entry(3, "t", "train")]
    path.write_text(json.dumps({"images": entries, "dataset": "coco"}), encoding="utf-8")
    config = KarpathyConfig(captions_per_image=2, restval="drop")
    corpus = read_corpus("karpathy", config, path, image_root=None, languages=Languages("de", ("en",)), dataset="c")
    assert corpus.images.column("image_id").to_pylist() == ["1", "3"]
    assert corpus.captions.num_rows == 4 and set(corpus.captions.column("lang").to_pylist()) == {"de"}
    direct = read_karpathy(path, dataset="c", image_root=None, lang="de", captions_per_image=2, restval="drop")
    assert corpus.images.equals(direct.images) and corpus.captions.equals(direct.captions)


def test_scan_dispatch_uses_its_splits_and_captions_per_image(tmp_path: Path) -> None:
    write_caps(tmp_path, "testall", images=2, per_image=3)
    config = ScanCaptionsConfig(captions_per_image=3, splits={"test": "testall"})
    corpus = read_corpus("scan", config, tmp_path, image_root=None, languages=EN_DE, dataset="coco_precomp")
    assert corpus.images.column("image_id").to_pylist() == ["testall-000000", "testall-000001"]
    assert corpus.images.column("dataset").to_pylist() == ["coco_precomp"] * 2
    assert corpus.captions.num_rows == 6 and set(corpus.captions.column("split").to_pylist()) == {"test"}


def test_multi30k_dispatch_reads_every_language_the_source_holds(tmp_path: Path) -> None:
    """Every language with caption files is read (fr too, though the run names en and de alone: naming it later must
    not rerun `prepare`), the pivot first; task and split settings are passed on."""
    write_layout(tmp_path, task1_langs=("en", "de", "fr"), task2_langs=("en", "de"))
    config = Multi30kConfig(tasks=("task1",), splits={"train": Multi30kSplit("train", "train")})
    corpus = read_corpus("multi30k", config, tmp_path, image_root=None, languages=EN_DE, dataset="mini")
    captions = corpus.captions.to_pydict()
    assert set(captions["kind"]) == {"translation"} and set(captions["lang"]) == {"en", "de", "fr"}
    assert corpus.images.column("image_id").to_pylist() == ["a1", "a2", "a3"]
    assert captions["lang"][:3] == ["en", "de", "fr"]  # the pivot, then the others in code order
    langs = ("en", "de", "fr")
    assert sorted(captions["text"]) == sorted(f"t1 {lang} a{n}.jpg" for lang in langs for n in (1, 2, 3))


def test_multi30k_languages_are_found_in_both_tasks_gzipped_or_plain(tmp_path: Path) -> None:
    write_layout(tmp_path, task1_langs=("en", "cs"), task2_langs=("en", "de"))
    splits = {"train": Multi30kSplit("train", "train")}
    assert discover_languages(tmp_path, splits=splits) == ["cs", "de", "en"]
    assert discover_languages(tmp_path, splits=splits, tasks=("task1",)) == ["cs", "en"]
    assert discover_languages(tmp_path / "nowhere", splits=splits) == []


def _small_corpus() -> Corpus:
    images = tables.images_table(
        {
            "image_id": ["a", "b", "c"],
            "split": ["train", "train", "test"],
            "path": ["a", "b", "c"],
            "width": [None] * 3,
            "height": [None] * 3,
            "dataset": ["toy"] * 3,
        }
    )
    captions = tables.captions_table(
        {
            "caption_id": ["a1", "a2", "at", "bt", "ct", "cd"],
            "image_id": ["a", "a", "a", "b", "c", "c"],
            "split": ["train", "train", "train", "train", "test", "test"],
            "lang": ["en", "en", "en", "en", "en", "de"],
            "text": ["x"] * 6,
            "origin": ["human"] * 6,
            "system": [None] * 6,
            "hop": [0] * 6,
            "parent_id": [None] * 6,
            "kind": ["comparable", "comparable", "translation", "translation", "translation", "comparable"],
        },
        images=images,
    )
    parallel = tables.parallel_table(
        {"split": ["train", "train", "val"], "src": ["a", "b", "c"], "tgt": ["x", "y", "z"]}
    )
    return Corpus(images, captions, {"en-de": parallel})


def test_count_tables_match_hand_counts() -> None:
    """Splits in image-table order, languages sorted; kinds missing from a language count 0."""
    corpus = _small_corpus()
    assert count_captions(corpus) == [
        {"split": "train", "lang": "en", "images": 2, "comparable": 2, "translation": 2},
        {"split": "test", "lang": "de", "images": 1, "comparable": 1, "translation": 0},
        {"split": "test", "lang": "en", "images": 1, "comparable": 0, "translation": 1},
    ]
    assert count_parallel(corpus.parallel) == [
        {"pair": "en-de", "split": "train", "pairs": 2},
        {"pair": "en-de", "split": "val", "pairs": 1},
    ]


def test_counts_of_a_split_without_captions_and_pairs_in_name_order() -> None:
    """An image split without captions gets no row; parallel pairs come sorted by name."""
    corpus = _small_corpus()
    one_pair = corpus.parallel["en-de"]
    corpus = Corpus(corpus.images, corpus.captions.slice(0, 4), {"en-fr": one_pair.slice(2), "en-de": one_pair})
    assert [(row["split"], row["lang"]) for row in count_captions(corpus)] == [("train", "en")]
    assert [(row["pair"], row["split"], row["pairs"]) for row in count_parallel(corpus.parallel)] == [
        ("en-de", "train", 2),
        ("en-de", "val", 1),
        ("en-fr", "val", 1),
    ]
