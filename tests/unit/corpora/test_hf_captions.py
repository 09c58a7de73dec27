"""The hf corpus format: our own export reads back to the prepared tables, other column layouts and the datasets
cache are read offline, embedded images are written once into the corpus's image folder, and bad rows are named."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from PIL import Image

from common.checks import SettingError
from common.config import build
from common.errors import InputError
from corpora.adapters import read_corpus
from corpora.config import PrepareConfig
from corpora.dataset_card import CardInfo
from corpora.hf_captions import WRITTEN_MARK, HfColumns, HfConfig
from corpora.hf_dataset import export_variant
from corpora.human_captions import HumanCaptions, comparable_corpus
from corpora.image_files import ListedImage
from corpora.languages import Languages
from corpora.prepared import Corpus

datasets = pytest.importorskip("datasets", reason="the hf format reads datasets' save_to_disk folders")

SIZES = {"a": (12, 8), "b": (10, 6), "c": (7, 5), "d": (9, 9)}
SPLIT_OF = {"a": "train", "b": "train", "c": "val", "d": "test"}
CARD = CardInfo(
    variant="none",
    definition="the human captions",
    corpus="toy",
    dataset="toy",
    generated=False,
    pivot="en",
    targets=(),
    settings={},
)
LANGUAGES = Languages(pivot="en", targets=("de",))


def _image_folder(root: Path) -> Path:
    root.mkdir()
    for index, (image_id, size) in enumerate(SIZES.items()):
        Image.new("RGB", size, (40 * index, 90, 200)).save(root / f"{image_id}.png")
    return root


def _prepared(image_root: Path) -> Corpus:
    listed = [
        ListedImage(image_id, f"{image_id}.png", split, f"list:{image_id}") for image_id, split in SPLIT_OF.items()
    ]
    texts = [[f"A red thing {image_id}.", f"Something {image_id} here."] for image_id in SPLIT_OF]
    return comparable_corpus(listed, texts, image_root=image_root, dataset="toy", lang="en")


def _read(config: HfConfig, source: Path | str, image_root: Path | None) -> Corpus:
    return read_corpus("hf", config, Path(source), image_root=image_root, languages=LANGUAGES, dataset="toy")


def test_our_export_reads_back_to_the_prepared_tables(tmp_path: Path) -> None:
    """Both the Parquet files (with the card) and the save_to_disk copy of an export give the same tables."""
    images = _image_folder(tmp_path / "images")
    prepared = _prepared(images)
    export_variant(prepared.captions, prepared.images, tmp_path / "export", card=CARD)
    for source in (tmp_path / "export", tmp_path / "export" / "hf"):
        corpus = _read(HfConfig(), source, images)
        assert corpus.images.equals(prepared.images), source
        assert corpus.captions.equals(prepared.captions), source
    text_only = _read(HfConfig(), tmp_path / "export", None)
    assert text_only.images.column("width").null_count == 4
    assert text_only.captions.equals(prepared.captions)


def test_translation_captions_in_two_languages_read_back(tmp_path: Path) -> None:
    """A Multi30K-like corpus: per image an en/de translation pair and comparable captions in both languages."""
    images = _image_folder(tmp_path / "images")
    plain = _prepared(images)
    rows = HumanCaptions()
    for image_id, split in SPLIT_OF.items():
        rows.add_translation(image_id, split, "en", f"A dog {image_id}.")
        rows.add_translation(image_id, split, "de", f"Ein Hund {image_id}.")
        for number in (1, 2):
            rows.add_comparable(image_id, split, "de", number, f"Ein Ding {image_id} {number}.")
            rows.add_comparable(image_id, split, "en", number, f"A thing {image_id} {number}.")
    captions = rows.table(plain.images)
    export_variant(captions, plain.images, tmp_path / "export", card=CARD)
    corpus = _read(HfConfig(), tmp_path / "export", images)
    assert corpus.images.equals(plain.images)
    assert corpus.captions.equals(captions)
    assert corpus.captions.column("caption_id").to_pylist()[:3] == ["a#en#t", "a#de#t", "a#de#c1"]


def test_embedded_images_are_written_once_into_the_image_folder(tmp_path: Path) -> None:
    images = _image_folder(tmp_path / "images")
    prepared = _prepared(images)
    export_variant(
        prepared.captions, prepared.images, tmp_path / "export", card=CARD, image_root=images, with_images=True
    )
    config = HfConfig(columns=HfColumns(image="image"))
    written = tmp_path / "embedded"
    corpus = _read(config, tmp_path / "export", written)
    assert corpus.captions.equals(prepared.captions)
    assert corpus.images.select(["image_id", "split", "width", "height"]).equals(
        prepared.images.select(["image_id", "split", "width", "height"])
    )
    assert corpus.images.column("path").to_pylist() == ["a.png", "b.png", "c.png", "d.png"]
    assert sorted(path.name for path in written.iterdir()) == [WRITTEN_MARK, "a.png", "b.png", "c.png", "d.png"]
    for image_id in SIZES:  # each image once, byte for byte, though it has two caption rows
        assert (written / f"{image_id}.png").read_bytes() == (images / f"{image_id}.png").read_bytes()
    _read(config, tmp_path / "export" / "hf", written)  # a rerun replaces the folder it wrote
    assert len(list(written.iterdir())) == 5
    with pytest.raises(InputError, match=r"images: the embedded images would replace this folder, which they did not"):
        _read(config, tmp_path / "export", images)
    assert (images / "a.png").is_file()
    with pytest.raises(InputError, match=r"may not be, hold or sit inside the dataset .*export"):
        _read(config, tmp_path / "export", tmp_path / "export" / "images")


def test_save_to_disk_with_other_column_names_and_a_list_of_captions(tmp_path: Path) -> None:
    """One row per image, captions as a list, split names in a column, no language column, numeric ids."""
    images = _image_folder(tmp_path / "images")
    rows = {
        "filename": ["a.png", "b.png", "c.png", "d.png"],
        "img_id": [11, 12, 13, 14],
        "sentences": [["One a.", "Two a."], ["One b."], ["One c.", "Two c.", "Three c."], ["One d."]],
        "part": ["train", "train", "val", "test"],
    }
    datasets.DatasetDict({"test": datasets.Dataset.from_dict(rows)}).save_to_disk(str(tmp_path / "flickr"))
    config = build(
        HfConfig,
        {
            "columns": {
                "image": "filename",
                "caption": "sentences",
                "image_id": "img_id",
                "language": None,
                "split": "part",
                "kind": None,
            },
            "splits": {"train": "train", "val": "val", "test": "test"},
            "language": "de",
        },
    )
    corpus = _read(config, tmp_path / "flickr", images)
    assert corpus.images.column("image_id").to_pylist() == ["11", "12", "13", "14"]
    assert corpus.images.column("split").to_pylist() == ["train", "train", "val", "test"]
    assert corpus.images.column("width").to_pylist() == [12, 10, 7, 9]
    assert corpus.captions.column("caption_id").to_pylist() == [
        "11#de#c1",
        "11#de#c2",
        "12#de#c1",
        "13#de#c1",
        "13#de#c2",
        "13#de#c3",
        "14#de#c1",
    ]
    assert corpus.captions.column("text").to_pylist()[3:6] == ["One c.", "Two c.", "Three c."]
    assert set(corpus.captions.column("lang").to_pylist()) == {"de"}


def test_one_row_per_caption_without_an_id_column_takes_the_file_stem(tmp_path: Path) -> None:
    images = _image_folder(tmp_path / "images")
    rows = {"path": ["b.png", "a.png", "b.png"], "caption": ["B one.", "A one.", "B two."]}
    datasets.DatasetDict({"train": datasets.Dataset.from_dict(rows)}).save_to_disk(str(tmp_path / "ds"))
    columns = HfColumns(image="path", caption="caption", image_id=None, language=None, kind=None)
    corpus = _read(HfConfig(columns=columns, splits={"train": "train"}), tmp_path / "ds", images)
    assert corpus.images.column("image_id").to_pylist() == ["b", "a"]
    assert corpus.captions.column("caption_id").to_pylist() == ["b#en#c1", "a#en#c1", "b#en#c2"]


def test_a_dataset_in_the_datasets_cache_is_read_offline(tmp_path: Path) -> None:
    """The cache layout load_dataset leaves behind (<owner>___<name>/<config>/<version>/<hash>/) is read by id."""
    folder = tmp_path / "cache" / "someone___tiny_caps" / "default" / "0.0.0" / "abc123"
    folder.mkdir(parents=True)
    split_infos = datasets.SplitDict(dataset_name="tiny_caps")
    for split, image_ids in (("train", ["a", "b"]), ("validation", ["c"])):
        rows = datasets.Dataset.from_dict(
            {
                "image_path": [f"{i}.png" for i in image_ids],
                "text": [f"Text {i}." for i in image_ids],
                "image_id": image_ids,
            }
        )
        table = rows.data.table
        with (
            pa.OSFile(str(folder / f"tiny_caps-{split}.arrow"), "wb") as sink,
            pa.ipc.new_stream(sink, table.schema) as writer,
        ):
            writer.write_table(table)
        split_infos.add(datasets.SplitInfo(name=split, num_examples=len(image_ids), dataset_name="tiny_caps"))
    info = datasets.DatasetInfo(
        features=rows.features, splits=split_infos, config_name="default", dataset_name="tiny_caps"
    )
    info.write_to_directory(str(folder))
    columns = HfColumns(language=None, kind=None)
    config = HfConfig(columns=columns, cache_dir=str(tmp_path / "cache"))
    corpus = _read(config, "someone/tiny_caps", None)
    assert corpus.images.column("image_id").to_pylist() == ["a", "b", "c"]
    assert corpus.images.column("split").to_pylist() == ["train", "train", "val"]
    with pytest.raises(
        InputError, match=r"^dataset 'someone/absent' is not in the Hugging Face datasets cache .*cache .*nothing is"
    ):
        _read(config, "someone/absent", None)


def test_bad_rows_name_the_dataset_column_and_row(tmp_path: Path) -> None:
    def save(rows: dict[str, list[str]]) -> Path:
        path = tmp_path / f"ds{len(list(tmp_path.iterdir()))}"
        datasets.DatasetDict({"train": datasets.Dataset.from_dict(rows)}).save_to_disk(str(path))
        return path

    columns = HfColumns(image="path", caption="caption", image_id="id", language="lang", kind=None)
    config = HfConfig(columns=columns, splits={"train": "train"})
    good = {"path": ["a.png", "b.png"], "id": ["a", "b"], "caption": ["A.", "B."], "lang": ["en", "en"]}
    with pytest.raises(InputError, match=r"^.*ds\d: split train: row 1: column 'caption': the caption is empty"):
        _read(config, save({**good, "caption": ["A.", "  "]}), None)
    with pytest.raises(
        InputError, match=r"^.*: split train: row 1: column 'lang': 'english' is not an ISO 639-1 code$"
    ):
        _read(config, save({**good, "lang": ["en", "english"]}), None)
    with pytest.raises(InputError, match=r"^.*: split train: no column 'caption' \(columns: path, id, text, lang\)$"):
        _read(config, save(_renamed(good)), None)
    with pytest.raises(InputError, match=r"^.*: split train: row 1: image 'a' differs from the image of the same id"):
        _read(config, save({**good, "id": ["a", "a"]}), None)
    with pytest.raises(InputError, match=r"^.*missing: dataset folder not found$"):
        _read(config, tmp_path / "missing", None)


def _renamed(rows: dict[str, list[str]]) -> dict[str, list[str]]:
    return {("text" if name == "caption" else name): values for name, values in rows.items()}


def test_settings_are_checked() -> None:
    with pytest.raises(SettingError, match=r"column 'text' is named for two roles"):
        HfColumns(image="text", caption="text")
    with pytest.raises(SettingError, match=r"splits\.test: 'all' is already the dataset split of splits\.train"):
        HfConfig(splits={"train": "all", "test": "all"})
    with pytest.raises(SettingError, match=r"language"):
        HfConfig(language="english")
    assert PrepareConfig().adapter_config("hf") == HfConfig()
