"""Karpathy split-file adapter on small Flickr30K- and COCO-style files written in tmp_path."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from common.errors import InputError
from corpora.karpathy import read_karpathy


def sentences(*texts: str) -> list[dict[str, Any]]:
    return [{"raw": text, "tokens": text.lower().split(), "sentid": index} for index, text in enumerate(texts)]


def flickr_entry(filename: str, split: str, count: int = 5) -> dict[str, Any]:
    texts = [f"{filename} caption {n} " for n in range(1, count + 1)]  # trailing space as in the real files
    return {
        "filename": filename,
        "imgid": 0,
        "split": split,
        "sentids": list(range(count)),
        "sentences": sentences(*texts),
    }


def coco_entry(cocoid: int, filepath: str, split: str, count: int = 5) -> dict[str, Any]:
    entry = flickr_entry(f"COCO_{filepath}_{cocoid:012d}.jpg", split, count)
    return {**entry, "filepath": filepath, "cocoid": cocoid}


def write_json(path: Path, entries: list[dict[str, Any]], dataset: str = "flickr30k") -> Path:
    path.write_text(json.dumps({"images": entries, "dataset": dataset}), encoding="utf-8")
    return path


def test_flickr_style_file(tmp_path: Path) -> None:
    entries = [flickr_entry("11.jpg", "train"), flickr_entry("22.jpg", "test"), flickr_entry("33.jpg", "val")]
    corpus = read_karpathy(write_json(tmp_path / "d.json", entries), dataset="flickr30k", image_root=None)
    images = corpus.images.to_pydict()
    assert images["image_id"] == ["11", "22", "33"]  # file order, not grouped by split
    assert images["split"] == ["train", "test", "val"]
    assert images["path"] == ["11.jpg", "22.jpg", "33.jpg"]
    assert images["dataset"] == ["flickr30k"] * 3
    captions = corpus.captions.to_pydict()
    assert captions["caption_id"][:6] == ["11#en#c1", "11#en#c2", "11#en#c3", "11#en#c4", "11#en#c5", "22#en#c1"]
    assert captions["text"][0] == "11.jpg caption 1"
    assert set(captions["kind"]) == {"comparable"} and set(captions["origin"]) == {"human"}
    assert corpus.captions.num_rows == 15


def test_coco_style_ids_paths_restval_and_extra_captions(tmp_path: Path) -> None:
    entries = [
        coco_entry(391895, "val2014", "test", count=7),
        coco_entry(9, "train2014", "restval"),
        coco_entry(25, "train2014", "train", count=6),
    ]
    path = write_json(tmp_path / "dataset_coco.json", entries, dataset="coco")
    corpus = read_karpathy(path, dataset="coco", image_root=None)
    assert corpus.images.column("image_id").to_pylist() == ["391895", "9", "25"]
    assert corpus.images.column("split").to_pylist() == ["test", "train", "train"]
    assert corpus.images.column("path")[0].as_py() == "val2014/COCO_val2014_000000391895.jpg"
    assert corpus.captions.num_rows == 15  # the 6th and 7th captions are dropped
    assert corpus.captions.column("caption_id").to_pylist()[4] == "391895#en#c5"
    dropped = read_karpathy(path, dataset="coco", image_root=None, restval="drop", captions_per_image=None)
    assert dropped.images.column("image_id").to_pylist() == ["391895", "25"]
    assert dropped.captions.num_rows == 13  # all captions kept


def test_image_sizes_under_the_image_root(tmp_path: Path) -> None:
    path = write_json(tmp_path / "d.json", [coco_entry(1, "val2014", "val"), coco_entry(2, "train2014", "train")])
    for subfolder in ("val2014", "train2014"):
        (tmp_path / "images" / subfolder).mkdir(parents=True)
    Image.new("RGB", (64, 48)).save(tmp_path / "images" / "val2014" / "COCO_val2014_000000000001.jpg")
    Image.new("RGB", (30, 40)).save(tmp_path / "images" / "train2014" / "COCO_train2014_000000000002.jpg")
    corpus = read_karpathy(path, dataset="coco", image_root=tmp_path / "images", lang="en")
    assert corpus.images.column("width").to_pylist() == [64, 30]
    assert corpus.images.column("height").to_pylist() == [48, 40]


def test_missing_image_names_the_entry(tmp_path: Path) -> None:
    path = write_json(tmp_path / "d.json", [flickr_entry("1.jpg", "train"), flickr_entry("2.jpg", "test")])
    (tmp_path / "images").mkdir()
    Image.new("RGB", (5, 5)).save(tmp_path / "images" / "1.jpg")
    with pytest.raises(InputError, match=r"1 of 2 listed images are missing, first: 2\.jpg \(listed at .*images\[1\]"):
        read_karpathy(path, dataset="flickr30k", image_root=tmp_path / "images")


def test_too_few_captions_names_the_image(tmp_path: Path) -> None:
    path = write_json(tmp_path / "d.json", [flickr_entry("1.jpg", "train"), flickr_entry("2.jpg", "val", count=4)])
    with pytest.raises(InputError, match=r"images\[1\] \(2\.jpg\): 4 captions, expected at least 5"):
        read_karpathy(path, dataset="flickr30k", image_root=None)


def test_duplicate_images(tmp_path: Path) -> None:
    path = write_json(tmp_path / "d.json", [flickr_entry("1.jpg", "train"), flickr_entry("1.jpg", "test")])
    with pytest.raises(InputError, match=r"duplicate image '1'.*images\[0\].*images\[1\]"):
        read_karpathy(path, dataset="flickr30k", image_root=None)


def test_unknown_split_and_missing_field(tmp_path: Path) -> None:
    path = write_json(tmp_path / "d.json", [flickr_entry("1.jpg", "dev")])
    with pytest.raises(InputError, match=r"images\[0\]: split 'dev' is not one of"):
        read_karpathy(path, dataset="flickr30k", image_root=None)
    entry = flickr_entry("1.jpg", "train")
    del entry["sentences"]
    path = write_json(tmp_path / "e.json", [entry])
    with pytest.raises(InputError, match=r"images\[0\]: field 'sentences' is missing"):
        read_karpathy(path, dataset="flickr30k", image_root=None)


def test_empty_raw_caption(tmp_path: Path) -> None:
    entry = flickr_entry("1.jpg", "train")
    entry["sentences"][2]["raw"] = "  "
    path = write_json(tmp_path / "d.json", [entry])
    with pytest.raises(InputError, match=r"images\[0\]: sentences\[2\] has no 'raw' text"):
        read_karpathy(path, dataset="flickr30k", image_root=None)


def test_invalid_json_and_wrong_language(tmp_path: Path) -> None:
    path = tmp_path / "d.json"
    path.write_text('{"images": [\n  {"filename": }\n]}', encoding="utf-8")
    with pytest.raises(InputError, match=rf"{re.escape(str(path))}:2:\d+: not valid JSON"):
        read_karpathy(path, dataset="flickr30k", image_root=None)
    path = write_json(tmp_path / "e.json", [flickr_entry("1.jpg", "train")])
    with pytest.raises(InputError, match="unknown language code 'EN'"):
        read_karpathy(path, dataset="flickr30k", image_root=None, lang="EN")


def test_byte_order_mark_and_deeply_nested_json(tmp_path: Path) -> None:
    """A UTF-8 byte-order mark (as Windows editors write) is no part of the JSON; a file nested past Python's
    recursion limit is bad input named as such, not a RecursionError."""
    plain = write_json(tmp_path / "plain.json", [flickr_entry("11.jpg", "train")])
    marked = tmp_path / "marked.json"
    marked.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes())
    corpus = read_karpathy(marked, dataset="flickr30k", image_root=None)
    assert corpus.images["image_id"].to_pylist() == ["11"]
    assert corpus.captions.equals(read_karpathy(plain, dataset="flickr30k", image_root=None).captions)
    nested = tmp_path / "nested.json"
    nested.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    with pytest.raises(InputError, match=rf"^{re.escape(str(nested))}: JSON nested too deeply"):
        read_karpathy(nested, dataset="flickr30k", image_root=None)
