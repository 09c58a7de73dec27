"""Multi30K adapter: small layouts written in tmp_path, every bad input, and the shared real copy."""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter
from pathlib import Path

import pytest
from PIL import Image

from common.errors import InputError
from common.files import write_text
from corpora.multi30k import MULTI30K_2016, Multi30kSplit, read_multi30k
from corpora.prepared import read_prepared, write_prepared

NAMES = {"train": ["a1.jpg", "a2.jpg", "a3.jpg"], "val": ["b1.jpg"], "test": ["c1.jpg", "c2.jpg"]}
SPLITS = {split: Multi30kSplit(task1=split, task2=split) for split in NAMES}


def esc(path: Path) -> str:
    """A path as a literal inside a ``match=`` pattern."""
    return re.escape(str(path))


def _lines(lines: list[str]) -> str:
    return "".join(f"{line}\n" for line in lines)


def write_layout(
    root: Path,
    *,
    names: dict[str, list[str]] = NAMES,
    task1_langs: tuple[str, ...] = ("en", "de", "fr"),
    task2_langs: tuple[str, ...] = ("en", "de"),
    per_image: int = 2,
    gz: bool = True,
) -> None:
    """A miniature Multi30K: caption text says which file and image it came from."""
    ext = ".gz" if gz else ""
    for stem, stem_names in names.items():
        write_text(root / "task1" / "image_splits" / f"{stem}.txt", _lines(stem_names))
        write_text(root / "task2" / "image_splits" / f"{stem}_images.txt", _lines(stem_names))
        for lang in task1_langs:
            write_text(root / "task1" / "raw" / f"{stem}.{lang}{ext}", _lines([f"t1 {lang} {n}" for n in stem_names]))
            tok = root / "task1" / "tok" / f"{stem}.lc.norm.tok.{lang}"
            write_text(tok, _lines([f"tok {lang} {n}" for n in stem_names]))
        for lang in task2_langs:
            for number in range(1, per_image + 1):
                raw = root / "task2" / "raw" / f"{stem}.{number}.{lang}{ext}"
                write_text(raw, _lines([f"t2 {lang} {number} {n}" for n in stem_names]))
                tok = root / "task2" / "tok" / f"{stem}.lc.norm.tok.{number}.{lang}"
                write_text(tok, _lines([f"tok2 {lang} {number} {n}" for n in stem_names]))


def read(root: Path, **overrides: object):
    arguments: dict[str, object] = {"languages": ["en", "de", "fr"], "splits": SPLITS, "image_root": None}
    arguments.update(overrides)
    return read_multi30k(root, **arguments)  # type: ignore[arg-type]


@pytest.mark.parametrize("gz", [True, False])
def test_reads_images_in_corpus_order(tmp_path: Path, gz: bool) -> None:
    write_layout(tmp_path, gz=gz)
    corpus = read(tmp_path, dataset="mini")
    images = corpus.images.to_pydict()
    assert images["image_id"] == ["a1", "a2", "a3", "b1", "c1", "c2"]
    assert images["split"] == ["train"] * 3 + ["val"] + ["test"] * 2
    assert images["path"] == ["a1.jpg", "a2.jpg", "a3.jpg", "b1.jpg", "c1.jpg", "c2.jpg"]
    assert images["width"] == [None] * 6 and images["height"] == [None] * 6
    assert images["dataset"] == ["mini"] * 6


def test_captions_of_one_image_are_task1_then_task2(tmp_path: Path) -> None:
    write_layout(tmp_path)
    captions = read(tmp_path).captions
    first = captions.slice(0, 7).to_pydict()
    assert first["caption_id"] == ["a1#en#t", "a1#de#t", "a1#fr#t", "a1#en#c1", "a1#en#c2", "a1#de#c1", "a1#de#c2"]
    assert first["kind"] == ["translation"] * 3 + ["comparable"] * 4
    assert first["lang"] == ["en", "de", "fr", "en", "en", "de", "de"]
    assert first["text"] == [
        "t1 en a1.jpg",
        "t1 de a1.jpg",
        "t1 fr a1.jpg",
        "t2 en 1 a1.jpg",
        "t2 en 2 a1.jpg",
        "t2 de 1 a1.jpg",
        "t2 de 2 a1.jpg",
    ]
    assert set(captions.column("origin").to_pylist()) == {"human"}
    assert set(captions.column("hop").to_pylist()) == {0}
    assert captions.column("system").null_count == captions.num_rows
    assert captions.column("parent_id").null_count == captions.num_rows
    assert captions.num_rows == 6 * (3 + 2 * 2)
    assert captions.column("image_id").to_pylist()[-1] == "c2"


