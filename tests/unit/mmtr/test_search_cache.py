"""`mmtr search` keeps the gallery's embeddings in a cache file named by the model's and the store's files: a second
query reads them instead of encoding the gallery again and ranks as a fresh search does, and a checkpoint or a store
written anew is never answered from the cache of the old one, even at the same size and modification time."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import retrieval.search
from mmtr import cli
from retrieval.search import fingerprint
from tests.cli_setup import TINY, CliSetup, build, write_retrieval_model


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliSetup:
    monkeypatch.setenv("MMTR_CACHE_DIR", str(tmp_path / "user-cache"))  # the finite scans' marks, not ~/.cache
    return build(tmp_path / "setup", TINY)


@pytest.fixture
def encoded(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of gallery images each search encoded (a search that read the cache adds nothing)."""
    counts: list[int] = []
    encode = retrieval.search.encode_images

    def counted(model: Any, regions: Any, rows: np.ndarray, **options: Any) -> Any:
        counts.append(len(rows))
        return encode(model, regions, rows, **options)

    monkeypatch.setattr(retrieval.search, "encode_images", counted)
    return counts


def search(setup: CliSetup, cache: Path, capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    cli.main([*setup.search_argv("a red circle", cache), "-k", "6", "--json"])
    hits: list[dict[str, Any]] = json.loads(capsys.readouterr().out)
    return hits


def rewritten(path: Path, data: bytes, *, keep_time: bool) -> None:
    """``path`` replaced by a new file holding ``data`` (renamed into place, as the writers do); with ``keep_time``
    it keeps the old modification time."""
    old = path.stat()
    new = path.with_name(f".{path.name}.new")
    new.write_bytes(data)
    if keep_time:
        os.utime(new, ns=(old.st_atime_ns, old.st_mtime_ns))
    os.replace(new, path)


def test_a_second_query_reads_the_gallery_from_the_cache(
    setup: CliSetup, tmp_path: Path, encoded: list[int], capsys: pytest.CaptureFixture[str]
) -> None:
    first = search(setup, tmp_path / "cache", capsys)
    assert encoded == [TINY.images] and len(list((tmp_path / "cache").glob("gallery-*.safetensors"))) == 1
    assert search(setup, tmp_path / "cache", capsys) == first
    assert encoded == [TINY.images]  # read, not encoded again
    assert search(setup, tmp_path / "another-cache", capsys) == first  # what the cache gave is what encoding gives
    assert encoded == [TINY.images, TINY.images]


def test_a_checkpoint_written_anew_misses_the_cache(
    setup: CliSetup, tmp_path: Path, encoded: list[int], capsys: pytest.CaptureFixture[str]
) -> None:
    first = search(setup, tmp_path / "cache", capsys)
    weights = setup.model / "model.safetensors"
    size = weights.stat().st_size
    torch.manual_seed(1)  # other weights of the same shapes: a file of the same size
    write_retrieval_model(setup.model, TINY)
    assert weights.stat().st_size == size
    second = search(setup, tmp_path / "cache", capsys)
    assert encoded == [TINY.images, TINY.images] and second != first


def test_a_store_written_anew_misses_the_cache(
    setup: CliSetup, tmp_path: Path, encoded: list[int], capsys: pytest.CaptureFixture[str]
) -> None:
    first = search(setup, tmp_path / "cache", capsys)
    regions = setup.store / "regions.npy"
    header = len(regions.read_bytes()) - TINY.images * TINY.regions * TINY.dim * 2  # float16 values after it
    data = regions.read_bytes()
    rewritten(regions, data[:header] + np.frombuffer(data[header:], np.float16)[::-1].tobytes(), keep_time=True)
    second = search(setup, tmp_path / "cache", capsys)
    assert encoded == [TINY.images, TINY.images] and second != first


def test_the_fingerprint_tells_a_replaced_file_of_the_same_size_and_time(tmp_path: Path) -> None:
    weights, store = tmp_path / "model.safetensors", tmp_path / "regions.npy"
    weights.write_bytes(b"weights one")
    store.write_bytes(b"regions")
    before = fingerprint(weights, store)
    assert fingerprint(weights, store) == before  # nothing changed: the same key
    rewritten(weights, b"weights two", keep_time=True)
    assert fingerprint(weights, store) != before
