"""FeatureStore: round trips, the checks on write and open, atomic replacement, merging shards."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from common.errors import InputError
from features.merge import merge_stores
from features.regions import ImageRegions
from features.store import FILES, FeatureStore, FeatureStoreWriter, UnknownImageError

K, D = 4, 8
IDS = [f"img{index}" for index in range(7)]
COUNTS = [4, 0, 2, 1, 3, 4, 2]  # img1 has no regions but is a good image; img5 is skipped below
SKIPPED = "img5"


def _regions(seed: int = 0) -> dict[str, ImageRegions]:
    rng = np.random.default_rng(seed)
    return {
        image_id: ImageRegions(
            features=rng.normal(0, 3, (count, D)).astype(np.float32),
            boxes=rng.uniform(0, 500, (count, 4)).astype(np.float32),
        )
        for image_id, count in zip(IDS, COUNTS, strict=True)
    }


def _writer(out: Path, image_ids: list[str] = IDS, **overrides) -> FeatureStoreWriter:
    options = dict(image_ids=image_ids, max_regions=K, dim=D, extractor="test", checkpoint_sha256=None, config={"b": 1})
    return FeatureStoreWriter(out, **{**options, **overrides})


def _write_store(out: Path, order: list[str] = IDS, image_ids: list[str] = IDS) -> dict[str, ImageRegions]:
    regions = _regions()
    with _writer(out, image_ids) as writer:
        for image_id in order:
            if image_id == SKIPPED:
                writer.skip(image_id, "truncated", width=10, height=20)
            else:
                writer.write(image_id, regions[image_id], width=100 + len(image_id), height=50)
    return regions


def _expected(regions: dict[str, ImageRegions], image_id: str) -> tuple[np.ndarray, np.ndarray]:
    features, boxes = np.zeros((K, D), np.float16), np.zeros((K, 4), np.float32)
    if image_id != SKIPPED:
        count = len(regions[image_id].features)
        features[:count], boxes[:count] = regions[image_id].features.astype(np.float16), regions[image_id].boxes
    return features, boxes


def test_round_trip_in_shuffled_order(tmp_path: Path) -> None:
    order = list(np.random.default_rng(1).permutation(IDS))
    regions = _write_store(tmp_path / "store", order)
    store = FeatureStore.open(tmp_path / "store")
    assert (len(store), store.max_regions, store.dim, store.image_ids) == (len(IDS), K, D, IDS)
    features, mask, boxes = store.batch(np.arange(len(IDS)))
    assert features.dtype == np.float16 and boxes.dtype == np.float32 and mask.dtype == bool
    for row, image_id in enumerate(IDS):
        expected_features, expected_boxes = _expected(regions, image_id)
        np.testing.assert_array_equal(features[row], expected_features)
        np.testing.assert_array_equal(boxes[row], expected_boxes)
        valid = 0 if image_id == SKIPPED else COUNTS[row]
        assert mask[row].tolist() == [True] * valid + [False] * (K - valid)
    index = store.index.to_pydict()
    assert index["error"] == [None] * 5 + ["truncated", None]
    assert index["width"][5] == 10 and index["width"][0] == 104 and index["num_regions"][5] == 0
    meta = json.loads((tmp_path / "store" / "meta.json").read_text())
    assert meta == {
        "extractor": "test",
        "checkpoint_sha256": None,
        "num_images": 7,
        "max_regions": K,
        "dim": D,
        "dtype": "float16",
        "config": {"b": 1},
    }


def test_write_rows_gives_the_same_bytes_as_write(tmp_path: Path) -> None:
    regions = _write_store(tmp_path / "one")
    rows = [_expected(regions, image_id) for image_id in IDS]
    features = np.stack([row[0] for row in rows]).astype(np.float32)
    boxes = np.stack([row[1] for row in rows])
    features[1, 3], boxes[3, 2] = np.nan, 7.0  # padding is zeroed before any check
    with _writer(tmp_path / "bulk") as writer:
        writer.write_rows(0, features[:5], boxes[:5], np.array(COUNTS[:5]), [104] * 5, [50] * 5)
        writer.skip(SKIPPED, "truncated", width=10, height=20)
        writer.write_rows(6, features[6:], boxes[6:], np.array(COUNTS[6:]), [104], [50])
    for name in FILES:
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "bulk" / name).read_bytes(), name


def test_batch_restores_unsorted_and_repeated_rows(tmp_path: Path) -> None:
    _write_store(tmp_path / "store")
    store = FeatureStore.open(tmp_path / "store")
    features, mask, boxes = store.batch([6, 0, 6, 3])
    all_features, all_mask, all_boxes = store.batch(np.arange(len(IDS)))
    np.testing.assert_array_equal(features, all_features[[6, 0, 6, 3]])
    np.testing.assert_array_equal(mask, all_mask[[6, 0, 6, 3]])
    np.testing.assert_array_equal(boxes, all_boxes[[6, 0, 6, 3]])
    assert store.rows(["img3", "img0"]).tolist() == [3, 0]
    with pytest.raises(IndexError, match=r"\[7\]"):
        store.batch([0, 7])


def test_unknown_id_names_the_id_and_the_store(tmp_path: Path) -> None:
    _write_store(tmp_path / "store")
    store = FeatureStore.open(tmp_path / "store")
    with pytest.raises(KeyError) as caught:
        store.row_of("nope")
    assert isinstance(caught.value, UnknownImageError)
    assert "'nope'" in str(caught.value) and str(tmp_path / "store") in str(caught.value)


def test_pickling_reopens_instead_of_copying(tmp_path: Path) -> None:
    _write_store(tmp_path / "store")
    store = FeatureStore.open(tmp_path / "store")
    assert len(pickle.dumps(store)) < 1000
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(store)).batch([2])[0], store.batch([2])[0])


@pytest.mark.parametrize(
    ("image_id", "features", "boxes", "message"),
    [
        ("img0", np.full((1, D), np.nan), np.zeros((1, 4)), "NaN or Inf in the features of image.*img0"),
        ("img0", np.zeros((1, D)), np.array([[0, 0, np.inf, 1]]), "NaN or Inf in the boxes of image.*img0"),
        ("img0", np.full((1, D), 70000.0), np.zeros((1, 4)), "float16.*img0|img0.*float16"),
        ("img0", np.zeros((K + 1, D)), np.zeros((K + 1, 4)), "img0.*5 regions, more than max_regions=4"),
        ("img0", np.zeros((1, D + 1)), np.zeros((1, 4)), "img0.*dimension 9"),
    ],
)
def test_bad_rows_are_refused_naming_the_image(tmp_path: Path, image_id, features, boxes, message) -> None:
    with _writer(tmp_path / "store") as writer:
        with pytest.raises(InputError, match=message):
            regions = ImageRegions(features=features.astype(np.float32), boxes=boxes.astype(np.float32))
            writer.write(image_id, regions, width=1, height=1)
        writer.skip(image_id, "bad features")  # the refused row is still free
        for other in IDS[1:]:
            writer.skip(other, "unused")
    assert FeatureStore.open(tmp_path / "store").index.column("error")[0].as_py() == "bad features"


def test_unknown_and_repeated_writes_are_refused(tmp_path: Path) -> None:
    regions = _regions()
    with pytest.raises(InputError), _writer(tmp_path / "store") as writer:
        with pytest.raises(UnknownImageError, match="'other'"):
            writer.write("other", regions["img0"], width=1, height=1)
        writer.write("img0", regions["img0"], width=1, height=1)
        with pytest.raises(InputError, match=r"img0.*already"):
            writer.skip("img0", "again")
        with pytest.raises(InputError, match=r"img0.*already"):
            writer.write_rows(0, np.zeros((1, K, D)), np.zeros((1, K, 4)), np.array([0]))
    # the outer InputError: close() with six images missing, so no store was made
    assert not (tmp_path / "store").exists()


def test_duplicate_ids_and_bad_config_are_refused_up_front(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"duplicate image ids \['a'\]"):
        _writer(tmp_path / "store", ["a", "b", "a"])
    with pytest.raises(InputError, match="JSON"):
        _writer(tmp_path / "store", config={"path": Path("x")})
    assert list(tmp_path.iterdir()) == []


def test_an_exception_inside_the_block_leaves_no_store(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="boom"), _writer(tmp_path / "store") as writer:
        writer.write("img0", _regions()["img0"], width=1, height=1)
        raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


def test_a_failed_rewrite_leaves_the_existing_store_untouched(tmp_path: Path) -> None:
    _write_store(tmp_path / "store")
    before = {name: (tmp_path / "store" / name).read_bytes() for name in FILES}
    with pytest.raises(RuntimeError), _writer(tmp_path / "store"):
        raise RuntimeError("boom")
    missing = r"6 of 7 images were neither written nor skipped, the first: \['img1'"
    with pytest.raises(InputError, match=missing), _writer(tmp_path / "store") as writer:
        writer.skip("img0", "x")
    assert {name: (tmp_path / "store" / name).read_bytes() for name in FILES} == before
    assert [path.name for path in tmp_path.iterdir()] == ["store"]


def test_a_successful_rewrite_replaces_the_store(tmp_path: Path) -> None:
    _write_store(tmp_path / "store")
    with _writer(tmp_path / "store", ["x"]) as writer:
        writer.skip("x", "gone")
    assert FeatureStore.open(tmp_path / "store").image_ids == ["x"]


def _rewrite_meta(root: Path, **changes) -> None:
    meta = json.loads((root / "meta.json").read_text())
    (root / "meta.json").write_text(json.dumps({**meta, **changes}))


def _rewrite_index(root: Path, change) -> None:
    table = pq.read_table(root / "index.parquet")
    pq.write_table(change(table), root / "index.parquet")


def _set_column(table: pa.Table, name: str, values: list) -> pa.Table:
    column = table.schema.get_field_index(name)
    return table.set_column(column, table.schema.field(name), pa.array(values, table.schema.field(name).type))


CORRUPTIONS = {
    "missing file": (lambda root: (root / "boxes.npy").unlink(), r"missing \['boxes.npy'\]"),
    "shape": (
        lambda root: np.save(root / "regions.npy", np.zeros((7, K, D + 1), np.float16)),
        r"regions.npy: shape \(7, 4, 9\), but meta.json says \(7, 4, 8\)",
    ),
    "dtype": (
        lambda root: np.save(root / "regions.npy", np.zeros((7, K, D), np.float32)),
        "regions.npy: dtype float32, expected float16",
    ),
    "boxes shape": (
        lambda root: np.save(root / "boxes.npy", np.zeros((7, K, 5), np.float32)),
        r"boxes.npy: shape \(7, 4, 5\)",
    ),
    "meta type": (lambda root: _rewrite_meta(root, max_regions="4"), "meta.json: max_regions = '4', expected int"),
    "meta key": (lambda root: _rewrite_meta(root, dim=None), "meta.json: dim = None"),
    "meta dtype": (lambda root: _rewrite_meta(root, dtype="float32"), "dtype = 'float32', expected 'float16'"),
    "row count": (lambda root: _rewrite_meta(root, num_images=8), "index.parquet: 7 rows, but meta.json says num_"),
    "duplicate ids": (
        lambda root: _rewrite_index(root, lambda t: _set_column(t, "image_id", [*IDS[:6], "img0"])),
        r"index.parquet: duplicate image ids \['img0'\]",
    ),
    "num_regions": (
        lambda root: _rewrite_index(root, lambda t: _set_column(t, "num_regions", [5, *COUNTS[1:]])),
        "num_regions = 5 for image 'img0', but meta.json says max_regions = 4",
    ),
    "null num_regions": (
        lambda root: _rewrite_index(
            root, lambda t: t.set_column(4, "num_regions", pa.array([None, *COUNTS[1:]], pa.int32()))
        ),
        "index.parquet: column num_regions holds 1 nulls",
    ),
    "column type": (
        lambda root: _rewrite_index(root, lambda t: t.set_column(4, "num_regions", pa.array(COUNTS, pa.int64()))),
        "column num_regions is int64, expected int32",
    ),
}


@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
def test_open_refuses_a_corrupted_store(tmp_path: Path, name: str) -> None:
    _write_store(tmp_path / "store")
    corrupt, message = CORRUPTIONS[name]
    corrupt(tmp_path / "store")
    with pytest.raises(InputError, match=message):
        FeatureStore.open(tmp_path / "store")


def test_check_finite_names_the_first_bad_images(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Values written into a store after it was made are caught the next time it is opened (a store read before
    stays usable for the check itself); a store found finite is not read again while its arrays are unchanged."""
    _write_store(tmp_path / "store")
    opened = FeatureStore.open(tmp_path / "store")
    checks: list[str] = []
    real = FeatureStore.check_finite
    monkeypatch.setattr(FeatureStore, "check_finite", lambda self, **kw: checks.append("x") or real(self, **kw))
    FeatureStore.open(tmp_path / "store")
    assert checks == []  # verified when first opened: remembered
    regions = np.load(tmp_path / "store" / "regions.npy", mmap_mode="r+")
    regions[3, 0, 0], regions[6, 1, 2] = np.inf, np.nan
    regions.flush()
    del regions
    with pytest.raises(InputError, match=r"regions.npy: NaN or Inf in the rows of image\(s\) \['img3'\]"):
        opened.check_finite(chunk_rows=2)
    with pytest.raises(InputError, match=r"regions\.npy: NaN or Inf in the rows of image\(s\) \['img3', 'img6'\]"):
        FeatureStore.open(tmp_path / "store")


