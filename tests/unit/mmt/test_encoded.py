"""WMT-size text: the seeded subword sample, chunked (pooled) encoding into flat arrays, and batch planning on them."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from common.checks import SettingError
from common.errors import InputError
from mmt.encoded import EncodedPairs, encode_pairs, encode_pairs_into, open_encoded, write_encoded
from mmt.sample import reservoir_sample
from mmt.text import EOS_ID, MosesText, SubwordConfig, SubwordVocab, TextPipeline, train_sentencepiece
from mmt.train import Example, length_batches

EN = [
    "a man rides a horse on the beach.",
    "two dogs play in the snow.",
    "a woman reads a book in the park, doesn't she?",
    "a child throws a red ball.",
    "a man in a blue shirt rides a well-worn bike.",
    "two women walk on the beach.",
    "the old dog sleeps.",
]
DE = [
    "ein Mann reitet ein Pferd am Strand.",
    "zwei Hunde spielen im Schnee.",
    "eine Frau liest ein Buch im Park, oder?",
    "ein Kind wirft einen roten Ball.",
    "ein Mann in einem blauen Hemd fährt ein altes Fahrrad.",
    "zwei Frauen gehen am Strand.",
    "der alte Hund schläft.",
]


def _pipeline(tmp_path: Path, **config: int) -> TextPipeline:
    settings = SubwordConfig(vocab_size=80, max_len=8, **config)
    return TextPipeline.train(EN * 3, DE * 3, src_lang="en", tgt_lang="de", config=settings, out_dir=tmp_path, seed=5)


def _old_length_batches(
    examples: Sequence[Example], *, batch_size: int, sort_chunk: int, rng: np.random.Generator
) -> list[list[int]]:
    """length_batches as it was before the array path (sorted() on Python lengths)."""
    order = rng.permutation(len(examples)).tolist()
    chunk = batch_size * sort_chunk
    batches: list[list[int]] = []
    for start in range(0, len(order), chunk):
        part = sorted(order[start : start + chunk], key=lambda i: (len(examples[i].src_ids), len(examples[i].tgt_ids)))
        batches += [part[first : first + batch_size] for first in range(0, len(part), batch_size)]
    return [batches[i] for i in rng.permutation(len(batches))]


def _random_examples(count: int, seed: int) -> list[Example]:
    rng = np.random.default_rng(seed)
    return [
        Example(tuple(range(4, 4 + int(rng.integers(1, 5)))), (*range(4, 4 + int(rng.integers(0, 4))), EOS_ID))
        for _ in range(count)
    ]


@pytest.mark.parametrize(("count", "batch_size", "sort_chunk"), [(1, 4, 2), (97, 4, 3), (500, 7, 20), (64, 64, 1)])
def test_length_batches_are_the_former_ones_for_lists_and_arrays(count: int, batch_size: int, sort_chunk: int) -> None:
    examples = _random_examples(count, seed=count)  # few distinct lengths: many ties, which keep the shuffled order
    encoded = EncodedPairs(
        np.array([i for e in examples for i in e.src_ids], dtype=np.uint16),
        np.array([len(e.src_ids) for e in examples]),
        np.array([i for e in examples for i in e.tgt_ids], dtype=np.uint16),
        np.array([len(e.tgt_ids) for e in examples]),
    )
    assert list(encoded) == examples
    for seed in range(3):
        expected = _old_length_batches(
            examples, batch_size=batch_size, sort_chunk=sort_chunk, rng=np.random.default_rng(seed)
        )
        for data in (examples, encoded):
            got = length_batches(data, batch_size=batch_size, sort_chunk=sort_chunk, rng=np.random.default_rng(seed))
            assert got == expected
            assert all(type(index) is int for batch in got for index in batch)


def test_encoded_pairs_are_the_examples_of_the_pipeline_in_any_chunking(tmp_path: Path) -> None:
    text = _pipeline(tmp_path)
    src, tgt = EN * 2, DE * 2
    sources, targets = text.encode_source(src), text.encode_target(tgt)
    rows = np.arange(len(src), dtype=np.int64) * 10
    expected = [Example(tuple(s), tuple(t), int(r)) for s, t, r in zip(sources.ids, targets.ids, rows, strict=True)]
    assert sources.truncated and targets.truncated  # max_len 8 cuts the long ones
    for size in (1, 3, len(src)):
        chunks = [(src[i : i + size], tgt[i : i + size]) for i in range(0, len(src), size)]
        encoded = encode_pairs(text, chunks, image_rows=rows)
        assert list(encoded) == expected
        assert encoded.src_ids.dtype == np.uint16 and encoded.tgt_ids.dtype == np.uint16
    assert encoded[-1] == expected[-1] and encoded[2:4] == expected[2:4]
    assert encoded.lengths()[1].tolist() == [len(t) for t in targets.ids]
    with pytest.raises(IndexError, match="pair 14 of 14"):
        encoded[14]


def test_written_pairs_come_back_memory_mapped(tmp_path: Path) -> None:
    text = _pipeline(tmp_path)
    rows = np.arange(len(EN), dtype=np.int64)
    for image_rows in (None, rows):
        encoded = encode_pairs(text, [(EN, DE)], image_rows=image_rows)
        folder = tmp_path / f"encoded-{image_rows is None}"
        write_encoded(encoded, folder)
        mapped = open_encoded(folder)
        assert isinstance(mapped.src_ids, np.memmap) and isinstance(mapped.tgt_lengths, np.memmap)
        assert list(mapped) == list(encoded) and mapped.src_ids.dtype == np.uint16
        assert (mapped.image_rows is None) == (image_rows is None)
    (folder / "tgt_ids.npy").unlink()
    with pytest.raises(InputError, match=r"tgt_ids\.npy: not an encoded array"):
        open_encoded(folder)


def test_pairs_encoded_into_a_folder_are_those_in_memory(tmp_path: Path) -> None:
    text = _pipeline(tmp_path)
    chunks = [(EN[:3], DE[:3]), (EN[3:], DE[3:]), (EN, DE)]
    encode_pairs_into(text, chunks, tmp_path / "stored", threads=1)
    stored, expected = open_encoded(tmp_path / "stored"), encode_pairs(text, chunks)
    assert list(stored) == list(expected) and stored.src_ids.dtype == expected.src_ids.dtype == np.uint16
    encode_pairs_into(text, [], tmp_path / "none")
    assert len(open_encoded(tmp_path / "none")) == 0
    with pytest.raises(InputError, match=r"^source sentence 4: empty"):
        encode_pairs_into(text, [(EN[:3], DE[:3]), ([EN[0], " ", EN[2]], DE[:3])], tmp_path / "bad")
    assert not (tmp_path / "bad").exists()


def test_pooled_encoding_gives_the_same_pairs(tmp_path: Path) -> None:
    text = _pipeline(tmp_path)
    chunks = [(EN[:4], DE[:4]), (EN[4:], DE[4:]), (EN, DE)]
    alone = encode_pairs(text, chunks, threads=1)
    pooled = encode_pairs(text, chunks, threads=2)  # two spawned processes, chunks back in order
    assert list(pooled) == list(alone) and len(pooled) == 2 * len(EN)
    assert pooled.image_rows is None and pooled[0].image_row is None


def test_an_empty_sentence_is_named_by_its_index_over_all_chunks(tmp_path: Path) -> None:
    text = _pipeline(tmp_path)
    chunks = [(EN[:3], DE[:3]), (EN[:3], [DE[0], "  ", DE[2]])]
    with pytest.raises(InputError, match=r"^target sentence 4: empty \(every sentence must hold some text\)$"):
        encode_pairs(text, chunks)


def test_reservoir_sample_keeps_a_small_stream_whole_and_samples_a_large_one_uniformly() -> None:
    whole = reservoir_sample(iter("abcde"), 5, seed=1)
    assert (whole.items, whole.total) == (list("abcde"), 5)
    first = reservoir_sample(range(1000), 10, seed=3)
    assert first == reservoir_sample(range(1000), 10, seed=3) and first.total == 1000
    assert len(first.items) == 10 and first.items == sorted(first.items)  # stream order
    assert first.items != reservoir_sample(range(1000), 10, seed=4).items
    kept = Counter(item for seed in range(3000) for item in reservoir_sample(range(10), 3, seed=seed).items)
    assert all(abs(kept[item] - 900) < 90 for item in range(10))  # each of 10 kept 3/10 of the time
    with pytest.raises(ValueError, match="at least 1"):
        reservoir_sample(range(3), 0, seed=1)


def test_a_corpus_within_the_sample_trains_the_former_model_byte_for_byte(tmp_path: Path) -> None:
    text = _pipeline(tmp_path, sample_sentences=1000)
    former = [MosesText("en", False).preprocess(sentence) for sentence in EN * 3]
    proto = train_sentencepiece(former, vocab_size=80, seed=5, where="former")
    assert text.src_vocab.serialized == proto
    assert (tmp_path / "src.model").read_bytes() == proto


def test_a_larger_corpus_trains_on_the_seeded_sample(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    src = [f"{sentence} number {i}" for i, sentence in enumerate(EN * 300)]
    tgt = [f"{sentence} Nummer {i}" for i, sentence in enumerate(DE * 300)]
    config = SubwordConfig(vocab_size=120, sample_sentences=1000)
    with caplog.at_level(logging.INFO, logger="mmt.text"):
        text = TextPipeline.train(src, tgt, src_lang="en", tgt_lang="de", config=config, out_dir=tmp_path, seed=5)
    assert "a sample of 1000 of 2100 sentence pairs" in caplog.text
    sample = reservoir_sample(zip(src, tgt, strict=True), 1000, seed=5).items
    moses = MosesText("de", False)
    expected = train_sentencepiece([moses.preprocess(t) for _, t in sample], vocab_size=120, seed=5, where="x")
    assert text.tgt_vocab.serialized == expected
    whole = train_sentencepiece([moses.preprocess(t) for t in tgt], vocab_size=120, seed=5, where="x")
    assert expected != whole


def test_sentencepiece_threads_change_the_recorded_count_not_the_pieces(tmp_path: Path) -> None:
    sentences = [MosesText("en", False).preprocess(f"{s} {i}") for i, s in enumerate(EN * 40)]
    models = {n: train_sentencepiece(sentences, vocab_size=150, seed=2, where="x", num_threads=n) for n in (1, 2, 4)}
    assert models[2] == train_sentencepiece(sentences, vocab_size=150, seed=2, where="x", num_threads=2)
    vocabs = {n: SubwordVocab(proto) for n, proto in models.items()}
    pieces = {n: [(vocab.piece(i), vocab._sp.get_score(i)) for i in range(vocab.size)] for n, vocab in vocabs.items()}
    assert pieces[1] == pieces[2] == pieces[4]
    assert models[1] != models[2]  # the file records num_threads: the model's hash is per thread count


def test_sample_and_thread_knobs_are_checked() -> None:
    with pytest.raises(SettingError, match=r"sample_sentences.*got 10"):
        SubwordConfig(sample_sentences=10)
    with pytest.raises(SettingError, match=r"threads.*got 0"):
        SubwordConfig(threads=0)