def test_tokenized_files_and_task_selection(tmp_path: Path) -> None:
    write_layout(tmp_path)
    captions = read(tmp_path, tokenized=True, tasks=["task2"], languages=["de"]).captions
    assert captions.column("text").to_pylist()[:3] == ["tok2 de 1 a1.jpg", "tok2 de 2 a1.jpg", "tok2 de 1 a2.jpg"]
    assert set(captions.column("kind").to_pylist()) == {"comparable"}


def test_split_without_task2_stem_reads_task1_only(tmp_path: Path) -> None:
    write_layout(tmp_path)
    splits = {**SPLITS, "test": Multi30kSplit(task1="test", task2=None)}
    captions = read(tmp_path, splits=splits).captions.to_pydict()
    test_kinds = {kind for kind, split in zip(captions["kind"], captions["split"], strict=True) if split == "test"}
    assert test_kinds == {"translation"}


def test_synthetic_layout_with_image_sizes(tmp_path: Path) -> None:
    names = {"train": ["syn000001.png", "syn000002.png"], "val": ["syn000003.png"], "test": ["syn000004.png"]}
    write_layout(tmp_path / "text", names=names, task1_langs=("en", "de"))
    image_root = tmp_path / "images"
    image_root.mkdir()
    for index, name in enumerate([name for split_names in names.values() for name in split_names], start=1):
        Image.new("RGB", (10 * index, 7)).save(image_root / name)
    corpus = read(tmp_path / "text", languages=["en", "de"], image_root=image_root)
    assert corpus.images.column("image_id").to_pylist() == ["syn000001", "syn000002", "syn000003", "syn000004"]
    assert corpus.images.column("width").to_pylist() == [10, 20, 30, 40]
    assert corpus.images.column("height").to_pylist() == [7, 7, 7, 7]


def test_line_count_mismatch_names_both_files_and_counts(tmp_path: Path) -> None:
    write_layout(tmp_path)
    short = tmp_path / "task1" / "raw" / "train.de.gz"
    write_text(short, "one\ntwo\n")
    with pytest.raises(InputError) as error:
        read(tmp_path)
    message = str(error.value)
    assert str(short) in message and "has 2 lines" in message
    assert str(tmp_path / "task1" / "image_splits" / "train.txt") in message and "has 3 lines" in message


def test_empty_line_names_file_and_line(tmp_path: Path) -> None:
    write_layout(tmp_path)
    path = tmp_path / "task2" / "raw" / "val.2.en.gz"
    write_text(path, "\n")
    with pytest.raises(InputError, match=rf"{esc(path)}:1: empty line"):
        read(tmp_path)


def test_invalid_utf8_names_file_and_line(tmp_path: Path) -> None:
    write_layout(tmp_path)
    path = tmp_path / "task1" / "raw" / "test.fr.gz"
    path.write_bytes(gzip.compress(b"fine\n\xff\xfe broken\n"))
    with pytest.raises(InputError, match=rf"{esc(path)}:2: invalid UTF-8"):
        read(tmp_path)


def test_missing_image_names_root_count_file_and_list(tmp_path: Path) -> None:
    write_layout(tmp_path / "text")
    image_root = tmp_path / "images"
    image_root.mkdir()
    for name in ["a1.jpg", "a2.jpg", "a3.jpg", "b1.jpg", "c2.jpg"]:
        Image.new("RGB", (4, 3)).save(image_root / name, format="JPEG")
    with pytest.raises(InputError) as error:
        read(tmp_path / "text", image_root=image_root)
    message = str(error.value)
    assert str(image_root) in message and "1 of 6" in message
    assert "c1.jpg" in message and f"{tmp_path / 'text' / 'task1' / 'image_splits' / 'test.txt'}:1" in message


