"""One caption variant as a Hugging Face dataset folder: both copies load to the input's rows, images decode after
the source folder moves, empty splits are left out, bad input names the file or row (the card:
test_dataset_card.py)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import yaml
from PIL import Image

from common.checks import SettingError
from common.errors import InputError
from corpora import tables
from corpora.config import ExportConfig
from corpora.dataset_card import CardInfo
from corpora.hf_dataset import HF_SPLITS, PROVENANCE, export_variant
from features.regions import ImageRegions
from features.store import FeatureStore, FeatureStoreWriter

SIZES = {"a": (12, 8), "b": (10, 6), "c": (7, 5), "d": (9, 9)}  # image id -> (width, height)
SPLIT_OF = {"a": "train", "b": "train", "c": "val", "d": "test"}
CARD = CardInfo(
    variant="mmt_fb",
    definition="MMT(f+b): the human captions plus hops 1, 2",
    corpus="toy",
    dataset="toy",
    generated=True,
    pivot="en",
    targets=("de",),
    settings={"mmt.targets": ["de"]},
)
K, D = 3, 4


def caption_rows() -> list[dict[str, Any]]:
    """Human en/de captions per image, and for the train images an MMT translation (hop 1) and its back-translation
    (hop 2)."""
    rows = []
    for image_id, split in SPLIT_OF.items():
        for lang, text in (("en", f"A thing {image_id}."), ("de", f"Ein Ding {image_id}.")):
            rows.append(
                {
                    "caption_id": f"{image_id}#{lang}#c1",
                    "image_id": image_id,
                    "split": split,
                    "lang": lang,
                    "text": text,
                    "origin": "human",
                    "system": None,
                    "hop": 0,
                    "parent_id": None,
                    "kind": "comparable",
                }
            )
        if split == "train":
            forward = f"{image_id}#en#c1>mmt-en-de"
            rows.append(
                {
                    "caption_id": forward,
                    "image_id": image_id,
                    "split": split,
                    "lang": "de",
                    "text": f"Ein Gegenstand {image_id}.",
                    "origin": "mmt",
                    "system": "mmt-en-de",
                    "hop": 1,
                    "parent_id": f"{image_id}#en#c1",
                    "kind": "comparable",
                }
            )
            rows.append(
                {
                    "caption_id": f"{forward}>mmt-de-en",
                    "image_id": image_id,
                    "split": split,
                    "lang": "en",
                    "text": f"An object {image_id}.",
                    "origin": "mmt",
                    "system": "mmt-de-en",
                    "hop": 2,
                    "parent_id": forward,
                    "kind": "comparable",
                }
            )
    return rows


def images_of(root: Path) -> pa.Table:
    root.mkdir(parents=True, exist_ok=True)
    for index, (image_id, size) in enumerate(SIZES.items()):
        Image.new("RGB", size, (40 * index, 200, 10)).save(root / f"{image_id}.png")
    return tables.images_table(
        {
            "image_id": list(SIZES),
            "split": [SPLIT_OF[i] for i in SIZES],
            "path": [f"{i}.png" for i in SIZES],
            "width": [s[0] for s in SIZES.values()],
            "height": [s[1] for s in SIZES.values()],
            "dataset": ["toy"] * len(SIZES),
        }
    )


def captions_of(images: pa.Table, rows: list[dict[str, Any]] | None = None) -> pa.Table:
    rows = caption_rows() if rows is None else rows
    return tables.captions_table(
        {name: [row[name] for row in rows] for name in tables.CAPTIONS_SCHEMA.names}, images=images
    )


def region_store(path: Path) -> FeatureStore:
    with FeatureStoreWriter(
        path, image_ids=list(SIZES), max_regions=K, dim=D, extractor="test", checkpoint_sha256=None, config={}
    ) as writer:
        for index, image_id in enumerate(SIZES):
            count = 1 + index % K
            features = np.arange(count * D, dtype=np.float32).reshape(count, D) / 8 + index
            boxes = np.tile(np.array([0, 0, 4, 4], np.float32), (count, 1))
            writer.write(image_id, ImageRegions(features, boxes), width=SIZES[image_id][0], height=SIZES[image_id][1])
    return FeatureStore.open(path)


def expected_rows(captions: pa.Table, split: str) -> list[dict[str, Any]]:
    """The input's rows of ``split`` as the dataset should hold them (canonical column names, no split column)."""
    paths = {image_id: f"{image_id}.png" for image_id in SIZES}
    rows = [row for row in captions.to_pylist() if row["split"] == split]
    return [{**{k: v for k, v in row.items() if k != "split"}, "image_path": paths[row["image_id"]]} for row in rows]


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pa.Table, Path]:
    """The toy variant exported with images and regions: (folder, captions, where its images were)."""
    root = tmp_path_factory.mktemp("export")
    images = images_of(root / "images")
    captions = captions_of(images)
    store = region_store(root / "store")
    export_variant(
        captions,
        images,
        root / "out" / "mmt_fb",
        card=CARD,
        image_root=root / "images",
        with_images=True,
        regions=store,
    )
    return root / "out" / "mmt_fb", captions, root / "images"


