"""Parallel-text adapter: plain, gzip and .sgm layouts in tmp_path, and the shared OpenNMT toy sample."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from common.errors import InputError
from common.files import write_text
from common.text_input import TextCleaner
from corpora.prepared import write_parallel_table
from corpora.sgm import unescape
from corpora.wmt import read_parallel_corpus, read_plain_pair, write_parallel_pair

SPLITS = {"train": "train", "val": "dev", "test": "newstest2014"}


def sgm(lang: str, docs: list[tuple[str, list[tuple[str, str]]]]) -> str:
    body = "".join(
        f'<doc sysid="ref" docid="{doc}" genre="news" origlang="en">\n<p>\n'
        + "".join(f'<seg id="{seg}">{text}</seg>\n' for seg, text in segs)
        + "</p>\n</doc>\n"
        for doc, segs in docs
    )
    return f'<refset setid="newstest2014" srclang="any" trglang="{lang}">\n{body}</refset>\n'


def test_plain_gz_and_missing_split(tmp_path: Path) -> None:
    folder = tmp_path / "en-de"
    write_text(folder / "train.en", "a house\n  the dog \n")
    write_text(folder / "train.de.gz", "ein Haus\nder Hund\n")
    write_text(tmp_path / "en-fr" / "dev.en.gz", "hello\n")
    write_text(tmp_path / "en-fr" / "dev.fr", "bonjour\n")
    tables = read_parallel_corpus(tmp_path, pairs=[("en", "de"), ("en", "fr")], splits=SPLITS)
    assert sorted(tables) == ["en-de", "en-fr"]
    assert tables["en-de"].to_pydict() == {
        "split": ["train", "train"],
        "src": ["a house", "the dog"],
        "tgt": ["ein Haus", "der Hund"],
    }
    assert tables["en-fr"].to_pydict() == {"split": ["val"], "src": ["hello"], "tgt": ["bonjour"]}


def test_sgm_with_entities_matched_by_segment(tmp_path: Path) -> None:
    folder = tmp_path / "en-de"
    english = [
        ("d1", [("1", "Tom &amp; Jerry &lt;3"), ("2", "&quot;Hi&quot;")]),
        ("d2", [("1", "it&apos;s &amp;lt; ok")]),
    ]
    german = [("d1", [("1", "Tom &amp; Jerry"), ("2", "„Hallo“")]), ("d2", [("1", "es ist &#38; gut")])]
    write_text(folder / "newstest2014.en.sgm", sgm("en", english))
    write_text(folder / "newstest2014.de.sgm", sgm("de", german))
    table = read_parallel_corpus(tmp_path, pairs=[("en", "de")], splits=SPLITS)["en-de"]
    assert table.column("src").to_pylist() == ["Tom & Jerry <3", '"Hi"', "it's &lt; ok"]
    assert table.column("tgt").to_pylist() == ["Tom & Jerry", "„Hallo“", "es ist & gut"]
    assert set(table.column("split").to_pylist()) == {"test"}


def test_sgm_missing_segment_is_an_error(tmp_path: Path) -> None:
    folder = tmp_path / "en-de"
    write_text(folder / "newstest2014.en.sgm", sgm("en", [("d1", [("1", "a"), ("2", "b"), ("3", "c")])]))
    write_text(folder / "newstest2014.de.sgm", sgm("de", [("d1", [("1", "A"), ("3", "C")])]))
    expected = r"newstest2014\.en\.sgm:5 has doc 'd1' seg '2', .*newstest2014\.de\.sgm:5 has doc 'd1' seg '3'"
    with pytest.raises(InputError, match=expected):
        read_parallel_corpus(tmp_path, pairs=[("en", "de")], splits=SPLITS)
    write_text(folder / "newstest2014.de.sgm", sgm("de", [("d1", [("1", "A"), ("2", "B")])]))
    with pytest.raises(InputError, match=r"newstest2014\.de\.sgm is missing doc 'd1' seg '3'"):
        read_parallel_corpus(tmp_path, pairs=[("en", "de")], splits=SPLITS)


def test_sgm_without_segments_or_ids(tmp_path: Path) -> None:
    folder = tmp_path / "en-de"
    write_text(folder / "newstest2014.en.sgm", "<refset>\n<doc docid='x'>\n</doc></refset>\n")
    write_text(folder / "newstest2014.de.sgm", sgm("de", [("x", [("1", "A")])]))
    with pytest.raises(InputError, match=r"newstest2014\.en\.sgm: no <seg> elements"):
        read_parallel_corpus(tmp_path, pairs=[("en", "de")], splits=SPLITS)
    write_text(folder / "newstest2014.en.sgm", "<doc docid='x'>\n<seg>no id</seg>\n</doc>\n")
    with pytest.raises(InputError, match=r"newstest2014\.en\.sgm:2: <seg> without an id"):
        read_parallel_corpus(tmp_path, pairs=[("en", "de")], splits=SPLITS)
    write_text(folder / "newstest2014.en.sgm", "<doc docid='x'>\n<seg id=1>open\n<seg id=2>b</seg>\n</doc>\n")
    with pytest.raises(InputError, match=r"newstest2014\.en\.sgm:2: <seg id='1'> is not closed"):
        read_parallel_corpus(tmp_path, pairs=[("en", "de")], splits=SPLITS)


def test_unescape_is_one_pass() -> None:
    assert unescape("&amp;amp; &lt;b&gt; &#x41;&#66; &bogus; AT&T") == "&amp; <b> AB &bogus; AT&T"


def test_one_side_missing_names_the_path(tmp_path: Path) -> None:
    folder = tmp_path / "en-de"
    write_text(folder / "train.en", "a\n")
    write_text(folder / "train.de", "b\n")
    write_text(folder / "dev.de", "c\n")
    with pytest.raises(InputError, match=rf"{re.escape(str(folder / 'dev.en'))}: file not found"):
        read_parallel_corpus(tmp_path, pairs=[("en", "de")], splits=SPLITS)


def test_no_files_at_all_and_two_files_for_one_side(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"en-de: no parallel files"):
        read_parallel_corpus(tmp_path, pairs=[("en", "de")], splits=SPLITS)
    folder = tmp_path / "en-de"
    for name in ("train.en", "train.en.gz", "train.de"):
        write_text(folder / name, "x\n")
    with pytest.raises(InputError, match=r"\['train\.en', 'train\.en\.gz'\] are the same side twice"):
        read_parallel_corpus(tmp_path, pairs=[("en", "de")], splits=SPLITS)


def test_line_count_mismatch_and_bad_text(tmp_path: Path) -> None:
    folder = tmp_path / "en-de"
    write_text(folder / "train.en", "a\nb\nc\n")
    write_text(folder / "train.de.gz", "a\nb\n")
    with pytest.raises(InputError) as error:
        read_parallel_corpus(tmp_path, pairs=[("en", "de")], splits=SPLITS)
    message = str(error.value)
    assert f"{folder / 'train.en'} has 3 lines" in message and f"{folder / 'train.de.gz'} has 2 lines" in message
    write_text(folder / "train.de.gz", "a\n\nc\n")
    with pytest.raises(InputError, match=r"train\.de\.gz:2: empty line"):
        read_parallel_corpus(tmp_path, pairs=[("en", "de")], splits=SPLITS)
    (folder / "train.en").write_bytes(b"a\nb\xc3\n")
    with pytest.raises(InputError, match=r"train\.en:2: invalid UTF-8"):
        read_plain_pair(folder / "train.en", folder / "train.de.gz", "train")


def test_bad_language_and_split(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="unknown language code 'english'"):
        read_parallel_corpus(tmp_path, pairs=[("english", "de")], splits=SPLITS)
    with pytest.raises(InputError, match="parallel splits"):
        read_parallel_corpus(tmp_path, pairs=[("en", "de")], splits={"dev": "dev"})
    with pytest.raises(InputError, match="split 'dev' is not one of"):
        read_plain_pair(tmp_path / "a", tmp_path / "b", "dev")


def test_shared_opennmt_toy_sample(shared_data: Path) -> None:
    folder = shared_data / "wmt-sample" / "opennmt-toy-ende"
    # real WMT text holds C1 controls (Windows-1252 punctuation decoded as Latin-1): refused unless removed
    with pytest.raises(InputError, match=r"src-train\.txt:664: control character U\+0096 at character 25 of "):
        read_plain_pair(folder / "src-train.txt", folder / "tgt-train.txt", "train")
    clean = TextCleaner("remove")
    train = read_plain_pair(folder / "src-train.txt", folder / "tgt-train.txt", "train", clean)
    assert clean.removed == 17  # 10 in src-train, 7 in tgt-train
    assert train.column("src")[663].as_py().startswith("Mannheim , 17 July 2007  CropEnergies AG")
    assert train.num_rows == 10_000
    assert train.column("src")[0].as_py().startswith("It is not acceptable that , with the help of")
    assert set(train.column("split").to_pylist()) == {"train"}
    test = read_plain_pair(folder / "src-test.txt", folder / "tgt-test.txt", "test")
    assert test.num_rows == 2_737
    assert test.column("src")[0].as_py().startswith("Orlando Bloom and Miranda Kerr still love each other")


def test_streamed_table_is_the_whole_read_one_byte_for_byte(tmp_path: Path) -> None:
    folder = tmp_path / "en-de"
    write_text(folder / "train.en.gz", "".join(f"sentence {i}\n" for i in range(7)))
    write_text(folder / "train.de", "".join(f" Satz {i} \r\n" for i in range(7)))
    write_text(folder / "newstest2014.en.sgm", sgm("en", [("d1", [("1", "Tom &amp; Jerry")])]))
    write_text(folder / "newstest2014.de.sgm", sgm("de", [("d1", [("1", "Tom &amp; Jerry")])]))
    whole = tmp_path / "whole.parquet"
    write_parallel_table(read_parallel_corpus(tmp_path, pairs=[("en", "de")], splits=SPLITS)["en-de"], whole)
    streamed = tmp_path / "out" / "en-de.parquet"
    counts = write_parallel_pair(tmp_path, pair=("en", "de"), splits=SPLITS, out=streamed)
    assert counts == {"train": 7, "test": 1}
    assert streamed.read_bytes() == whole.read_bytes()
    small_groups = tmp_path / "groups.parquet"
    write_parallel_pair(tmp_path, pair=("en", "de"), splits=SPLITS, out=small_groups, batch_rows=3)
    assert pq.ParquetFile(small_groups).metadata.num_row_groups == 3  # 3 + 3 + 2 rows
    assert pq.read_table(small_groups).equals(pq.read_table(whole))
    assert pq.read_table(small_groups).column("tgt").to_pylist()[:2] == ["Satz 0", "Satz 1"]


@pytest.mark.parametrize(("en_lines", "de_lines"), [(3, 2), (2, 4)])
def test_streaming_names_both_files_and_full_counts_on_a_mismatch(tmp_path: Path, en_lines: int, de_lines: int) -> None:
    folder = tmp_path / "en-de"
    write_text(folder / "train.en", "x\n" * en_lines)
    write_text(folder / "train.de.gz", "y\n" * de_lines)
    out = tmp_path / "en-de.parquet"
    expected = (
        f"parallel files differ in length: {folder / 'train.en'} has {en_lines} lines, "
        f"{folder / 'train.de.gz'} has {de_lines} lines"
    )
    with pytest.raises(InputError) as error:
        write_parallel_pair(tmp_path, pair=("en", "de"), splits=SPLITS, out=out, batch_rows=1)
    assert str(error.value) == expected
    assert not out.exists() and list(tmp_path.glob(".en-de.parquet.*")) == []  # nothing half-written is left


def test_streaming_reports_bad_lines_gzip_and_blank_segments(tmp_path: Path) -> None:
    folder = tmp_path / "en-de"
    write_text(folder / "train.en", "a\nb\n")
    write_text(folder / "train.de", "a\n \n")
    out = tmp_path / "en-de.parquet"
    with pytest.raises(InputError, match=r"train\.de:2: empty line"):
        write_parallel_pair(tmp_path, pair=("en", "de"), splits=SPLITS, out=out)
    (folder / "train.de").unlink()
    (folder / "train.de.gz").write_bytes(b"not gzip at all\n")
    with pytest.raises(InputError, match=r"train\.de\.gz: not a valid gzip file"):
        write_parallel_pair(tmp_path, pair=("en", "de"), splits=SPLITS, out=out)
    (folder / "train.de.gz").unlink()
    write_text(folder / "train.de", "a\nb\n")
    write_text(folder / "newstest2014.en.sgm", sgm("en", [("d1", [("1", "x"), ("2", " ")])]))
    write_text(folder / "newstest2014.de.sgm", sgm("de", [("d1", [("1", "X"), ("2", "Y")])]))
    with pytest.raises(InputError, match=r"newstest2014\.en\.sgm:5: <seg id='2'> is empty"):
        write_parallel_pair(tmp_path, pair=("en", "de"), splits=SPLITS, out=out)
    assert not out.exists()