def test_non_image_file_is_named(tmp_path: Path) -> None:
    write_layout(tmp_path / "text", names={"train": ["x.jpg"]})
    image_root = tmp_path / "images"
    image_root.mkdir()
    (image_root / "x.jpg").write_text("not an image")
    splits = {"train": Multi30kSplit("train", "train")}
    with pytest.raises(InputError, match=rf"{esc(image_root / 'x.jpg')}: not a readable image"):
        read(tmp_path / "text", splits=splits, image_root=image_root)


def test_duplicate_image_within_a_list(tmp_path: Path) -> None:
    write_layout(tmp_path, names={"train": ["a.jpg", "b.jpg", "a.jpg"]})
    listing = tmp_path / "task1" / "image_splits" / "train.txt"
    with pytest.raises(InputError, match=rf"duplicate image 'a'.*{esc(listing)}:1.*{esc(listing)}:3"):
        read(tmp_path, splits={"train": SPLITS["train"]})


def test_duplicate_image_across_lists(tmp_path: Path) -> None:
    write_layout(tmp_path, names={"train": ["a.jpg", "b.jpg"], "val": ["c.jpg"], "test": ["b.jpg"]})
    lists = tmp_path / "task1" / "image_splits"
    expected = rf"duplicate image 'b'.*{esc(lists / 'train.txt')}:2.*{esc(lists / 'test.txt')}:1"
    with pytest.raises(InputError, match=expected):
        read(tmp_path)


def test_unknown_language_code(tmp_path: Path) -> None:
    write_layout(tmp_path)
    with pytest.raises(InputError, match="unknown language code 'eng'"):
        read(tmp_path, languages=["en", "eng"])


def test_language_without_files_names_paths_looked_at(tmp_path: Path) -> None:
    write_layout(tmp_path)
    with pytest.raises(InputError) as error:
        read(tmp_path, languages=["en", "cs"])
    message = str(error.value)
    assert "language 'cs': no caption files" in message
    assert str(tmp_path / "task1" / "raw" / "train.cs") in message
    assert str(tmp_path / "task2" / "raw" / "test.<n>.cs") in message


def test_missing_task1_caption_file(tmp_path: Path) -> None:
    write_layout(tmp_path)
    (tmp_path / "task1" / "raw" / "val.fr.gz").unlink()
    expected = rf"{esc(tmp_path / 'task1' / 'raw' / 'val.fr')}: caption file not found"
    with pytest.raises(InputError, match=expected):
        read(tmp_path)


def test_task2_file_counts_must_agree_between_splits(tmp_path: Path) -> None:
    write_layout(tmp_path)
    (tmp_path / "task2" / "raw" / "test.2.de.gz").unlink()
    with pytest.raises(InputError, match="'de': the number of task2 caption files differs between splits"):
        read(tmp_path)


def test_task2_gap_in_numbering(tmp_path: Path) -> None:
    write_layout(tmp_path, per_image=3)
    (tmp_path / "task2" / "raw" / "train.2.en.gz").unlink()
    with pytest.raises(InputError, match=r"numbered \[1, 3\]"):
        read(tmp_path)


def test_task1_and_task2_image_lists_must_match(tmp_path: Path) -> None:
    write_layout(tmp_path)
    task2_list = tmp_path / "task2" / "image_splits" / "train_images.txt"
    write_text(task2_list, "a1.jpg\na3.jpg\na2.jpg\n")
    task1_list = tmp_path / "task1" / "image_splits" / "train.txt"
    expected = rf"{esc(task1_list)}:2 names 'a2.jpg', {esc(task2_list)}:2 names 'a3.jpg'"
    with pytest.raises(InputError, match=expected):
        read(tmp_path)


def test_unknown_split_name(tmp_path: Path) -> None:
    write_layout(tmp_path)
    with pytest.raises(InputError, match="multi30k splits"):
        read(tmp_path, splits={"dev": SPLITS["val"]})


