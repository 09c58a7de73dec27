"""SCAN precomp caption adapter on small folders written in tmp_path."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from common.errors import InputError
from corpora.scan_captions import read_scan_captions

SPLITS = {"train": "train", "val": "dev", "test": "test"}


def write_caps(root: Path, stem: str, images: int, per_image: int = 5) -> Path:
    path = root / f"{stem}_caps.txt"
    path.write_text("".join(f"{stem} image {i} caption {n}\n" for i in range(images) for n in range(1, per_image + 1)))
    return path


def write_folder(root: Path, per_image: int = 5) -> None:
    for stem, images in [("train", 3), ("dev", 2), ("test", 1)]:
        write_caps(root, stem, images, per_image)


def test_captions_grouped_by_image_without_ids(tmp_path: Path) -> None:
    write_folder(tmp_path)
    corpus = read_scan_captions(tmp_path, splits=SPLITS, dataset="f30k_precomp")
    images = corpus.images.to_pydict()
    assert images["image_id"] == [
        "train-000000",
        "train-000001",
        "train-000002",
        "dev-000000",
        "dev-000001",
        "test-000000",
    ]
    assert images["path"] == images["image_id"]
    assert images["split"] == ["train"] * 3 + ["val"] * 2 + ["test"]
    assert images["width"] == [None] * 6
    captions = corpus.captions.to_pydict()
    assert captions["caption_id"][5:7] == ["train-000001#en#c1", "train-000001#en#c2"]
    assert captions["text"][5] == "train image 1 caption 1"
    assert captions["split"][-1] == "test" and captions["text"][-1] == "test image 0 caption 5"
    assert len(captions["caption_id"]) == 30


def test_ids_per_image(tmp_path: Path) -> None:
    write_folder(tmp_path)
    (tmp_path / "dev_ids.txt").write_text("391895\n522418\n")
    corpus = read_scan_captions(tmp_path, splits={"val": "dev"}, dataset="coco_precomp")
    assert corpus.images.column("image_id").to_pylist() == ["391895", "522418"]
    assert corpus.captions.column("caption_id").to_pylist()[5] == "522418#en#c1"


def test_ids_per_caption(tmp_path: Path) -> None:
    write_folder(tmp_path, per_image=2)
    (tmp_path / "dev_ids.txt").write_text("7\n7\n8\n8\n")
    corpus = read_scan_captions(tmp_path, splits={"val": "dev"}, dataset="x", captions_per_image=2)
    assert corpus.images.column("image_id").to_pylist() == ["7", "8"]
    (tmp_path / "dev_ids.txt").write_text("7\n7\n8\n9\n")
    with pytest.raises(InputError, match=r"dev_ids\.txt:3-4: per-caption ids of one image differ"):
        read_scan_captions(tmp_path, splits={"val": "dev"}, dataset="x", captions_per_image=2)


def test_ids_file_of_wrong_length(tmp_path: Path) -> None:
    write_folder(tmp_path)
    (tmp_path / "test_ids.txt").write_text("1\n2\n")
    expected = r"test_ids\.txt has 2 ids; expected one per image \(1\) or one per caption \(5\)"
    with pytest.raises(InputError, match=expected):
        read_scan_captions(tmp_path, splits=SPLITS, dataset="x")


def test_indivisible_caption_count(tmp_path: Path) -> None:
    write_folder(tmp_path)
    path = tmp_path / "dev_caps.txt"
    path.write_text(path.read_text() + "one caption too many\n")
    with pytest.raises(InputError, match=rf"{re.escape(str(path))}: 11 captions is not a multiple of 5"):
        read_scan_captions(tmp_path, splits=SPLITS, dataset="x")


def test_duplicate_ids_and_empty_line(tmp_path: Path) -> None:
    write_folder(tmp_path)
    (tmp_path / "train_ids.txt").write_text("1\n2\n3\n")
    (tmp_path / "test_ids.txt").write_text("2\n")
    with pytest.raises(InputError, match=r"duplicate image '2'.*train_ids\.txt:2.*test_ids\.txt:1"):
        read_scan_captions(tmp_path, splits=SPLITS, dataset="x")
    (tmp_path / "train_ids.txt").unlink()
    path = write_caps(tmp_path, "train", 1)
    path.write_text(path.read_text().replace("train image 0 caption 3", " "))
    with pytest.raises(InputError, match=rf"{re.escape(str(path))}:3: empty line"):
        read_scan_captions(tmp_path, splits={"train": "train"}, dataset="x")


def test_missing_caption_file_and_bad_split(tmp_path: Path) -> None:
    write_folder(tmp_path)
    with pytest.raises(InputError, match=r"testall_caps\.txt: file not found"):
        read_scan_captions(tmp_path, splits={"test": "testall"}, dataset="x")
    with pytest.raises(InputError, match="scan splits"):
        read_scan_captions(tmp_path, splits={"testall": "testall"}, dataset="x")
