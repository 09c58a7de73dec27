"""Extra evaluation sets of a Multi30K-layout corpus: read beside the canonical splits, stored as ``eval:<name>``."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from PIL import Image

from common.checks import SettingError
from common.config import build
from common.errors import InputError
from common.files import write_text
from corpora.adapters import read_corpus
from corpora.languages import Languages
from corpora.multi30k import Multi30kConfig, Multi30kEvalSet, Multi30kSplit, read_multi30k
from corpora.prepared import count_captions, read_prepared, write_prepared
from corpora.tables import eval_set_name, eval_split, images_table, validate_images

SPLITS = {
    "train": Multi30kSplit(task1="train", task2="train"),
    "val": Multi30kSplit(task1="val", task2="val"),
    "test": Multi30kSplit(task1="test_2016_flickr", task2="test_2016"),
}
EVAL_SETS = {
    "test2017": Multi30kEvalSet(task1="test_2017_flickr"),
    "mscoco2017": Multi30kEvalSet(task1="test_2017_mscoco", images="mscoco"),
    "test2018": Multi30kEvalSet(task1="test_2018_flickr"),
}
# file stem -> image list lines (test_2017_mscoco.txt appends "#<COCO caption id>", as the public file does)
LISTS = {
    "train": ["a1.jpg", "a2.jpg", "a3.jpg"],
    "val": ["b1.jpg"],
    "test_2016_flickr": ["c1.jpg", "c2.jpg"],
    "test_2017_flickr": ["d1.jpg", "d2.jpg", "d3.jpg"],
    "test_2017_mscoco": ["COCO_val2014_000000000042.jpg#657409", "COCO_train2014_000000000073.jpg#367178"],
    "test_2018_flickr": ["e1.jpg", "e2.jpg"],
}
TASK2 = {"train": "train", "val": "val", "test_2016_flickr": "test_2016"}  # task2 stems of the canonical splits
LANGUAGES = {stem: ("en", "de", "fr") for stem in LISTS} | {"test_2018_flickr": ("en",)}  # 2018: English only


def _lines(lines: list[str]) -> str:
    return "".join(f"{line}\n" for line in lines)


def write_multi30k(root: Path, images: Path | None = None) -> None:
    """A miniature Multi30K with test_2016_flickr as the test split and the three later test sets; with ``images``,
    the Flickr images in it and the COCO ones in ``images/mscoco``."""
    for stem, lines in LISTS.items():
        names = [line.partition("#")[0] for line in lines]
        write_text(root / "task1" / "image_splits" / f"{stem}.txt", _lines(lines))
        for lang in LANGUAGES[stem]:
            write_text(root / "task1" / "raw" / f"{stem}.{lang}", _lines([f"{lang} {stem} {n}" for n in names]))
        if stem in TASK2:
            write_text(root / "task2" / "image_splits" / f"{TASK2[stem]}_images.txt", _lines(names))
            for number in (1, 2):
                for lang in ("en", "de"):
                    text = _lines([f"{lang} {number} {n}" for n in names])
                    write_text(root / "task2" / "raw" / f"{TASK2[stem]}.{number}.{lang}", text)
        if images is not None:
            folder = images / "mscoco" if "mscoco" in stem else images
            folder.mkdir(parents=True, exist_ok=True)
            for number, name in enumerate(names):
                Image.new("RGB", (10 + number, 7)).save(folder / name)


def read(root: Path, image_root: Path | None = None, **overrides: object):
    arguments: dict[str, object] = {
        "languages": ["en", "de", "fr"],
        "splits": SPLITS,
        "image_root": image_root,
        "eval_sets": EVAL_SETS,
    }
    return read_multi30k(root, **(arguments | overrides))  # type: ignore[arg-type]


def test_eval_split_names_round_trip() -> None:
    assert eval_split("test2017") == "eval:test2017"
    assert eval_set_name("eval:test2017") == "test2017"
    assert eval_set_name("test") is None


def test_eval_sets_follow_the_canonical_splits_in_settings_order(tmp_path: Path) -> None:
    write_multi30k(tmp_path)
    images = read(tmp_path).images.to_pydict()
    assert images["split"] == (
        ["train"] * 3 + ["val"] + ["test"] * 2 + ["eval:test2017"] * 3 + ["eval:mscoco2017"] * 2 + ["eval:test2018"] * 2
    )
    assert images["image_id"][6:] == [
        "d1",
        "d2",
        "d3",
        "COCO_val2014_000000000042",
        "COCO_train2014_000000000073",
        "e1",
        "e2",
    ]
    # the COCO images' paths lie in the set's own folder; the suffix after '#' is not part of the file name
    assert images["path"][9:11] == ["mscoco/COCO_val2014_000000000042.jpg", "mscoco/COCO_train2014_000000000073.jpg"]


def test_eval_sets_record_the_languages_they_have(tmp_path: Path) -> None:
    write_multi30k(tmp_path)
    captions = read(tmp_path).captions
    per_split = Counter(zip(captions.column("split").to_pylist(), captions.column("lang").to_pylist(), strict=True))
    assert per_split["eval:test2017", "en"] == 3 and per_split["eval:test2017", "fr"] == 3
    assert per_split["eval:mscoco2017", "de"] == 2
    assert per_split["eval:test2018", "en"] == 2
    assert per_split["eval:test2018", "de"] == 0 and per_split["eval:test2018", "fr"] == 0  # absent: left out
    first = captions.filter(pa.compute.equal(captions.column("split"), "eval:test2018")).to_pylist()[0]
    assert first == {
        "caption_id": "e1#en#t",
        "image_id": "e1",
        "split": "eval:test2018",
        "lang": "en",
        "text": "en test_2018_flickr e1.jpg",
        "origin": "human",
        "system": None,
        "hop": 0,
        "parent_id": None,
        "kind": "translation",
    }
    # the canonical splits are as they were without evaluation sets
    plain = read(tmp_path, eval_sets={}).captions
    assert captions.slice(0, plain.num_rows).equals(plain)


def test_prepared_folder_round_trip_with_image_sizes(tmp_path: Path) -> None:
    write_multi30k(tmp_path / "m30k", images=tmp_path / "images")
    corpus = read(tmp_path / "m30k", image_root=tmp_path / "images")
    assert corpus.images.column("width").to_pylist()[9:11] == [10, 11]  # read from images/mscoco/
    write_prepared(corpus, tmp_path / "prepared")
    again = read_prepared(tmp_path / "prepared")
    assert again.images.equals(corpus.images) and again.captions.equals(corpus.captions)
    counts = {(row["split"], row["lang"]): row["translation"] for row in count_captions(again)}
    assert counts["eval:test2018", "en"] == 2 and ("eval:test2018", "de") not in counts


def test_coco_images_missing_from_their_folder_are_named(tmp_path: Path) -> None:
    write_multi30k(tmp_path / "m30k", images=tmp_path / "images")
    (tmp_path / "images" / "mscoco" / "COCO_val2014_000000000042.jpg").unlink()
    with pytest.raises(InputError, match=r"1 of 13 listed images are missing, first: mscoco/COCO_val2014_000000000042"):
        read(tmp_path / "m30k", image_root=tmp_path / "images")


def test_eval_set_without_caption_files_is_an_error(tmp_path: Path) -> None:
    write_multi30k(tmp_path)
    with pytest.raises(InputError, match=r"evaluation set 'test2018': no caption files of \['de', 'fr'\]"):
        read(tmp_path, languages=["de", "fr"])


def test_eval_set_sharing_an_image_with_the_test_split_is_an_error(tmp_path: Path) -> None:
    write_multi30k(tmp_path)
    twice = {"again": Multi30kEvalSet(task1="test_2016_flickr")}
    with pytest.raises(InputError, match=r"duplicate image 'c1'"):
        read(tmp_path, eval_sets=twice)


def test_adapter_reads_eval_sets_from_the_settings(tmp_path: Path) -> None:
    write_multi30k(tmp_path)
    tree = {
        "splits": {
            "train": {"task1": "train", "task2": None},
            "val": {"task1": "val", "task2": None},
            "test": {"task1": "test_2016_flickr", "task2": None},
        },
        "eval_sets": {"test2018": {"task1": "test_2018_flickr"}, "mscoco2017": {"task1": "test_2017_mscoco"}},
    }
    config = build(Multi30kConfig, tree, "prepare.multi30k")
    languages = Languages(pivot="en", targets=("de",))
    corpus = read_corpus("multi30k", config, tmp_path, image_root=None, languages=languages, dataset="m30k")
    assert list(dict.fromkeys(corpus.images.column("split").to_pylist())) == [
        "train",
        "val",
        "test",
        "eval:test2018",
        "eval:mscoco2017",
    ]


@pytest.mark.parametrize(
    ("tree", "key"),
    [
        ({"eval_sets": {"test": {"task1": "x"}}}, "prepare.multi30k.eval_sets.test"),
        ({"eval_sets": {"Test-2017": {"task1": "x"}}}, "prepare.multi30k.eval_sets.Test-2017"),
        ({"eval_sets": {"t2017": {}}}, "prepare.multi30k.eval_sets.t2017.task1"),
        ({"eval_sets": {"t2017": {"task1": None}}}, "prepare.multi30k.eval_sets.t2017.task1"),
        ({"eval_sets": {"coco": {"task1": "x", "images": "../coco"}}}, "prepare.multi30k.eval_sets.coco.images"),
        ({"eval_sets": {"coco": {"task1": "x", "image": "coco"}}}, "prepare.multi30k.eval_sets.coco.image"),
    ],
)
def test_bad_eval_set_settings_name_the_key(tree: dict[str, object], key: str) -> None:
    with pytest.raises(SettingError) as caught:
        build(Multi30kConfig, tree, "prepare.multi30k")
    assert caught.value.key == key


def test_table_validation_accepts_eval_splits_only_with_a_valid_name() -> None:
    columns = {
        "image_id": ["a"],
        "split": ["eval:test2017"],
        "path": ["a.jpg"],
        "width": [None],
        "height": [None],
        "dataset": ["d"],
    }
    validate_images(images_table(columns), source="images")
    with pytest.raises(InputError, match=r"images table: row 0: split = 'eval:Bad.Name' is not one of"):
        images_table(columns | {"split": ["eval:Bad.Name"]})
    with pytest.raises(InputError, match=r"split = 'testing' is not one of"):
        images_table(columns | {"split": ["testing"]})


def test_real_multi30k_text_with_test2016_as_an_evaluation_set(shared_data: Path) -> None:
    root = shared_data / "multi30k"
    if not (root / "task1" / "raw" / "test_2016_flickr.en.gz").is_file():
        pytest.skip(f"{root} lacks the Multi30K test_2016_flickr files")
    corpus = read_multi30k(
        root,
        languages=["en", "de", "fr", "cs"],
        splits={"val": Multi30kSplit(task1="val", task2="val")},
        image_root=None,
        eval_sets={"test2016": Multi30kEvalSet(task1="test_2016_flickr", task2="test_2016")},
    )
    assert Counter(corpus.images.column("split").to_pylist()) == {"val": 1014, "eval:test2016": 1000}
    rows = corpus.captions.filter(pa.compute.equal(corpus.captions.column("split"), "eval:test2016"))
    kinds = Counter(zip(rows.column("lang").to_pylist(), rows.column("kind").to_pylist(), strict=True))
    assert kinds == {
        ("en", "translation"): 1000,
        ("de", "translation"): 1000,
        ("fr", "translation"): 1000,
        ("cs", "translation"): 1000,
        ("en", "comparable"): 5000,
        ("de", "comparable"): 5000,
    }
    assert rows.column("image_id")[0].as_py() == "1007129816"  # line 1 of task1/image_splits/test_2016_flickr.txt