# --- the shared real copy (multi30k/dataset @ a3d2e0d) ---


@pytest.fixture(scope="module")
def real_corpus(shared_data: Path):
    return read_multi30k(
        shared_data / "multi30k", languages=["en", "de", "fr", "cs"], splits=MULTI30K_2016, image_root=None
    )


def test_real_split_sizes(real_corpus) -> None:
    assert Counter(real_corpus.images.column("split").to_pylist()) == {"train": 29000, "val": 1014, "test": 1000}
    assert real_corpus.images.column("image_id")[0].as_py() == "1000092795"


def test_real_caption_counts(real_corpus) -> None:
    captions = real_corpus.captions.to_pydict()
    counts = Counter(zip(captions["split"], captions["lang"], captions["kind"], strict=True))
    for split, images in [("train", 29000), ("val", 1014), ("test", 1000)]:
        for lang in ("en", "de", "fr", "cs"):
            assert counts[(split, lang, "translation")] == images
        for lang in ("en", "de"):
            assert counts[(split, lang, "comparable")] == 5 * images
        assert counts[(split, "fr", "comparable")] == counts[(split, "cs", "comparable")] == 0
    comparable = [
        image for image, kind in zip(captions["image_id"], captions["kind"], strict=True) if kind == "comparable"
    ]
    per_image = Counter(comparable)
    assert set(per_image.values()) == {10}


def test_real_first_lines(real_corpus, shared_data: Path) -> None:
    captions = real_corpus.captions
    texts = dict(zip(captions.column("caption_id").to_pylist(), captions.column("text").to_pylist(), strict=True))
    for lang in ("en", "de"):
        raw = shared_data / "multi30k" / "task1" / "raw" / f"train.{lang}.gz"
        with gzip.open(raw, "rt", encoding="utf-8") as file:
            assert texts[f"1000092795#{lang}#t"] == file.readline().strip()
    assert texts["1000092795#en#t"] == "Two young, White males are outside near many bushes."
    assert texts["1000092795#de#t"] == "Zwei junge weiße Männer sind im Freien in der Nähe vieler Büsche."


# --- the optional evaluation files: image-dependent words and contrastive items ---------------------------------

COLOURS = ("blauer", "roter", "grüner")


def write_annotations(root: Path, *, names: dict[str, list[str]] = NAMES) -> None:
    """German task1 captions whose colour the image decides (every other image), their words per line, nothing
    for English and French; one contrastive en-de item over the two test images."""
    for stem, stem_names in names.items():
        colours = [COLOURS[index % 3] for index in range(len(stem_names))]
        write_text(root / "task1" / "raw" / f"{stem}.en.gz", _lines(["A dark circle."] * len(stem_names)))
        write_text(root / "task1" / "raw" / f"{stem}.de.gz", _lines([f"Ein {colour} Kreis." for colour in colours]))
        words = [colour if index % 2 == 0 else "" for index, colour in enumerate(colours)]
        write_text(root / "task1" / "image_dependent" / f"{stem}.de.gz", _lines(words))
        for lang in ("en", "fr"):
            write_text(root / "task1" / "image_dependent" / f"{stem}.{lang}.gz", _lines([""] * len(stem_names)))
    item = {
        "source": "A dark circle.",
        "image_ids": ["c1", "c2"],
        "translations": ["Ein blauer Kreis.", "Ein roter Kreis."],
    }
    write_text(root / "task1" / "contrastive" / "test.en-de.jsonl", json.dumps(item, ensure_ascii=False) + "\n")


