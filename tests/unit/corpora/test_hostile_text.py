"""Hostile text: control and bidirectional formatting characters, decomposed Unicode and lone surrogates in captions
and sentences, names that could disguise a message, and a split a stage needs found empty. Each refusal is one
:class:`InputError` line naming the file and line (or JSON entry) and the code point; the messages are asserted
whole."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pytest

from common.checks import SettingError
from common.errors import InputError
from common.files import read_json, write_text
from common.text_input import TextCleaner, TextConfig, normalize, quoted, shown
from corpora.adapters import read_corpus
from corpora.karpathy import read_karpathy
from corpora.languages import Languages
from corpora.multi30k import Multi30kConfig
from corpora.prepared import CLEANING_FILE, Corpus, read_prepared, write_prepared
from corpora.scan_captions import read_scan_captions
from corpora.tables import read_captions, write_parquet
from corpora.wmt import read_parallel_corpus
from mmtr import cli
from retrieval.experiment import read_captions as read_split_captions
from retrieval.vocab import Vocabulary
from tests.unit.corpora.test_multi30k import SPLITS, read, write_layout

REFUSAL = (
    "(text may hold no control or bidirectional formatting characters; prepare.text.control_characters: remove "
    "drops them)"
)

# character, its name in the message, where it sits in "a dog<char>barks" (character 6)
CONTROLS = [
    ("\x00", "control character U+0000", r"a dog\x00barks"),
    ("\x1b[31m", "control character U+001B", r"a dog\x1b[31mbarks"),  # an ANSI colour sequence
    ("\x07", "control character U+0007", r"a dog\x07barks"),
    ("\x7f", "control character U+007F", r"a dog\x7fbarks"),
    ("\x9b", "control character U+009B", r"a dog\x9bbarks"),  # C1: the one-byte CSI
    ("\u202e", "bidirectional formatting character U+202E", r"a dog\u202ebarks"),  # right-to-left override
    ("\u2066", "bidirectional formatting character U+2066", r"a dog\u2066barks"),  # left-to-right isolate
]


def _multi30k_with(root: Path, line: str, lang: str = "en") -> Path:
    """The miniature Multi30K with ``line`` as the second train caption of ``lang`` (task1); its path."""
    write_layout(root, gz=False)
    path = root / "task1" / "raw" / f"train.{lang}"
    write_text(path, f"t1 {lang} a1.jpg\n{line}\nt1 {lang} a3.jpg\n")
    return path


@pytest.mark.parametrize(("character", "named", "escaped"), CONTROLS, ids=[name for _, name, _ in CONTROLS])
def test_a_control_character_in_a_caption_names_file_line_and_code_point(
    tmp_path: Path, character: str, named: str, escaped: str
) -> None:
    path = _multi30k_with(tmp_path, f"a dog{character}barks")
    with pytest.raises(InputError) as error:
        read(tmp_path)
    assert str(error.value) == f'{path}:2: {named} at character 6 of "{escaped}" {REFUSAL}'


def test_remove_drops_control_characters_and_counts_them(tmp_path: Path) -> None:
    _multi30k_with(tmp_path, "a dog\x1b[31m barks\x07\u202e")
    clean = TextCleaner("remove")
    corpus = read(tmp_path, text=clean)
    texts = corpus.captions.column("text").to_pylist()
    assert "a dog[31m barks" in texts  # the ESC goes; the printable rest of its sequence stays, harmless
    assert clean.removed == 3


def test_prepare_records_what_remove_removed_beside_its_tables(tmp_path: Path) -> None:
    _multi30k_with(tmp_path / "text", "a dog\x00 barks")
    corpus = read_corpus(
        "multi30k",
        Multi30kConfig(splits=SPLITS),
        tmp_path / "text",
        image_root=None,
        languages=Languages(pivot="en", targets=("de", "fr")),
        dataset="m",
        text=(clean := TextCleaner("remove")),
    )
    write_prepared(Corpus(corpus.images, corpus.captions, removed_characters=clean.removed), tmp_path / "out")
    assert read_json(tmp_path / "out" / CLEANING_FILE) == {"removed_control_characters": 1}
    write_prepared(corpus, tmp_path / "clean")  # nothing removed: no note
    assert not (tmp_path / "clean" / CLEANING_FILE).exists()


def test_control_characters_setting_is_checked() -> None:
    with pytest.raises(SettingError, match=r"^control_characters: got 'strip', allowed: refuse, remove$"):
        TextConfig("strip")  # type: ignore[arg-type]


def test_decomposed_german_is_stored_precomposed_and_is_one_vocabulary_entry(tmp_path: Path) -> None:
    write_layout(tmp_path, gz=False)
    write_text(tmp_path / "task1" / "raw" / "train.de", "ein Mädchen\nein Ma\u0308dchen\nzwei Ma\u0308dchen\n")
    corpus = read(tmp_path)
    write_prepared(corpus, tmp_path / "out")
    stored = read_prepared(tmp_path / "out").captions
    german = [text for text, lang in zip(stored["text"].to_pylist(), stored["lang"].to_pylist(), strict=True)]
    german = [text for text in german if "dchen" in text]
    assert [text.encode("utf-8") for text in german] == [
        b"ein M\xc3\xa4dchen",
        b"ein M\xc3\xa4dchen",
        b"zwei M\xc3\xa4dchen",
    ]
    vocab = Vocabulary.build((("de", text) for text in german), ["de"], min_count=1)
    assert [word for word in vocab.entries if "dchen" in word] == ["de:mädchen"]


def test_a_tab_inside_a_caption_becomes_a_space(tmp_path: Path) -> None:
    _multi30k_with(tmp_path, "a dog\tbarks")  # real Multi30K train.de has one
    assert "a dog barks" in read(tmp_path).captions.column("text").to_pylist()


def test_a_lone_surrogate_in_karpathy_json_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "dataset.json"
    entry = {"filename": "1.jpg", "split": "train", "sentences": [{"raw": "a dog"}, {"raw": "a \ud800 cat"}]}
    path.write_text(json.dumps({"images": [entry]}), encoding="utf-8")  # JSON escapes it: "a \ud800 cat"
    with pytest.raises(InputError) as error:
        read_karpathy(path, dataset="flickr30k", image_root=None, captions_per_image=2)
    assert str(error.value) == (
        f"{path}: images[0]: sentences[1].raw: U+D800 is a lone surrogate, not a character (the text cannot be "
        'encoded as UTF-8): "a \\ud800 cat"'
    )


def test_a_control_character_in_karpathy_json_names_the_entry(tmp_path: Path) -> None:
    path = tmp_path / "dataset.json"
    entry = {"filename": "1.jpg", "split": "train", "sentences": [{"raw": "a dog\u0000"}]}
    path.write_text(json.dumps({"images": [entry]}), encoding="utf-8")
    with pytest.raises(InputError) as error:
        read_karpathy(path, dataset="flickr30k", image_root=None, captions_per_image=1)
    assert str(error.value) == (
        f'{path}: images[0]: sentences[0].raw: control character U+0000 at character 6 of "a dog\\x00" {REFUSAL}'
    )


def test_a_control_character_in_scan_captions_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "train_caps.txt"
    write_text(path, "a dog\nthe \x1b]0;owned\x07 cat\n")
    with pytest.raises(InputError) as error:
        read_scan_captions(tmp_path, splits={"train": "train"}, dataset="coco", captions_per_image=1)
    assert str(error.value) == (
        f'{path}:2: control character U+001B at character 5 of "the \\x1b]0;owned\\x07 cat" {REFUSAL}'
    )


def test_parallel_sentences_are_refused_by_file_and_line_and_stored_nfc(tmp_path: Path) -> None:
    folder = tmp_path / "en-de"
    write_text(folder / "train.en", "a girl\na boy\n")
    write_text(folder / "train.de", "ein Ma\u0308dchen\nein\x85Junge\n")
    with pytest.raises(InputError) as error:
        read_parallel_corpus(tmp_path, pairs=[("en", "de")], splits={"train": "train"})
    assert str(error.value) == (
        f'{folder / "train.de"}:2: control character U+0085 at character 4 of "ein\\x85Junge" {REFUSAL}'
    )
    table = read_parallel_corpus(tmp_path, pairs=[("en", "de")], splits={"train": "train"}, text=TextCleaner("remove"))[
        "en-de"
    ]
    assert table.column("tgt").to_pylist() == ["ein Mädchen", "einJunge"]


def _captions(texts: list[str], splits: list[str]) -> pa.Table:
    """Human English comparable captions of images 0, 1, ..., one each."""
    count = len(texts)
    return pa.table(
        {
            "caption_id": [f"{index}#en#c1" for index in range(count)],
            "image_id": [str(index) for index in range(count)],
            "split": splits,
            "lang": ["en"] * count,
            "text": texts,
            "origin": ["human"] * count,
            "system": pa.array([None] * count, pa.string()),
            "hop": pa.array([0] * count, pa.int32()),
            "parent_id": pa.array([None] * count, pa.string()),
            "kind": ["comparable"] * count,
        }
    )


def test_a_table_written_elsewhere_with_unclean_text_is_refused_where_read(tmp_path: Path) -> None:
    decomposed = tmp_path / "nfd.parquet"
    write_parquet(_captions(["ein Ma\u0308dchen"], ["train"]), decomposed)  # bypasses the validation
    with pytest.raises(InputError) as error:
        read_captions(decomposed)
    assert str(error.value) == f'{decomposed}: row 0: text "ein Ma\u0308dchen" is not in Unicode NFC'
    controlled = tmp_path / "esc.parquet"
    write_parquet(_captions(["a \x1b[2J dog"], ["train"]), controlled)
    with pytest.raises(InputError) as error:
        read_captions(controlled)
    assert str(error.value) == (
        f'{controlled}: row 0: text "a \\x1b[2J dog" holds a control or bidirectional formatting character'
    )


def test_shown_escapes_what_could_disguise_a_name_and_keeps_letters() -> None:
    assert shown("Käse\u202egpj.exe") == "Käse\\u202egpj.exe"
    assert shown("a\tb\x1b[31m\x85\u200b\U000e0041 ä é ß") == "a\\x09b\\x1b[31m\\x85\\u200b\\U000e0041 ä é ß"
    assert quoted("x" * 81) == '"' + "x" * 80 + '"...'
    assert normalize("Ma\u0308dchen", "where") == "Mädchen"


def test_a_right_to_left_override_in_an_image_name_is_shown_escaped(tmp_path: Path) -> None:
    from PIL import Image

    write_layout(tmp_path / "text", gz=False)
    for stem in ("task1/image_splits/train.txt", "task2/image_splits/train_images.txt"):
        write_text(tmp_path / "text" / stem, "a1.jpg\nevil\u202egnp.jpg\na3.jpg\n")  # shows as "evilgpj.png"
    images = tmp_path / "images"
    images.mkdir()
    for name in ("a1.jpg", "a3.jpg", "b1.jpg", "c1.jpg", "c2.jpg"):
        Image.new("RGB", (4, 3)).save(images / name, format="JPEG")
    with pytest.raises(InputError) as error:
        read(tmp_path / "text", image_root=images)
    listed = tmp_path / "text" / "task1" / "image_splits" / "train.txt"
    assert str(error.value) == (
        f"{images}: 1 of 6 listed images are missing, first: evil\\u202egnp.jpg (listed at {listed}:2)"
    )
    assert "\u202e" not in str(error.value)


def _prepared_with(folder: Path, **columns: list[str]) -> Path:
    """A prepared folder whose one caption has ``columns`` (written without validation, as a tampered file is)."""
    write_layout(folder / "text", gz=False)
    corpus = read(folder / "text")
    write_prepared(corpus, folder / "prepared")
    captions = corpus.captions.slice(0, 1).to_pydict()
    captions.update(columns)
    write_parquet(pa.table(captions, schema=corpus.captions.schema), folder / "prepared" / "captions.parquet")
    return folder / "prepared"


def test_inspect_prints_names_escaped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prepared = _prepared_with(tmp_path, caption_id=["a1\u202egpj#en#t"])
    cli.main(["inspect", str(prepared), "--samples", "1"])
    printed = capsys.readouterr().out
    assert "a1\\u202egpj#en#t" in printed and "\u202e" not in printed


def test_inspect_refuses_a_caption_with_an_escape_sequence_in_one_escaped_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prepared = _prepared_with(tmp_path, text=["\x1b]0;pwned\x07 a dog"])
    with pytest.raises(SystemExit) as stopped:
        cli.main(["inspect", str(prepared)])
    err = capsys.readouterr().err
    assert stopped.value.code == 2
    assert err == (
        f'mmtr: error: {prepared / "captions.parquet"}: row 0: text "\\x1b]0;pwned\\x07 a dog" holds a control or '
        "bidirectional formatting character\n"
    )


def test_translate_refuses_a_control_character_in_its_input_before_loading(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "system"
    folder.mkdir()
    (folder / "system.json").write_text('{"backend": "seq2seq", "src": "en", "tgt": "de"}', encoding="utf-8")
    sentences = tmp_path / "in.txt"
    write_text(sentences, "a dog\na \x00cat\n")
    argv = ["translate", "--src", "en", "--tgt", "de", "--model", str(folder), "--input", str(sentences)]
    with pytest.raises(SystemExit) as stopped:
        cli.main(argv)
    err = capsys.readouterr().err
    assert stopped.value.code == 2
    assert err == (
        f'mmtr: error: {sentences}:2: control character U+0000 at character 3 of "a \\x00cat" (text may hold no '
        "control or bidirectional formatting characters)\n"
    )


@pytest.mark.parametrize(("split", "use"), [("test", "it is the test set"), ("val", "it selects the epoch")])
def test_an_empty_split_a_stage_needs_is_refused_where_read(tmp_path: Path, split: str, use: str) -> None:
    table = tmp_path / "captions.parquet"
    others = [name for name in ("train", "val", "test") if name != split]
    write_parquet(_captions(["a dog", "a cat"], others), table)
    with pytest.raises(InputError, match=rf"^{re.escape(str(table))}: the {split} split is empty, but {use}$"):
        read_split_captions(table, split=split, languages=["en"], kinds=None, human_only=True)
