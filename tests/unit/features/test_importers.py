"""Importers: SCAN precomp arrays and bottom-up-attention TSV files against hand-built rows."""

from __future__ import annotations

import base64
import logging
from pathlib import Path

import numpy as np
import pytest

from common.errors import InputError
from features.importers import import_butd_tsv, import_scan_npy, import_scan_splits
from features.scan_pairing import pairing_files
from features.store import FeatureStore

K, D = 3, 6


def _scan_array(count: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(0, 20, (count, K, D)).astype(np.float32)


def _read_all(path: Path) -> tuple[FeatureStore, np.ndarray, np.ndarray, np.ndarray]:
    store = FeatureStore.open(path)
    return (store, *store.batch(np.arange(len(store))))


def test_scan_import_round_trips_through_float16(tmp_path: Path) -> None:
    array = _scan_array(5)
    np.save(tmp_path / "test_ims.npy", array)
    ids = [f"i{index}" for index in range(5)]
    import_scan_npy(tmp_path / "test_ims.npy", image_ids=ids, out_dir=tmp_path / "store", chunk_rows=2)
    store, features, mask, boxes = _read_all(tmp_path / "store")
    assert store.image_ids == ids and store.meta["extractor"] == "scan-precomp"
    np.testing.assert_array_equal(features, array.astype(np.float16))
    assert mask.all() and not boxes.any()
    assert store.index.column("width").null_count == 5
    assert store.meta["config"] == {"format": "scan-precomp", "files": [{"name": "test_ims.npy", "rows_per_image": 1}]}


def test_scan_import_keeps_every_fifth_row_of_a_repeated_array(tmp_path: Path, caplog) -> None:
    array = _scan_array(4)
    np.save(tmp_path / "train_ims.npy", np.repeat(array, 5, axis=0))
    with caplog.at_level(logging.INFO, logger="features.importers"):
        import_scan_npy(
            tmp_path / "train_ims.npy",
            image_ids=["a", "b", "c", "d"],
            out_dir=tmp_path / "store",
            widths=[1, 2, None, 4],
            heights=[5, 6, None, 8],
            chunk_rows=3,
        )
    assert "20 rows for 4 images, each repeated 5 times" in caplog.text
    store, features, _, _ = _read_all(tmp_path / "store")
    np.testing.assert_array_equal(features, array.astype(np.float16))
    assert store.index.column("width").to_pylist() == [1, 2, None, 4]


def test_scan_import_refuses_mismatched_counts(tmp_path: Path) -> None:
    np.save(tmp_path / "dev_ims.npy", _scan_array(7))
    with pytest.raises(InputError, match=r"dev_ims.npy: 7 feature rows for 3 image ids; expected 3, or 15"):
        import_scan_npy(tmp_path / "dev_ims.npy", image_ids=["a", "b", "c"], out_dir=tmp_path / "store")
    np.save(tmp_path / "dev_ims.npy", _scan_array(10))  # 5x the ids, but rows that are not repeats
    with pytest.raises(InputError, match="not one repeated image"):
        import_scan_npy(tmp_path / "dev_ims.npy", image_ids=["a", "b"], out_dir=tmp_path / "store")
    assert not (tmp_path / "store").exists()


def test_scan_import_names_the_image_of_a_bad_row(tmp_path: Path) -> None:
    array = _scan_array(3)
    array[2, 1, 0] = np.nan
    np.save(tmp_path / "test_ims.npy", array)
    with pytest.raises(InputError, match=r"test_ims.npy: NaN or Inf in the features of image\(s\) \['c'\]"):
        import_scan_npy(tmp_path / "test_ims.npy", image_ids=["a", "b", "c"], out_dir=tmp_path / "store")
    assert not (tmp_path / "store").exists()


def test_scan_splits_go_into_one_store(tmp_path: Path) -> None:
    train, dev = _scan_array(3, seed=1), _scan_array(2, seed=2)
    np.save(tmp_path / "train_ims.npy", np.repeat(train, 5, axis=0))
    np.save(tmp_path / "dev_ims.npy", dev.astype(np.float16))
    ids = {"val": ["v0", "v1"], "train": ["t0", "t1", "t2"]}
    _write_lines(tmp_path / "train_ids.txt", ids["train"])
    _write_lines(tmp_path / "dev_ids.txt", ids["val"])
    import_scan_splits(tmp_path, {"train": "train", "val": "dev"}, ids, tmp_path / "store", captions_by_split={})
    store, features, _, _ = _read_all(tmp_path / "store")
    assert store.image_ids == ["t0", "t1", "t2", "v0", "v1"]
    np.testing.assert_array_equal(features, np.concatenate([train, dev]).astype(np.float16))
    np.save(tmp_path / "dev_ims.npy", np.zeros((2, K, D + 1), np.float32))
    with pytest.raises(InputError, match=r"dev_ims.npy: regions of shape \(3, 7\), but .*train_ims.npy has \(3, 6\)"):
        import_scan_splits(tmp_path, {"train": "train", "val": "dev"}, ids, tmp_path / "other", captions_by_split={})


def _write_lines(path: Path, lines: list[str]) -> None:
    path.write_text("".join(f"{line}\n" for line in lines))


def _import_test_split(root: Path, ids: list[str], captions: list[list[str]] | None = None) -> None:
    import_scan_splits(
        root, {"test": "test"}, {"test": ids}, root / "store", captions_by_split={"test": captions or []}
    )


def test_scan_import_checks_an_ids_file_per_image_or_per_caption(tmp_path: Path) -> None:
    """COCO precomp ids (numeric COCO ids, the karpathy adapter's image ids) must follow the prepared order."""
    np.save(tmp_path / "test_ims.npy", _scan_array(3))
    _write_lines(tmp_path / "test_ids.txt", ["391895", "522418", "184613"])
    _import_test_split(tmp_path, ["391895", "522418", "184613"])
    assert FeatureStore.open(tmp_path / "store").image_ids == ["391895", "522418", "184613"]
    with pytest.raises(
        InputError,
        match=r"^.*test_ids\.txt: line 2: expected image id '184613' \(prepared image 1 of the split\), "
        r"found '522418'$",
    ):
        import_scan_splits(
            tmp_path,
            {"test": "test"},
            {"test": ["391895", "184613", "522418"]},
            tmp_path / "other",
            captions_by_split={},
        )
    _write_lines(tmp_path / "test_ids.txt", ["7"] * 5 + ["8"] * 5 + ["8", "9", "9", "9", "9"])  # one per caption
    with pytest.raises(InputError, match=r"test_ids\.txt: line 11: expected image id '9' .*found '8'$"):
        _import_test_split(tmp_path, ["7", "8", "9"])
    _write_lines(tmp_path / "test_ids.txt", ["7", "8"])
    with pytest.raises(InputError, match=r"test_ids\.txt: 2 ids lines for 3 prepared images; expected a whole"):
        _import_test_split(tmp_path, ["7", "8", "9"])
    assert not (tmp_path / "other").exists()


def test_scan_import_without_ids_checks_the_captions_word_for_word(tmp_path: Path) -> None:
    """Flickr30K precomp: <stem>_caps.txt (SCAN's tokenised text) against the prepared captions, in order."""
    np.save(tmp_path / "test_ims.npy", np.repeat(_scan_array(2), 5, axis=0))  # rows_per_image 5
    captions = [["A dog runs.", "The dog is brown."], ["Two cats, asleep.", "Cats on a sofa."]]
    lines = ["a dog runs .", "the dog is brown .", "two cats , asleep .", "cats on a sofa ."]
    _write_lines(tmp_path / "test_caps.txt", lines)
    _import_test_split(tmp_path, ["x", "y"], captions)
    assert FeatureStore.open(tmp_path / "store").image_ids == ["x", "y"]
    _write_lines(tmp_path / "test_caps.txt", ["a dog runs .", "the dog is brown .", "cats on a sofa .", "two cats ."])
    with pytest.raises(
        InputError,
        match=r"^.*test_caps\.txt: line 3: expected 'Two cats, asleep\.' \(caption 1 of prepared image 'y'\), "
        r"found 'cats on a sofa \.'$",
    ):
        _import_test_split(tmp_path, ["x", "y"], captions)
    _write_lines(tmp_path / "test_caps.txt", ["a dog runs", "the dog is brown", "x", "two cats asleep", "cats", "y"])
    with pytest.raises(InputError, match=r"test_caps\.txt: line 3: expected no caption 3 \(the image has 2\)"):
        _import_test_split(tmp_path, ["x", "y"], captions)


def test_scan_import_refuses_an_array_with_neither_ids_nor_captions(tmp_path: Path) -> None:
    np.save(tmp_path / "test_ims.npy", _scan_array(2))
    with pytest.raises(InputError, match=r"neither test_ids\.txt nor test_caps\.txt next to test_ims\.npy"):
        _import_test_split(tmp_path, ["x", "y"])
    assert not (tmp_path / "store").exists()


def _b64(array: np.ndarray) -> str:
    return base64.b64encode(array.astype("<f4").tobytes()).decode("ascii")


def _tsv_line(image_id: str, width: int, height: int, boxes: np.ndarray, features: np.ndarray) -> str:
    return "\t".join([image_id, str(width), str(height), str(len(boxes)), _b64(boxes), _b64(features)]) + "\n"


def _tsv_rows(counts: dict[str, int], seed: int = 0) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return {
        image_id: (rng.uniform(0, 300, (count, 4)).astype(np.float32), rng.uniform(0, 9, (count, D)).astype(np.float32))
        for image_id, count in counts.items()
    }


def _write_tsv(path: Path, rows: dict[str, tuple[np.ndarray, np.ndarray]], header: bool = False) -> Path:
    lines = ["\t".join(("image_id", "image_w", "image_h", "num_boxes", "boxes", "features")) + "\n"] if header else []
    lines += [_tsv_line(image_id, 640, 480 + index, *row) for index, (image_id, row) in enumerate(rows.items())]
    path.write_text("".join(lines))
    return path


def test_tsv_import_pads_adaptive_rows_and_keeps_file_order(tmp_path: Path) -> None:
    first = _tsv_rows({"391895": 2, "522418": 3}, seed=1)
    second = _tsv_rows({"184613": 1, "318219": 3}, seed=2)
    paths = [_write_tsv(tmp_path / "a.tsv", first, header=True), _write_tsv(tmp_path / "b.tsv", second)]
    import_butd_tsv(paths, out_dir=tmp_path / "store", max_regions=K)
    store, features, mask, boxes = _read_all(tmp_path / "store")
    rows = {**first, **second}
    assert store.image_ids == list(rows)
    for index, (row_boxes, row_features) in enumerate(rows.values()):
        count = len(row_boxes)
        np.testing.assert_array_equal(features[index, :count], row_features.astype(np.float16))
        np.testing.assert_array_equal(boxes[index, :count], row_boxes)
        assert not features[index, count:].any() and not boxes[index, count:].any()
        assert mask[index].tolist() == [True] * count + [False] * (K - count)
    assert store.index.column("height").to_pylist() == [480, 481, 480, 481]
    assert store.meta["config"] == {"format": "butd-tsv", "files": ["a.tsv", "b.tsv"], "max_regions": K}


def test_tsv_import_follows_the_prepared_ids(tmp_path: Path, caplog) -> None:
    rows = _tsv_rows({"a": 1, "b": 2, "c": 3, "extra": 5})  # the ignored image may exceed max_regions
    path = _write_tsv(tmp_path / "f.tsv", rows)
    with caplog.at_level(logging.INFO, logger="features.importers"):
        import_butd_tsv([path], out_dir=tmp_path / "store", max_regions=K, image_ids=["c", "a", "b"])
    assert "ignoring 1 TSV images" in caplog.text
    store, features, _, _ = _read_all(tmp_path / "store")
    assert store.image_ids == ["c", "a", "b"]
    np.testing.assert_array_equal(features[0], rows["c"][1].astype(np.float16))
    with pytest.raises(InputError, match=r"2 of 3 prepared images are not in .*e.g. \['x', 'y'\]; the TSV ids look"):
        import_butd_tsv([path], out_dir=tmp_path / "other", max_regions=K, image_ids=["x", "a", "y"])


def _replace_field(path: Path, line: int, field: int, value: str) -> None:
    lines = path.read_text().splitlines(keepends=True)
    fields = lines[line - 1].rstrip("\n").split("\t")
    fields[field] = value
    lines[line - 1] = "\t".join(fields) + "\n"
    path.write_text("".join(lines))


@pytest.mark.parametrize(
    ("line", "field", "value", "message"),
    [
        (2, 5, "not base64!", r"f.tsv:2: features is not valid base64"),
        (2, 4, _b64(np.zeros(5)), r"f.tsv:2: boxes holds 20 bytes, expected 32 = float32 \(2, 4\)"),
        (3, 5, _b64(np.zeros(3 * D + 1)), r"f.tsv:3: features holds 76 bytes, expected 72"),
        (3, 3, "4", r"f.tsv:3: 4 boxes, more than max_regions=3 \(set max_regions .* 100 for the 10-100 adaptive"),
        (1, 1, "wide", r"f.tsv:1: image_id, image_w, image_h, num_boxes"),
        (2, 0, "a", r"f.tsv:2: image id 'a' again \(first at .*f.tsv:1\)"),
    ],
)
def test_tsv_import_names_the_bad_line(tmp_path: Path, line: int, field: int, value: str, message: str) -> None:
    path = _write_tsv(tmp_path / "f.tsv", _tsv_rows({"a": 1, "b": 2, "c": 3}))
    _replace_field(path, line, field, value)
    with pytest.raises(InputError, match=message):
        import_butd_tsv([path], out_dir=tmp_path / "store", max_regions=K)
    assert list(tmp_path.iterdir()) == [path]


def test_tsv_import_refuses_other_layouts_and_bad_values(tmp_path: Path) -> None:
    path = tmp_path / "f.tsv"
    path.write_text("1\t2\t3\n")
    with pytest.raises(InputError, match=r"f.tsv:1: 3 tab-separated fields, expected 6"):
        import_butd_tsv([path], out_dir=tmp_path / "store")
    rows = _tsv_rows({"a": 2})
    rows["a"][1][1, 0] = np.inf
    _write_tsv(path, rows)
    with pytest.raises(InputError, match=r"f.tsv:1: NaN or Inf in the features of image\(s\) \['a'\]"):
        import_butd_tsv([path], out_dir=tmp_path / "store")


def test_pairing_files_name_what_the_import_of_a_split_reads(tmp_path: Path) -> None:
    """The features stage's dependencies per split: the array, then the ids file if any, else the captions file."""
    _write_lines(tmp_path / "train_ids.txt", ["1"])
    assert pairing_files(tmp_path, "train") == [tmp_path / "train_ims.npy", tmp_path / "train_ids.txt"]
    assert pairing_files(tmp_path, "dev") == [tmp_path / "dev_ims.npy", tmp_path / "dev_caps.txt"]
