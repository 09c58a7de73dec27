"""Moses processing, the subword vocabulary and the per-pair text pipeline."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from common.errors import InputError
from mmt.text import BOS_ID, EOS_ID, PAD_ID, UNK_ID, MosesText, SubwordConfig, SubwordVocab, TextPipeline

# Typical captions with punctuation, inner hyphens, apostrophes and quotes; each is already in the
# form Moses' punctuation normaliser produces, so tokenise -> detokenise must give it back unchanged.
ROUND_TRIPS = {
    "en": [
        "A man in a red T-shirt is climbing a rock-face.",
        'Two dogs "play" in the snow, don\'t they?',
        "The children's toys (three of them) are on the floor!",
        "A well-dressed woman sits on a bench; she's reading.",
    ],
    "de": [
        "Ein Mann im roten T-Shirt klettert an einer Felswand.",
        'Er sagt: "Hallo!"',
        "Ein 3-jähriges Kind spielt mit einem Ball, oder?",
    ],
    "fr": [
        "Un homme regarde l'image, n'est-ce pas ?",
        "Une femme aujourd'hui porte un t-shirt bleu.",
        "Deux chiens jouent dans la neige.",
    ],
    "cs": [
        "Muž v červeném tričku šplhá po skále.",
        'Žena (vlevo) drží "malého" psa, že?',
    ],
}

EN = [
    "a man rides a horse on the beach .",
    "two dogs play in the snow .",
    "a woman reads a book in the park .",
    "a child throws a red ball .",
    "a man in a blue shirt rides a bike .",
    "two women walk on the beach .",
] * 4
DE = [
    "ein mann reitet ein pferd am strand .",
    "zwei hunde spielen im schnee .",
    "eine frau liest ein buch im park .",
    "ein kind wirft einen roten ball .",
    "ein mann in einem blauen hemd fährt fahrrad .",
    "zwei frauen gehen am strand .",
] * 4


def _pipeline(tmp_path: Path, *, joint: bool = True, max_len: int = 100, vocab_size: int = 60) -> TextPipeline:
    return TextPipeline.train(
        EN,
        DE,
        src_lang="en",
        tgt_lang="de",
        config=SubwordConfig(lowercase=True, vocab_size=vocab_size, joint=joint, max_len=max_len),
        out_dir=tmp_path,
        seed=1,
    )


@pytest.mark.parametrize(("lang", "sentence"), [(lang, s) for lang, items in ROUND_TRIPS.items() for s in items])
def test_moses_round_trip(lang: str, sentence: str) -> None:
    moses = MosesText(lang, lowercase=False)
    tokenized = moses.preprocess(sentence)
    assert tokenized != sentence  # punctuation really was split off
    assert moses.postprocess(tokenized) == sentence


def test_moses_tokens_follow_the_literature() -> None:
    assert MosesText("de", lowercase=False).preprocess("Ein T-Shirt, „rot“.") == 'Ein T @-@ Shirt , " rot " .'
    assert MosesText("fr", lowercase=False).preprocess("l'image") == "l' image"
    assert MosesText("en", lowercase=False).preprocess("the dog's ball") == "the dog 's ball"


def test_moses_normalises_typographic_punctuation() -> None:
    # German low-high quotes and French guillemets become ASCII quotes; French inner spaces are not restored.
    assert MosesText("de", lowercase=False).postprocess(MosesText("de", False).preprocess("Im „Schnee“.")) == (
        'Im "Schnee".'
    )
    fr = MosesText("fr", lowercase=False)
    assert fr.postprocess(fr.preprocess("« Bonjour » dit-il.")) == '"Bonjour" dit-il.'


def test_lowercasing() -> None:
    assert MosesText("de", lowercase=True).preprocess("Ein Mann im T-Shirt.") == "ein mann im t @-@ shirt ."
    assert MosesText("de", lowercase=False).preprocess("Ein Mann.") == "Ein Mann ."


def test_vocab_specials_and_round_trip(tmp_path: Path) -> None:
    vocab = SubwordVocab.train(EN, tmp_path / "en", 50, seed=0)
    assert (tmp_path / "en.model").is_file()
    assert [vocab.piece(i) for i in (PAD_ID, UNK_ID, BOS_ID, EOS_ID)] == ["<pad>", "<unk>", "<s>", "</s>"]
    assert vocab.size == 50
    ids = vocab.encode("a man reads a book on the beach .")
    assert ids and not {PAD_ID, UNK_ID, BOS_ID, EOS_ID} & set(ids)
    assert vocab.decode(ids) == "a man reads a book on the beach ."
    assert vocab.decode([BOS_ID, *ids, EOS_ID, PAD_ID]) == "a man reads a book on the beach ."


def test_vocab_is_deterministic(tmp_path: Path) -> None:
    first = SubwordVocab.train(EN + DE, tmp_path / "a" / "joint", 70, seed=3)
    second = SubwordVocab.train(EN + DE, tmp_path / "b" / "joint", 70, seed=3)
    assert (tmp_path / "a" / "joint.model").read_bytes() == (tmp_path / "b" / "joint.model").read_bytes()
    assert first.encode("zwei männer spielen fußball .") == second.encode("zwei männer spielen fußball .")


def test_vocab_too_large_falls_back_to_the_largest_possible(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="mmt.text"):
        vocab = SubwordVocab.train(EN, tmp_path / "small", 5000, seed=0)
    assert 4 < vocab.size < 5000
    assert f"corpus too small for 5000 subwords; using {vocab.size}" in caplog.text


def test_vocab_load_rejects_other_files(tmp_path: Path) -> None:
    (tmp_path / "bad.model").write_bytes(b"not a model")
    with pytest.raises(InputError, match=r"bad\.model: not a sentencepiece model"):
        SubwordVocab.load(tmp_path / "bad.model")
    with pytest.raises(InputError, match=r"missing\.model: sentencepiece model not found"):
        SubwordVocab.load(tmp_path / "missing.model")


def test_unknown_characters_are_counted(tmp_path: Path) -> None:
    pipeline = _pipeline(tmp_path)
    batch = pipeline.encode_source(["a man rides a horse .", "a € and a ¥ ."])
    assert batch.unknown == 2
    assert batch.ids[1].count(UNK_ID) == 2
    assert UNK_ID not in batch.ids[0]


def test_truncation_is_counted(tmp_path: Path) -> None:
    pipeline = _pipeline(tmp_path, max_len=5)
    long, short = "a man rides a horse on the beach .", "a man ."
    source = pipeline.encode_source([long, short])
    assert source.truncated == 1
    assert len(source.ids[0]) == 5
    target = pipeline.encode_target([long, short])
    assert target.truncated == 1
    assert len(target.ids[0]) == 5 and target.ids[0][-1] == EOS_ID  # the limit includes the EOS
    assert target.ids[1][-1] == EOS_ID and len(target.ids[1]) < 5


def test_empty_source_line_names_its_index(tmp_path: Path) -> None:
    pipeline = _pipeline(tmp_path)
    with pytest.raises(InputError, match="source sentence 2: empty"):
        pipeline.encode_source(["a dog .", "a cat .", "   "])
    with pytest.raises(InputError, match="target sentence 0: empty"):
        pipeline.encode_target([""])


def test_decode_target_stops_at_eos_and_detokenises(tmp_path: Path) -> None:
    pipeline = _pipeline(tmp_path)
    ids = pipeline.encode_target(["Zwei Hunde spielen im Schnee."]).ids[0]
    assert ids[-1] == EOS_ID
    assert pipeline.decode_target([[BOS_ID, *ids, 7, 8, PAD_ID]]) == ["zwei hunde spielen im schnee."]


def test_save_load_round_trip(tmp_path: Path) -> None:
    pipeline = _pipeline(tmp_path / "pair", joint=False)
    loaded = TextPipeline.load(tmp_path / "pair")
    sentences = ["A man rides a horse.", "Two women walk on the beach!"]
    assert loaded.config == pipeline.config
    assert loaded.encode_source(sentences) == pipeline.encode_source(sentences)
    assert loaded.encode_target(DE[:3]) == pipeline.encode_target(DE[:3])
    stored = json.loads((tmp_path / "pair" / "text.json").read_text())
    assert stored == {
        "src_lang": "en",
        "tgt_lang": "de",
        "lowercase": True,
        "joint": False,
        "max_len": 100,
        "src_vocab_size": pipeline.src_vocab.size,
        "tgt_vocab_size": pipeline.tgt_vocab.size,
    }


def test_joint_and_separate_vocabularies(tmp_path: Path) -> None:
    joint = _pipeline(tmp_path / "joint", joint=True)
    separate = _pipeline(tmp_path / "separate", joint=False)
    assert sorted(p.name for p in (tmp_path / "joint").iterdir()) == ["joint.model", "text.json"]
    assert sorted(p.name for p in (tmp_path / "separate").iterdir()) == ["src.model", "text.json", "tgt.model"]
    assert joint.src_vocab is joint.tgt_vocab
    loaded = TextPipeline.load(tmp_path / "joint")
    assert loaded.src_vocab is loaded.tgt_vocab
    # "ä" occurs only in the German side: known to the joint and target vocabularies, not the English one.
    assert UNK_ID in separate.src_vocab.encode("fährt")
    assert UNK_ID not in joint.src_vocab.encode("fährt")
    assert UNK_ID not in separate.tgt_vocab.encode("fährt")


def test_load_without_config_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"text\.json: not found"):
        TextPipeline.load(tmp_path)


def test_load_rejects_a_config_that_disagrees_with_the_models(tmp_path: Path) -> None:
    _pipeline(tmp_path)
    stored = json.loads((tmp_path / "text.json").read_text())
    (tmp_path / "text.json").write_text(json.dumps({**stored, "src_vocab_size": 7}))
    with pytest.raises(InputError, match="vocabulary sizes 7/"):
        TextPipeline.load(tmp_path)
    (tmp_path / "text.json").write_text(json.dumps({"src_lang": "en"}))
    with pytest.raises(InputError, match="not a valid text pipeline config"):
        TextPipeline.load(tmp_path)