def test_both_copies_hold_the_input_rows_per_split(exported: tuple[Path, pa.Table, Path], tmp_path: Path) -> None:
    import datasets

    folder, captions, _ = exported
    on_disk = datasets.load_from_disk(str(folder / "hf"))
    parquet = datasets.load_dataset("parquet", data_dir=str(folder / "data"), cache_dir=str(tmp_path / "cache"))
    via_card = datasets.load_dataset(str(folder), cache_dir=str(tmp_path / "cache"))  # the card's `configs`
    columns = ["image_id", "text", "lang", "kind", *PROVENANCE, "image_path"]
    for loaded in (on_disk, parquet, via_card):
        assert list(loaded) == ["train", "validation", "test"]
        assert {name: len(split) for name, split in loaded.items()} == {"train": 8, "validation": 2, "test": 2}
        assert loaded["train"].column_names == [*columns, "image", "regions", "region_boxes", "num_regions"]
        assert loaded["train"].features == on_disk["train"].features
        for split, name in HF_SPLITS.items():
            assert loaded[name].select_columns(columns).to_list() == expected_rows(captions, split)
    train = on_disk["train"]
    assert train.features["hop"] == datasets.Value("int32")
    assert train["origin"] == ["human", "human", "mmt", "mmt"] * 2
    assert train["system"][:4] == [None, None, "mmt-en-de", "mmt-de-en"]
    assert train["parent_id"][3] == "a#en#c1>mmt-en-de" and train["hop"][:4] == [0, 0, 1, 2]


def test_images_are_embedded_and_decode_after_the_source_folder_moves(
    exported: tuple[Path, pa.Table, Path], tmp_path: Path
) -> None:
    import datasets

    folder, _, image_root = exported
    moved = tmp_path / "moved-away"
    shutil.move(image_root, moved)  # nothing left where the images were read
    try:
        on_disk = datasets.load_from_disk(str(folder / "hf"))
        parquet = datasets.load_dataset("parquet", data_dir=str(folder / "data"), cache_dir=str(tmp_path / "cache"))
        for loaded in (on_disk, parquet):
            assert isinstance(loaded["test"].features["image"], datasets.Image)
            for name in ("train", "validation", "test"):
                for row in loaded[name]:
                    assert row["image"].size == SIZES[row["image_id"]]
    finally:
        shutil.move(moved, image_root)


def test_region_features_per_caption(exported: tuple[Path, pa.Table, Path]) -> None:
    import datasets

    folder, _, _ = exported
    test = datasets.load_from_disk(str(folder / "hf"))["test"]
    assert test.features["regions"] == datasets.Array2D((K, D), "float16")
    assert test.data.column("regions").type.storage_type == pa.list_(pa.list_(pa.float16()))
    row = test[0]  # image d, the 4th of the store: 1 + 3 % K = 1 region
    assert row["image_id"] == "d" and row["num_regions"] == 1
    regions = np.asarray(row["regions"])
    assert regions.shape == (K, D)
    np.testing.assert_allclose(regions[0], np.arange(D) / 8 + 3)
    assert not regions[1:].any() and np.asarray(row["region_boxes"])[0].tolist() == [0, 0, 4, 4]


def test_output_is_byte_identical_and_replaces_the_folder(tmp_path: Path) -> None:
    images = images_of(tmp_path / "images")
    captions = captions_of(images)
    store = region_store(tmp_path / "store")
    for name in ("first", "second"):
        export_variant(
            captions,
            images,
            tmp_path / name,
            card=CARD,
            image_root=tmp_path / "images",
            with_images=True,
            regions=store,
        )
    files = sorted(path.relative_to(tmp_path / "first") for path in (tmp_path / "first").rglob("*") if path.is_file())
    assert files == sorted(p.relative_to(tmp_path / "second") for p in (tmp_path / "second").rglob("*") if p.is_file())
    assert Path("hf/train/state.json") in files and not any(".build" in str(path) for path in files)
    for path in files:
        assert (tmp_path / "first" / path).read_bytes() == (tmp_path / "second" / path).read_bytes(), path
    (tmp_path / "first" / "stale.txt").write_text("from an earlier run")
    summary = export_variant(captions, images, tmp_path / "first", card=CARD)  # text only, real-corpus card below
    assert not (tmp_path / "first" / "stale.txt").exists()
    assert summary.rows == {"train": {"de": 4, "en": 4}, "validation": {"de": 1, "en": 1}, "test": {"de": 1, "en": 1}}
    assert summary.columns == ("image_id", "text", "lang", "kind", *PROVENANCE, "image_path")