def test_evaluation_files_become_tables_and_survive_prepare(tmp_path: Path) -> None:
    write_layout(tmp_path)
    write_annotations(tmp_path)
    corpus = read(tmp_path)
    assert corpus.image_dependent is not None and corpus.contrastive is not None
    write_prepared(corpus, tmp_path / "prepared")
    back = read_prepared(tmp_path / "prepared")
    assert back.image_dependent is not None and back.contrastive is not None
    assert back.image_dependent.to_pylist() == [
        {"split": "train", "image_id": "a1", "lang": "de", "words": ["blauer"]},
        {"split": "train", "image_id": "a3", "lang": "de", "words": ["grüner"]},
        {"split": "val", "image_id": "b1", "lang": "de", "words": ["blauer"]},
        {"split": "test", "image_id": "c1", "lang": "de", "words": ["blauer"]},
    ]
    assert back.contrastive.to_pylist() == [
        {
            "src_lang": "en",
            "tgt_lang": "de",
            "source": "A dark circle.",
            "image_a": "c1",
            "image_b": "c2",
            "translation_a": "Ein blauer Kreis.",
            "translation_b": "Ein roter Kreis.",
        }
    ]


def test_without_evaluation_files_the_tables_are_absent(tmp_path: Path) -> None:
    write_layout(tmp_path)
    corpus = read(tmp_path)
    assert corpus.image_dependent is None and corpus.contrastive is None


def test_tokenized_captions_get_lowercased_words(tmp_path: Path) -> None:
    write_layout(tmp_path)
    write_annotations(tmp_path)
    for stem, stem_names in NAMES.items():
        tok = tmp_path / "task1" / "tok" / f"{stem}.lc.norm.tok.de"
        write_text(tok, _lines([f"ein {COLOURS[index % 3]} kreis ." for index in range(len(stem_names))]))
    write_text(tmp_path / "task1" / "image_dependent" / "val.de.gz", "Blauer\n")
    corpus = read(tmp_path, tokenized=True)
    assert corpus.image_dependent is not None
    assert corpus.image_dependent.column("words").to_pylist()[2] == ["blauer"]


def test_image_dependent_line_count_mismatch_names_the_file(tmp_path: Path) -> None:
    write_layout(tmp_path)
    write_annotations(tmp_path)
    short = tmp_path / "task1" / "image_dependent" / "train.de.gz"
    write_text(short, "blauer\n\n")
    with pytest.raises(InputError, match=rf"image-dependent word file {esc(short)} has 2 lines, but its caption file "):
        read(tmp_path)


def test_image_dependent_files_for_every_language_or_none(tmp_path: Path) -> None:
    write_layout(tmp_path)
    write_annotations(tmp_path)
    (tmp_path / "task1" / "image_dependent" / "test.fr.gz").unlink()
    with pytest.raises(InputError, match=rf"{esc(tmp_path / 'task1' / 'image_dependent' / 'test')}\.fr: image-dep"):
        read(tmp_path)
    assert read(tmp_path, languages=["en", "de"]).image_dependent is not None  # French is not read


def test_image_dependent_word_must_be_in_its_caption(tmp_path: Path) -> None:
    write_layout(tmp_path)
    write_annotations(tmp_path)
    shifted = tmp_path / "task1" / "image_dependent" / "train.de.gz"
    write_text(shifted, "\nblauer\n\n")  # a line off: a2's caption says "roter"
    with pytest.raises(InputError, match=rf"{esc(shifted)}:2: 'blauer' is not a word of the caption on the same line"):
        read(tmp_path)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("not json", r":1: not valid JSON"),
        ('["A dark circle."]', r":1: expected a JSON object"),
        ('{"source": "", "image_ids": ["c1", "c2"], "translations": ["a", "b"]}', r":1: source must be a non-empty"),
        ('{"source": "x", "image_ids": ["c1"], "translations": ["a", "b"]}', r":1: image_ids must be a list of two"),
        ('{"source": "x", "image_ids": ["c1", "c2"], "translations": ["a", "a"]}', r":1: the two translations are"),
        (
            '{"source": "x", "image_ids": ["c1", "a1"], "translations": ["a", "b"]}',
            r":1: image 'a1' is not an image of the test split \(listed in .*test\.txt\)",
        ),
    ],
)
def test_bad_contrastive_item_names_file_and_line(tmp_path: Path, line: str, message: str) -> None:
    write_layout(tmp_path)
    path = tmp_path / "task1" / "contrastive" / "test.en-de.jsonl"
    write_text(path, line + "\n")
    with pytest.raises(InputError, match=esc(path) + message):
        read(tmp_path)
