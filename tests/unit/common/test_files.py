"""Atomic writes and strict line reading."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import pytest

from common.errors import InputError
from common.files import (
    atomic_dir,
    atomic_path,
    final_path,
    iter_lines,
    read_lines,
    read_parallel_lines,
    staged_children,
    write_text,
)


def test_atomic_path_keeps_old_file_when_writer_fails(tmp_path: Path) -> None:
    target = tmp_path / "table.parquet"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("killed")
    assert target.read_text() == "old"
    assert [path.name for path in tmp_path.iterdir()] == ["table.parquet"]


def test_atomic_dir_replaces_whole_folder_only_on_success(tmp_path: Path) -> None:
    target = tmp_path / "out"
    with atomic_dir(target) as tmp:
        (tmp / "stale.txt").write_text("1")
    with pytest.raises(RuntimeError), atomic_dir(target) as tmp:
        (tmp / "new.txt").write_text("2")
        raise RuntimeError("killed")
    assert [path.name for path in target.iterdir()] == ["stale.txt"]
    with atomic_dir(target) as tmp:
        (tmp / "new.txt").write_text("2")
    assert [path.name for path in target.iterdir()] == ["new.txt"]  # nothing of the earlier run survives
    assert [path.name for path in tmp_path.iterdir()] == ["out"]


def test_gz_text_is_reproducible_and_readable(tmp_path: Path) -> None:
    write_text(tmp_path / "a.en.gz", "Ein Hund.\nZwei Katzen.\n")
    first = (tmp_path / "a.en.gz").read_bytes()
    write_text(tmp_path / "a.en.gz", "Ein Hund.\nZwei Katzen.\n")
    assert (tmp_path / "a.en.gz").read_bytes() == first
    assert read_lines(tmp_path / "a.en.gz") == ["Ein Hund.", "Zwei Katzen."]


def test_read_lines_names_file_and_line_of_bad_input(tmp_path: Path) -> None:
    bad_utf8 = tmp_path / "train.de.gz"
    bad_utf8.write_bytes(gzip.compress(b"gut\n" + b"schl\xfcssel\n"))
    with pytest.raises(InputError, match=rf"{bad_utf8}:2: invalid UTF-8 at byte 4"):
        read_lines(bad_utf8)
    empty = tmp_path / "train.en"
    empty.write_text("a dog\n\na cat\n", encoding="utf-8")
    with pytest.raises(InputError, match=rf"{empty}:2: empty line"):
        read_lines(empty)
    assert read_lines(empty, allow_empty=True) == ["a dog", "", "a cat"]
    with pytest.raises(InputError, match="file not found"):
        read_lines(tmp_path / "missing.en")


def test_truncated_gzip_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "train.en.gz"
    path.write_bytes(gzip.compress(b"a dog\n" * 100)[:30])
    with pytest.raises(InputError, match=rf"{path}: not a valid gzip file"):
        read_lines(path)


def test_crlf_line_ends_are_stripped(tmp_path: Path) -> None:
    path = tmp_path / "x.en"
    path.write_bytes(b"a dog\r\na cat\r\n")
    assert read_lines(path) == ["a dog", "a cat"]


def test_parallel_mismatch_names_both_files_and_counts(tmp_path: Path) -> None:
    src, tgt = tmp_path / "train.en", tmp_path / "train.de"
    src.write_text("a\nb\nc\n", encoding="utf-8")
    tgt.write_text("x\ny\n", encoding="utf-8")
    with pytest.raises(InputError, match=rf"{src} has 3 lines, {tgt} has 2 lines"):
        read_parallel_lines(src, tgt)


def test_written_files_and_folders_get_the_umask_mode_not_the_temporary_0600(tmp_path: Path) -> None:
    import stat

    from common.files import DIR_MODE, FILE_MODE, atomic_dir, write_text

    write_text(tmp_path / "report.md", "# results\n")
    assert stat.S_IMODE((tmp_path / "report.md").stat().st_mode) == FILE_MODE
    with atomic_dir(tmp_path / "folder") as folder:
        (folder / "a.txt").write_text("a")
    assert stat.S_IMODE((tmp_path / "folder").stat().st_mode) == DIR_MODE
    mask = os.umask(0)
    os.umask(mask)
    assert (0o666 & ~mask, 0o777 & ~mask) == (FILE_MODE, DIR_MODE)


def test_staged_children_move_in_whole_entries_only_when_the_block_succeeds(tmp_path: Path) -> None:
    from common.files import staged_children

    out = tmp_path / "models"
    (out / "mmt-en-de").mkdir(parents=True)
    (out / "mmt-en-de" / "old.pt").write_text("old")
    (out / "keep.json").write_text("untouched")
    with pytest.raises(RuntimeError), staged_children(out) as staged:
        (staged / "mmt-en-de").mkdir()
        (staged / "mmt-en-de" / "pretrain.safetensors").write_text("early")
        raise RuntimeError("killed half way")
    assert sorted(p.name for p in out.iterdir()) == ["keep.json", "mmt-en-de"]  # nothing moved, no temporary left
    assert (out / "mmt-en-de" / "old.pt").read_text() == "old"
    stale = out / ".staged.abc.tmp"  # what a kill -9 leaves behind
    stale.mkdir()
    with staged_children(out) as staged:
        (staged / "mmt-en-de").mkdir()
        (staged / "mmt-en-de" / "finetune.safetensors").write_text("new")
        (staged / "mmt-en-de.json").write_text("{}")
    assert sorted(p.name for p in out.iterdir()) == ["keep.json", "mmt-en-de", "mmt-en-de.json"]
    assert sorted(p.name for p in (out / "mmt-en-de").iterdir()) == ["finetune.safetensors"]  # replaced as a whole


def test_a_byte_order_mark_is_no_part_of_the_first_line(tmp_path: Path) -> None:
    """Multi30K-layout text, image lists and WMT files saved by editors that write a UTF-8 byte-order mark: the
    first caption and the first image name come out without it (plain and gzip alike)."""
    plain, packed = tmp_path / "train.en", tmp_path / "train.en.gz"
    plain.write_bytes(b"\xef\xbb\xbfA dog.\nTwo cats.\n")
    packed.write_bytes(gzip.compress(b"\xef\xbb\xbfA dog.\nTwo cats.\n"))
    assert read_lines(plain) == read_lines(packed) == ["A dog.", "Two cats."]


def test_read_json_names_the_file_for_every_kind_of_bad_json(tmp_path: Path) -> None:
    from common.files import parse_json, read_json

    good = tmp_path / "good.json"
    good.write_bytes(b'\xef\xbb\xbf{"backend": "mmt"}')
    assert read_json(good) == {"backend": "mmt"}
    cases = {
        "missing.json": (None, r"missing\.json: cannot read it"),
        "broken.json": (b'{\n  "a": }\n', r"broken\.json:2:8: not valid JSON"),
        "latin.json": (b'{"a": "caf\xe9"}', r"latin\.json: not UTF-8 \(byte 10"),
        "deep.json": (b"[" * 100_000 + b"]" * 100_000, r"deep\.json: JSON nested too deeply"),
    }
    for name, (content, message) in cases.items():
        if content is not None:
            (tmp_path / name).write_bytes(content)
        with pytest.raises(InputError, match=message):
            read_json(tmp_path / name)
    with pytest.raises(InputError, match=r"^items\.jsonl:3: not valid JSON at column 7"):
        parse_json('{"a": ]', "items.jsonl:3")


def test_final_path_names_what_a_staged_or_temporary_path_becomes(tmp_path: Path) -> None:
    with staged_children(tmp_path / "models") as staged:
        assert final_path(staged / "mmt-en-de" / "src.model") == tmp_path / "models" / "mmt-en-de" / "src.model"
    with atomic_dir(tmp_path / "san-none-all") as folder:
        assert final_path(folder / "model.json") == tmp_path / "san-none-all" / "model.json"
    with atomic_path(tmp_path / "metrics.json") as file:
        assert final_path(file) == tmp_path / "metrics.json"
    assert final_path("data/models/mmt-en-de") == Path("data/models/mmt-en-de")  # a final path stays as it is


@pytest.mark.parametrize("name", ["lines.txt", "lines.txt.gz"])
def test_streamed_lines_are_the_whole_read(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    write_text(path, "\ufefffirst\r\nsecond  \nlast without end")
    assert list(iter_lines(path)) == read_lines(path) == ["first", "second  ", "last without end"]
    write_text(path, "a\n\nc\n")
    with pytest.raises(InputError, match=r"lines\.txt(\.gz)?:2: empty line"):
        list(iter_lines(path))