def test_empty_splits_are_left_out(tmp_path: Path) -> None:
    import datasets

    images = images_of(tmp_path / "images")
    rows = [row for row in caption_rows() if row["split"] != "val"]
    export_variant(captions_of(images, rows), images, tmp_path / "none", card=CARD)
    assert list(datasets.load_from_disk(str(tmp_path / "none" / "hf"))) == ["train", "test"]


def test_extra_evaluation_sets_are_left_out(tmp_path: Path) -> None:
    import datasets

    images = images_of(tmp_path / "images")
    as_set = {"d": "eval:test2017"}  # the test image becomes an evaluation set's
    images = images.set_column(1, "split", pa.array([as_set.get(i, SPLIT_OF[i]) for i in SIZES]))
    rows = [{**row, "split": as_set.get(row["image_id"], row["split"])} for row in caption_rows()]
    export_variant(captions_of(images, rows), images, tmp_path / "sets", card=CARD)
    assert list(datasets.load_from_disk(str(tmp_path / "sets" / "hf"))) == ["train", "validation"]
    assert "eval:test2017" not in (tmp_path / "sets" / "README.md").read_text()


def test_a_missing_image_file_names_it_and_writes_nothing(tmp_path: Path) -> None:
    images = images_of(tmp_path / "images")
    (tmp_path / "images" / "c.png").unlink()
    with pytest.raises(InputError, match=r"images: 1 of the 4 images of variant.parquet are missing, first: c\.png$"):
        export_variant(
            captions_of(images),
            images,
            tmp_path / "out",
            card=CARD,
            image_root=tmp_path / "images",
            with_images=True,
            source="variant.parquet",
        )
    (tmp_path / "images" / "c.png").write_bytes(b"not a png")
    with pytest.raises(InputError, match=r"c\.png: not a readable image"):
        export_variant(
            captions_of(images), images, tmp_path / "out", card=CARD, image_root=tmp_path / "images", with_images=True
        )
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out.*"))
    with pytest.raises(InputError, match=r"needs the image folder"):
        export_variant(captions_of(images), images, tmp_path / "out", card=CARD, with_images=True)


def test_a_caption_of_an_unknown_image_names_the_row(tmp_path: Path) -> None:
    images = images_of(tmp_path / "images")
    captions = captions_of(images)
    fewer = images.filter(pa.array([image_id != "b" for image_id in images.column("image_id").to_pylist()]))
    row = captions.column("image_id").to_pylist().index("b")
    with pytest.raises(InputError, match=rf"^variant\.parquet: row {row}: caption points at unknown image_id 'b'$"):
        export_variant(captions, fewer, tmp_path / "out", card=CARD, source="variant.parquet")


def test_an_image_the_region_store_lacks_is_named(tmp_path: Path) -> None:
    images = images_of(tmp_path / "images")
    store = region_store(tmp_path / "store")
    extra = tables.images_table({**images.to_pydict(), "image_id": ["a", "b", "c", "e"]})
    rows = [{**row, "image_id": "e"} if row["image_id"] == "d" else row for row in caption_rows()]
    with pytest.raises(InputError, match=r"image 'e' is not in the feature store .*store"):
        export_variant(captions_of(extra, rows), extra, tmp_path / "out", card=CARD, regions=store)


def test_export_config() -> None:
    assert ExportConfig() == ExportConfig(variants=(), images=False, regions=False)
    with pytest.raises(SettingError, match=r"^variants\[1\]: got 'none', allowed: each variant once$"):
        ExportConfig(variants=("none", "none"))


def test_params_export_variants_must_be_built_by_augment() -> None:
    from mmtr.params import ParamsError, parse_params

    tree = yaml.safe_load((Path(__file__).resolve().parents[3] / "params.yaml").read_text(encoding="utf-8"))
    assert parse_params(tree).export == ExportConfig()
    tree["export"] = {"variants": ["mmt_f"], "images": True, "regions": False}
    assert parse_params(tree).export == ExportConfig(variants=("mmt_f",), images=True)
    tree["export"]["variants"] = ["mmt_f", "mt_fb"]
    with pytest.raises(ParamsError, match=r"export\.variants\[1\]: got 'mt_fb', allowed: one of retrieval\.variants"):
        parse_params(tree)
    tree["export"] = {"variants": [], "images": "yes", "regions": False}
    with pytest.raises(ParamsError, match=r"export\.images: expected true or false, got 'yes'"):
        parse_params(tree)
