"""Canonical tables: round trips through Parquet and every validation error names what is wrong."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from common.errors import InputError
from corpora import tables
from corpora.prepared import Corpus, read_prepared, write_prepared


def image_columns(**changes: list[Any]) -> dict[str, list[Any]]:
    columns: dict[str, list[Any]] = {
        "image_id": ["a", "b", "c"],
        "split": ["train", "val", "test"],
        "path": ["a.jpg", "b.jpg", "c.jpg"],
        "width": [640, 500, None],
        "height": [480, 375, None],
        "dataset": ["toy"] * 3,
    }
    return {**columns, **changes}


def caption_columns(**changes: list[Any]) -> dict[str, list[Any]]:
    columns: dict[str, list[Any]] = {
        "caption_id": ["a#en#c1", "a#de#c1", "b#en#t", "a#de#mmt"],
        "image_id": ["a", "a", "b", "a"],
        "split": ["train", "train", "val", "train"],
        "lang": ["en", "de", "en", "de"],
        "text": ["A dog runs.", "Ein Hund rennt.", "A cat sleeps.", "Ein Hund läuft."],
        "origin": ["human", "human", "human", "mmt"],
        "system": [None, None, None, "mmt-en-de"],
        "hop": [0, 0, 0, 1],
        "parent_id": [None, None, None, "a#en#c1"],
        "kind": ["comparable", "comparable", "translation", "comparable"],
    }
    return {**columns, **changes}


def test_round_trip_keeps_values_types_and_order(tmp_path: Path) -> None:
    images = tables.images_table(image_columns())
    captions = tables.captions_table(caption_columns(), images=images)
    parallel = tables.parallel_table(
        {"split": ["train", "test"], "src": ["a dog", "a cat"], "tgt": ["ein Hund", "eine Katze"]}
    )
    write_prepared(Corpus(images, captions, {"en-de": parallel}), tmp_path / "prepared")
    back = read_prepared(tmp_path / "prepared")
    assert back.images.equals(images)
    assert back.captions.equals(captions)
    assert back.parallel["en-de"].equals(parallel)
    assert back.images.schema == tables.IMAGES_SCHEMA
    assert back.captions.column("hop").type == pa.int32()
    assert back.images.column("width").to_pylist() == [640, 500, None]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"image_id": ["a", "b", "a"]}, r"duplicate image_id 'a' at rows \[0, 2\]"),
        (
            {"split": ["train", "dev", "test"]},
            r"row 1: split = 'dev' is not one of \['train', 'val', 'test'\] or eval:<name>",
        ),
        ({"path": ["a.jpg", " ", "c.jpg"]}, r"row 1: path is empty"),
        ({"width": [640, 0, None]}, r"row 1: width must be positive"),
    ],
)
def test_images_validation(changes: dict[str, list[Any]], message: str) -> None:
    with pytest.raises(InputError, match=message):
        tables.images_table(image_columns(**changes))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"caption_id": ["x", "x", "y", "z"]}, r"duplicate caption_id 'x'"),
        ({"image_id": ["a", "a", "zz", "a"]}, r"row 2: caption points at unknown image_id 'zz'"),
        ({"split": ["train", "train", "test", "train"]}, r"row 2: caption split 'test' differs from the split 'val'"),
        ({"lang": ["en", "de", "english", "de"]}, r"row 2: lang = 'english' is not one of ISO 639-1 codes"),
        ({"origin": ["human", "human", "human", "gpt"]}, r"row 3: origin = 'gpt' is not one of"),
        ({"kind": ["comparable", "comparable", "parallel", "comparable"]}, r"row 2: kind = 'parallel'"),
        ({"text": ["A dog runs.", "", "A cat.", "Ein Hund."]}, r"row 1: text is empty"),
        ({"hop": [0, 1, 0, 1]}, r"row 1 \(caption 'a#de#c1'\): hop must be 0 exactly for human captions"),
        ({"parent_id": [None, None, None, None]}, r"row 3 .*: a synthesized caption needs a parent_id"),
        ({"system": [None, "x", None, "mmt-en-de"]}, r"row 1 .*: a human caption has no system"),
        ({"parent_id": [None, None, None, "nope"]}, r"parent_id 'nope' is not a caption_id of the table"),
    ],
)
def test_captions_validation(changes: dict[str, list[Any]], message: str) -> None:
    images = tables.images_table(image_columns())
    with pytest.raises(InputError, match=message):
        tables.captions_table(caption_columns(**changes), images=images)


def test_read_rejects_wrong_dtype_and_missing_column(tmp_path: Path) -> None:
    images = tables.images_table(image_columns())
    wrong_dtype = images.set_column(3, pa.field("width", pa.int64()), images.column("width").cast(pa.int64()))
    pq.write_table(wrong_dtype, tmp_path / "images.parquet")
    with pytest.raises(InputError, match=r"images\.parquet: column 'width' has type int64, expected int32"):
        tables.read_images(tmp_path / "images.parquet")
    pq.write_table(images.drop_columns(["dataset"]), tmp_path / "images.parquet")
    with pytest.raises(InputError, match=r"missing column\(s\) \['dataset'\]"):
        tables.read_images(tmp_path / "images.parquet")
    pq.write_table(images.append_column("extra", pa.array([1, 2, 3])), tmp_path / "images.parquet")
    with pytest.raises(InputError, match=r"unknown column\(s\) \['extra'\]"):
        tables.read_images(tmp_path / "images.parquet")


def test_read_rejects_null_in_required_column(tmp_path: Path) -> None:
    images = tables.images_table(image_columns())
    loose = images.cast(pa.schema([field.with_nullable(True) for field in images.schema]))
    loose = loose.set_column(2, "path", pa.array(["a.jpg", None, "c.jpg"]))
    pq.write_table(loose, tmp_path / "images.parquet")
    with pytest.raises(InputError, match=r"row 1: column 'path' is null"):
        tables.read_images(tmp_path / "images.parquet")


def test_read_of_missing_or_corrupt_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="file not found"):
        tables.read_captions(tmp_path / "captions.parquet")
    (tmp_path / "captions.parquet").write_bytes(b"not parquet")
    with pytest.raises(InputError, match="not a readable Parquet file"):
        tables.read_captions(tmp_path / "captions.parquet")


def test_invalid_corpus_leaves_existing_prepared_folder_untouched(tmp_path: Path) -> None:
    images = tables.images_table(image_columns())
    captions = tables.captions_table(caption_columns(), images=images)
    out = tmp_path / "prepared"
    write_prepared(Corpus(images, captions), out)
    before = {path.name: path.read_bytes() for path in out.iterdir()}
    orphan = tables.captions_table(caption_columns())  # fine alone, but points at images we drop below
    with pytest.raises(InputError, match="unknown image_id"):
        write_prepared(Corpus(images.slice(1), orphan), out)
    assert {path.name: path.read_bytes() for path in out.iterdir()} == before
    assert sorted(path.name for path in tmp_path.iterdir()) == ["prepared"]  # no temp folders left


def image_dependent_columns(**changes: list[Any]) -> dict[str, list[Any]]:
    columns: dict[str, list[Any]] = {
        "split": ["train", "test"],
        "image_id": ["a", "c"],
        "lang": ["de", "de"],
        "words": [["blauer"], ["roter", "roter"]],
    }
    return {**columns, **changes}


def contrastive_columns(**changes: list[Any]) -> dict[str, list[Any]]:
    columns: dict[str, list[Any]] = {
        "src_lang": ["en"],
        "tgt_lang": ["de"],
        "source": ["A dark circle."],
        "image_a": ["a"],
        "image_b": ["c"],
        "translation_a": ["Ein blauer Kreis."],
        "translation_b": ["Ein schwarzer Kreis."],
    }
    return {**columns, **changes}


def test_optional_evaluation_tables_round_trip_and_stay_optional(tmp_path: Path) -> None:
    images = tables.images_table(image_columns())
    captions = tables.captions_table(caption_columns(), images=images)
    words = tables.image_dependent_table(image_dependent_columns(), images=images)
    items = tables.contrastive_table(contrastive_columns(), images=images)
    write_prepared(Corpus(images, captions, image_dependent=words, contrastive=items), tmp_path / "with")
    back = read_prepared(tmp_path / "with")
    assert back.image_dependent is not None and back.image_dependent.equals(words)
    assert back.contrastive is not None and back.contrastive.equals(items)
    assert back.image_dependent.column("words").to_pylist() == [["blauer"], ["roter", "roter"]]
    write_prepared(Corpus(images, captions), tmp_path / "without")
    assert sorted(path.name for path in (tmp_path / "without").iterdir()) == ["captions.parquet", "images.parquet"]
    plain = read_prepared(tmp_path / "without")
    assert plain.image_dependent is None and plain.contrastive is None


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"words": [["blauer"], []]}, r"row 1: words is empty"),
        ({"words": [["blauer"], ["roter", ""]]}, r"row 1: words \['roter', ''\] holds an empty word"),
        ({"words": [["ein blauer"], ["roter"]]}, r"row 0: words .* one with a space"),
        ({"image_id": ["a", "a"], "split": ["train", "train"]}, r"duplicate image_id\|lang 'a\|de'"),
        ({"image_id": ["a", "zz"]}, r"row 1: caption points at unknown image_id 'zz'"),
        ({"split": ["train", "val"]}, r"row 1: caption split 'val' differs from the split 'test'"),
        ({"lang": ["de", "xx"]}, r"row 1: lang = 'xx'"),
    ],
)
def test_image_dependent_validation(changes: dict[str, list[Any]], message: str) -> None:
    images = tables.images_table(image_columns())
    with pytest.raises(InputError, match=message):
        tables.image_dependent_table(image_dependent_columns(**changes), images=images)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"image_b": ["a"]}, r"row 0: image_a and image_b are the same"),
        ({"translation_b": ["Ein blauer Kreis."]}, r"row 0: translation_a and translation_b are the same"),
        ({"image_b": ["zz"]}, r"row 0: image_b 'zz' is not an image"),
        ({"source": [" "]}, r"row 0: source is empty"),
        ({"tgt_lang": ["german"]}, r"row 0: tgt_lang = 'german'"),
    ],
)
def test_contrastive_validation(changes: dict[str, list[Any]], message: str) -> None:
    images = tables.images_table(image_columns())
    with pytest.raises(InputError, match=message):
        tables.contrastive_table(contrastive_columns(**changes), images=images)


def test_read_prepared_checks_the_evaluation_tables_against_the_images(tmp_path: Path) -> None:
    images = tables.images_table(image_columns())
    captions = tables.captions_table(caption_columns(), images=images)
    write_prepared(Corpus(images, captions), tmp_path / "prepared")
    stray = tables.contrastive_table(contrastive_columns(image_a=["gone"]))  # fine alone, not with these images
    tables.write_parquet(stray, tmp_path / "prepared" / "contrastive.parquet")
    with pytest.raises(InputError, match=r"contrastive\.parquet: row 0: image_a 'gone' is not an image"):
        read_prepared(tmp_path / "prepared")
