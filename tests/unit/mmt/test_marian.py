"""The Marian trained here: training a tiny model, loading it back through the seq2seq backend, translating; never
touching the hub."""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from common.checks import SettingError
from common.errors import InputError
from common.stopping import Cancelled
from mmt.marian import MarianTrainConfig, train_marian
from mmt.seq2seq import Seq2SeqTranslator
from mmt.translator_protocol import Translator

CPU = torch.device("cpu")
COLOURS = {"red": "rotes", "blue": "blaues", "green": "grünes", "yellow": "gelbes", "black": "schwarzes"}
SHAPES = {"circle": "Kreis", "square": "Quadrat", "star": "Stern", "heart": "Herz"}
PLACES = {"left": "links", "right": "rechts", "top": "oben", "bottom": "unten", "middle": "in der Mitte"}
TINY = MarianTrainConfig(
    vocab_size=200,
    d_model=32,
    encoder_layers=1,
    decoder_layers=1,
    attention_heads=2,
    ffn_dim=64,
    max_position_embeddings=48,
    max_len=32,
    batch_size=16,
    epochs=1,
    warmup_steps=2,
    lr=1e-3,
)


def _toy_pairs() -> tuple[list[str], list[str]]:
    """100 English/German pairs ("A red circle is on the left." / "Ein rotes Kreis ist links.")."""
    src, tgt = [], []
    for index in range(100):
        colour = list(COLOURS)[index % 5]
        shape = list(SHAPES)[(index // 5) % 4]
        place = list(PLACES)[(index // 20) % 5]
        src.append(f"A {colour} {shape} is on the {place}.")
        tgt.append(f"Ein {COLOURS[colour]} {SHAPES[shape]} ist {PLACES[place]}.")
    return src, tgt


def _train(out_dir: Path, seed: int = 0) -> Seq2SeqTranslator:
    src, tgt = _toy_pairs()
    return train_marian(
        src,
        tgt,
        out_dir=out_dir,
        src_lang="en",
        tgt_lang="de",
        config=TINY,
        val=(src[:8], tgt[:8]),
        device=CPU,
        seed=seed,
    )


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Seq2SeqTranslator, Path]:
    folder = tmp_path_factory.mktemp("marian") / "marian-en-de"
    return _train(folder), folder


def test_training_writes_a_loadable_marian_folder(trained: tuple[Seq2SeqTranslator, Path]) -> None:
    translator, folder = trained
    names = {path.name for path in folder.iterdir()}
    assert {"config.json", "generation_config.json", "model.safetensors", "source.spm", "target.spm"} <= names
    assert "vocab.json" in names and not any(name.startswith(".") for name in names)
    vocab = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
    config = json.loads((folder / "config.json").read_text())
    assert vocab["</s>"] == 0 and vocab["<unk>"] == 1 and vocab["<pad>"] == len(vocab) - 1
    assert config["pad_token_id"] == config["decoder_start_token_id"] == len(vocab) - 1
    assert config["eos_token_id"] == 0 and config["vocab_size"] == len(vocab)
    assert json.loads((folder / "generation_config.json").read_text())["max_length"] == TINY.max_len + 1
    assert translator.name == "marian-en-de"
    assert isinstance(translator, Translator)


def test_translate_returns_one_string_per_input(trained: tuple[Seq2SeqTranslator, Path]) -> None:
    translator, _ = trained
    sentences = ["A red circle is on the left.", "A star.", "A black heart is at the bottom.", ""]
    outputs = translator.translate(sentences, beam=2, batch_size=3, max_len=8)
    assert len(outputs) == len(sentences) and all(isinstance(text, str) for text in outputs)
    assert translator.translate([], beam=2) == []


def test_translate_keeps_input_order(trained: tuple[Seq2SeqTranslator, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    # The tiny model says much the same for every input, so order is checked with a batch "model" that echoes.
    translator, _ = trained
    batches: list[list[str]] = []

    def echo(sentences: list[str], beam: int, max_new_tokens: int) -> list[str]:
        batches.append(sentences)
        return [sentence.upper() for sentence in sentences]

    monkeypatch.setattr(translator, "_translate_batch", echo)
    sentences = ["a much longer sentence here", "b", "a middle one", "", "ccc"]
    assert translator.translate(sentences, batch_size=2) == [sentence.upper() for sentence in sentences]
    assert batches == [["", "b"], ["ccc", "a middle one"], ["a much longer sentence here"]]  # grouped by length


def test_generate_gets_beam_and_max_new_tokens(
    trained: tuple[Seq2SeqTranslator, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    translator, _ = trained
    calls: list[dict[str, Any]] = []
    generate = translator.model.generate

    def recording_generate(**kwargs: Any) -> Any:
        calls.append(kwargs)
        return generate(**kwargs)

    monkeypatch.setattr(translator.model, "generate", recording_generate)
    translator.translate(["A red star.", "A blue heart is on the right.", "A square."], beam=3, batch_size=2, max_len=5)
    assert [call["input_ids"].shape[0] for call in calls] == [2, 1]
    assert all(call["num_beams"] == 3 and call["max_new_tokens"] == 5 for call in calls)
    translator.translate(["A star."], beam=1, max_len=1000)  # clamped to the model's positions
    assert calls[-1]["max_new_tokens"] == TINY.max_position_embeddings - 1


def test_score_is_the_teacher_forced_log_probability_and_ignores_images(
    trained: tuple[Seq2SeqTranslator, Path],
) -> None:
    """Each score, computed in padded batches, is minus transformers' own mean token cross-entropy of the pair alone
    times its number of target tokens (</s> included)."""
    translator, _ = trained
    src, tgt = _toy_pairs()
    sources, targets = [src[0], src[37], src[99]], [tgt[0], tgt[37], "Ein Herz."]
    scores = translator.score(sources, targets, ["a", "b", "c"], batch_size=2)
    for source, target, score in zip(sources, targets, scores, strict=True):
        inputs = translator.tokenizer([source], text_target=[target], return_tensors="pt")
        with torch.no_grad():
            loss = translator.model(**inputs).loss  # transformers shifts the labels into decoder inputs itself
        assert score == pytest.approx(-float(loss) * inputs["labels"].shape[1], abs=1e-4)
    assert translator.score(sources, targets, ["c", "b", "a"], batch_size=2) == scores
    assert translator.score(sources, targets, None, batch_size=2) == scores
    with pytest.raises(ValueError, match="3 sources but 1 targets"):
        translator.score(sources, targets[:1])


def test_training_is_deterministic(trained: tuple[Seq2SeqTranslator, Path], tmp_path: Path) -> None:
    translator, folder = trained
    again = _train(tmp_path / "again")
    assert (tmp_path / "again" / "model.safetensors").read_bytes() == (folder / "model.safetensors").read_bytes()
    assert (tmp_path / "again" / "vocab.json").read_bytes() == (folder / "vocab.json").read_bytes()
    sentences = ["A green square is in the middle.", "A yellow star is at the top."]
    assert again.translate(sentences, beam=2, max_len=10) == translator.translate(sentences, beam=2, max_len=10)
    other_seed = _train(tmp_path / "other", seed=1)
    assert not torch.equal(other_seed.model.model.shared.weight[:8, :8], translator.model.model.shared.weight[:8, :8])


def test_a_training_asked_to_stop_gives_up_before_a_batch_and_writes_no_folder(tmp_path: Path) -> None:
    src, tgt = _toy_pairs()
    stop = threading.Event()
    stop.set()  # the stage is stopping
    with pytest.raises(Cancelled, match=r"^marian-en-de train epoch 1: given up, the process is stopping$"):
        train_marian(
            src,
            tgt,
            out_dir=tmp_path / "marian-en-de",
            src_lang="en",
            tgt_lang="de",
            config=TINY,
            device=CPU,
            seed=0,
            stop=stop,
        )
    assert list(tmp_path.iterdir()) == []


def test_a_hub_id_is_refused_at_once() -> None:
    start = time.perf_counter()
    with pytest.raises(InputError, match="is not a local directory; this tool never downloads"):
        Seq2SeqTranslator.from_folder("Helsinki-NLP/opus-mt-en-de", src="en", tgt="de", device=CPU)
    assert time.perf_counter() - start < 2.0


def test_missing_files_are_named(trained: tuple[Seq2SeqTranslator, Path], tmp_path: Path) -> None:
    _, folder = trained
    broken = tmp_path / "broken"
    shutil.copytree(folder, broken)
    (broken / "model.safetensors").unlink()
    with pytest.raises(
        InputError, match=r"broken: not a model folder, missing model.safetensors or pytorch_model.bin$"
    ):
        Seq2SeqTranslator.from_folder(broken, src="en", tgt="de", device=CPU)
    (broken / "model.safetensors.index.json").write_text("{}")
    with pytest.raises(InputError, match=r"pytorch_model.bin \(its weights are sharded: save the model as one file\)$"):
        Seq2SeqTranslator.from_folder(broken, src="en", tgt="de", device=CPU)
    shutil.copyfile(folder / "model.safetensors", broken / "model.safetensors")
    (broken / "target.spm").unlink()
    with pytest.raises(InputError, match=r"broken: its tokenizer does not load"):
        Seq2SeqTranslator.from_folder(broken, src="en", tgt="de", device=CPU)


def test_bad_arguments_are_rejected(trained: tuple[Seq2SeqTranslator, Path]) -> None:
    translator, _ = trained
    with pytest.raises(ValueError, match="must be positive"):
        translator.translate(["A star."], beam=0)
    with pytest.raises(InputError, match="1 source but 2 target sentences"):
        train_marian(
            ["a"], ["b", "c"], out_dir=Path("unused"), src_lang="en", tgt_lang="de", config=TINY, device=CPU, seed=0
        )
    with pytest.raises(SettingError, match=r"max_len: got 128, allowed: 1 to 127"):
        MarianTrainConfig(max_len=128, max_position_embeddings=128)
    with pytest.raises(SettingError, match=r"attention_heads: got 3, allowed: a divisor of d_model"):
        MarianTrainConfig(d_model=64, attention_heads=3)