def _write_shards(root: Path, shards: list[list[str]]) -> list[Path]:
    regions, paths = _regions(), []
    for number, shard_ids in enumerate(shards):
        paths.append(root / f"shard{number}")
        with _writer(paths[-1], shard_ids) as writer:
            for image_id in shard_ids:
                if image_id == SKIPPED:
                    writer.skip(image_id, "truncated", width=10, height=20)
                else:
                    writer.write(image_id, regions[image_id], width=100 + len(image_id), height=50)
    return paths


@pytest.mark.parametrize("chunk_rows", [2, 3])
def test_merged_shards_equal_a_single_writer_byte_for_byte(tmp_path: Path, chunk_rows: int) -> None:
    _write_store(tmp_path / "single")
    # img5 (skipped) between img3 and img4: consecutive output rows, but not consecutive shard rows
    shards = _write_shards(tmp_path, [["img3", "img5", "img4"], ["img0", "img2"], ["img6", "img1"]])
    merge_stores(shards, tmp_path / "merged", image_ids=IDS, chunk_rows=chunk_rows)
    for name in FILES:
        assert (tmp_path / "single" / name).read_bytes() == (tmp_path / "merged" / name).read_bytes(), name


def test_merge_refuses_disagreeing_or_overlapping_shards(tmp_path: Path) -> None:
    shards = _write_shards(tmp_path, [IDS[:3], IDS[3:]])
    _rewrite_meta(shards[1], checkpoint_sha256="abc")
    with pytest.raises(InputError, match=r"shard1: checkpoint_sha256 = 'abc', but .*shard0 has None"):
        merge_stores(shards, tmp_path / "merged", image_ids=IDS)
    _rewrite_meta(shards[1], checkpoint_sha256=None)
    with pytest.raises(InputError, match=r"2 images are in no shard, e.g. \['img5', 'img6'\]"):
        merge_stores(shards[:1] + _write_shards(tmp_path / "more", [IDS[3:5]]), tmp_path / "merged", image_ids=IDS)
    with pytest.raises(InputError, match="'img0' is in two shards"):
        merge_stores([*shards, shards[0]], tmp_path / "merged", image_ids=IDS)
    with pytest.raises(InputError, match=r"shard1: 4 images are not among the ids to merge"):
        merge_stores(shards, tmp_path / "merged", image_ids=IDS[:3])
    assert not (tmp_path / "merged").exists()
