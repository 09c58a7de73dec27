"""The seq2seq backend over every model family it runs, each built tiny and random in its real folder layout: load,
fine-tune a few steps, translate, save with only the needed files, reload; and held models found in the MT models
folder or a local Hugging Face cache, never the network."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from common.errors import InputError
from mmt.config import Seq2SeqFinetuneConfig
from mmt.held_models import ORIGIN_FILE, build_held_system, load_seq2seq_system, resolve_held_model
from mmt.seq2seq import Seq2SeqTranslator
from mmt.seq2seq_languages import detect_family

spm = pytest.importorskip("sentencepiece", reason="the tokenizers of every family read sentencepiece models")
transformers = pytest.importorskip("transformers", reason="the seq2seq backend is transformers' auto classes")

CPU = torch.device("cpu")
EN = ["A red circle is on the left.", "A blue star is at the top.", "A green heart is in the middle.", "A dog runs."]
DE = [
    "Ein rotes Kreis ist links.",
    "Ein blauer Stern ist oben.",
    "Ein grünes Herz ist in der Mitte.",
    "Ein Hund läuft.",
]
FR = [
    "Un cercle rouge est à gauche.",
    "Une étoile bleue est en haut.",
    "Un coeur vert est au milieu.",
    "Un chien court.",
]
TRAIN = (EN * 4, DE * 4)
VAL = (EN[:2], DE[:2])
FEW_STEPS = Seq2SeqFinetuneConfig(epochs=1, batch_size=4, max_steps=2, max_len=24, lr=1e-3, warmup_steps=1)
# what a hub folder may hold beside the files a translator loads: none may reach a system folder
FOREIGN_FILES = ("tf_model.h5", "flax_model.msgpack", "rust_model.ot", "model.onnx", "README.md", ".gitattributes")
TINY_SIZES = {
    "d_model": 16,
    "encoder_layers": 1,
    "decoder_layers": 1,
    "encoder_attention_heads": 2,
    "decoder_attention_heads": 2,
    "encoder_ffn_dim": 32,
    "decoder_ffn_dim": 32,
    "max_position_embeddings": 64,
}


def _train_spm(model_type: str, **specials: int) -> bytes:
    buffer = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(EN + DE + FR),
        model_writer=buffer,
        vocab_size=80,
        model_type=model_type,
        hard_vocab_limit=False,
        minloglevel=2,
        **specials,
    )
    return buffer.getvalue()


def _processor(proto: bytes) -> Any:
    return spm.SentencePieceProcessor(model_proto=proto)


def _with_foreign_files(folder: Path) -> Path:
    for name in FOREIGN_FILES:
        (folder / name).write_bytes(b"not needed")
    return folder


def _marian_folder(folder: Path, *, targets: tuple[str, ...] = (), bin_weights: bool = False) -> Path:
    """An OPUS-MT layout: source.spm, target.spm, vocab.json (with a >>xx<< token per target of a multi-target
    model), config.json, and model.safetensors or pytorch_model.bin."""
    folder.mkdir(parents=True)
    proto = _train_spm("unigram", unk_id=0, bos_id=-1, eos_id=1, pad_id=-1)
    (folder / "source.spm").write_bytes(proto)
    (folder / "target.spm").write_bytes(proto)
    processor = _processor(proto)
    vocab = {"</s>": 0, "<unk>": 1} | {f">>{code}<<": 2 + index for index, code in enumerate(targets)}
    for id_ in range(processor.get_piece_size()):
        if not (processor.is_control(id_) or processor.is_unknown(id_)):
            vocab.setdefault(processor.id_to_piece(id_), len(vocab))
    vocab["<pad>"] = len(vocab)
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    tokenizer = transformers.MarianTokenizer(
        source_spm=str(folder / "source.spm"), target_spm=str(folder / "target.spm"), vocab=str(folder / "vocab.json")
    )
    tokenizer.save_pretrained(folder)
    pad = len(vocab) - 1
    config = transformers.MarianConfig(
        vocab_size=len(vocab), pad_token_id=pad, decoder_start_token_id=pad, eos_token_id=0, **TINY_SIZES
    )
    _save_model(transformers.MarianMTModel(config), folder, bin_weights=bin_weights)
    return _with_foreign_files(folder)


def _save_model(model: Any, folder: Path, *, bin_weights: bool = False) -> None:
    model.save_pretrained(folder)
    if bin_weights:  # the older layout: a pickled state dict instead of safetensors
        torch.save(model.state_dict(), folder / "pytorch_model.bin")
        (folder / "model.safetensors").unlink()


def _bpe_vocab_and_merges(proto: bytes) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """A sentencepiece BPE model as the vocabulary and merges of a tokenizers BPE (what transformers' converter
    derives with protobuf): each piece's id, and for every piece the splits into two pieces, in piece order."""
    processor = _processor(proto)
    vocab = {processor.id_to_piece(id_): id_ for id_ in range(processor.get_piece_size())}
    merges = []
    for piece in sorted(vocab, key=vocab.__getitem__):
        splits = [(piece[:cut], piece[cut:]) for cut in range(1, len(piece))]
        merges += sorted(
            ((left, right) for left, right in splits if left in vocab and right in vocab),
            key=lambda pair: (vocab[pair[0]], vocab[pair[1]]),
        )
    return vocab, merges


def nllb_folder(folder: Path) -> Path:
    """An NLLB layout: an M2M100 config (model_type m2m_100) with an NllbTokenizer (tokenizer.json)."""
    proto = _train_spm("bpe", bos_id=0, pad_id=1, eos_id=2, unk_id=3)
    vocab, merges = _bpe_vocab_and_merges(proto)
    tokenizer = transformers.NllbTokenizer(vocab=vocab, merges=merges, src_lang="eng_Latn", tgt_lang="deu_Latn")
    tokenizer.save_pretrained(folder)
    config = transformers.M2M100Config(vocab_size=_vocab_size(tokenizer), **_fairseq_ids(), **TINY_SIZES)
    _save_model(transformers.M2M100ForConditionalGeneration(config), folder)
    return _with_foreign_files(folder)


def _m2m100_folder(folder: Path) -> Path:
    """An M2M100 layout: vocab.json and sentencepiece.bpe.model read by M2M100Tokenizer (language tokens __xx__)."""
    folder.mkdir(parents=True)
    proto = _train_spm("bpe", bos_id=0, pad_id=1, eos_id=2, unk_id=3)
    (folder / "sentencepiece.bpe.model").write_bytes(proto)
    processor = _processor(proto)
    vocab = {processor.id_to_piece(id_): id_ for id_ in range(processor.get_piece_size())}
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    tokenizer = transformers.M2M100Tokenizer(
        vocab_file=str(folder / "vocab.json"), spm_file=str(folder / "sentencepiece.bpe.model")
    )
    tokenizer.save_pretrained(folder)
    config = transformers.M2M100Config(vocab_size=_vocab_size(tokenizer), **_fairseq_ids(), **TINY_SIZES)
    _save_model(transformers.M2M100ForConditionalGeneration(config), folder)
    return _with_foreign_files(folder)


def _mbart50_folder(folder: Path) -> Path:
    """An mBART-50 layout: an mBART config with an MBart50Tokenizer (a unigram model, language codes en_XX...)."""
    proto = _train_spm("unigram", bos_id=0, pad_id=1, eos_id=2, unk_id=3)
    processor = _processor(proto)
    pieces = [(processor.id_to_piece(id_), processor.get_score(id_)) for id_ in range(processor.get_piece_size())]
    tokenizer = transformers.MBart50Tokenizer(vocab=pieces, src_lang="en_XX", tgt_lang="de_DE")
    tokenizer.save_pretrained(folder)
    config = transformers.MBartConfig(vocab_size=_vocab_size(tokenizer), **_fairseq_ids(), **TINY_SIZES)
    _save_model(transformers.MBartForConditionalGeneration(config), folder)
    return _with_foreign_files(folder)


def _vocab_size(tokenizer: Any) -> int:
    """Room for every id the tokenizer gives out (M2M100's language tokens lie past its len())."""
    language_ids = getattr(tokenizer, "lang_token_to_id", {}).values()
    return max([*tokenizer.get_vocab().values(), *language_ids]) + 1


def _fairseq_ids() -> dict[str, int]:
    return {"bos_token_id": 0, "pad_token_id": 1, "eos_token_id": 2, "decoder_start_token_id": 2}


@dataclass(frozen=True)
class Case:
    build: Callable[[Path], Path]
    family: str
    weights: str
    src_code: str | None
    tgt_code: str | None


CASES = {
    "marian-safetensors": Case(_marian_folder, "marian", "model.safetensors", None, None),
    "marian-bin": Case(lambda f: _marian_folder(f, bin_weights=True), "marian", "pytorch_model.bin", None, None),
    "marian-multi": Case(
        lambda f: _marian_folder(f, targets=("fr", "de")), "marian-multi", "model.safetensors", None, ">>de<<"
    ),
    "nllb": Case(nllb_folder, "nllb", "model.safetensors", "eng_Latn", "deu_Latn"),
    "m2m100": Case(_m2m100_folder, "m2m100", "model.safetensors", "en", "de"),
    "mbart50": Case(_mbart50_folder, "mbart50", "model.safetensors", "en_XX", "de_DE"),
}


@pytest.fixture(scope="module")
def held(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every case's model folder, under one MT models folder; named so no name gives the family away."""
    mt_models = tmp_path_factory.mktemp("mt-models")
    return {name: case.build(mt_models / f"held-{index}") for index, (name, case) in enumerate(CASES.items())}


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("fine_tuned", [True, False], ids=["fine-tuned", "as-is"])
def test_a_held_model_becomes_a_system_folder_with_only_its_files(
    name: str, fine_tuned: bool, held: dict[str, Path], tmp_path: Path
) -> None:
    case, folder = CASES[name], held[name]
    out = tmp_path / "mt-en-de"
    translator = build_held_system(
        resolve_held_model(folder.name, folder.parent),
        src="en",
        tgt="de",
        out_dir=out,
        language_codes={},
        finetune=FEW_STEPS if fine_tuned else None,
        train=TRAIN,
        val=VAL,
        device=CPU,
        seed=0,
    )
    files = {path.name for path in out.iterdir()}
    assert not files & set(FOREIGN_FILES)
    weights = "model.safetensors" if fine_tuned else case.weights  # fine-tuned weights are saved as safetensors
    assert {"config.json", "generation_config.json", weights, ORIGIN_FILE} <= files
    assert not files & {"model.safetensors", "pytorch_model.bin"} - {weights}
    tokenizer_files = files - {"config.json", "generation_config.json", weights, ORIGIN_FILE}
    assert tokenizer_files and tokenizer_files <= {path.name for path in folder.iterdir()}
    origin = json.loads((out / ORIGIN_FILE).read_text())
    assert origin == {
        "model": folder.name,
        "origin": "mt_models",
        "revision": None,
        "family": case.family,
        "src_code": case.src_code,
        "tgt_code": case.tgt_code,
        "fine_tuned": fine_tuned,
        "fine_tuning_pairs": len(TRAIN[0]) if fine_tuned else 0,
    }
    if not fine_tuned:  # as it is: the held weights byte for byte
        assert (out / weights).read_bytes() == (folder / case.weights).read_bytes()
    outputs = translator.translate(EN, beam=2, batch_size=3, max_len=6)
    assert len(outputs) == len(EN) and all(isinstance(text, str) for text in outputs)
    again = load_seq2seq_system(out, src="en", tgt="de", device=CPU)
    assert again.languages == translator.languages
    assert again.translate(EN, beam=2, batch_size=3, max_len=6) == outputs
    scores = again.score(EN, DE, batch_size=3)
    assert len(scores) == len(EN) and all(score < 0 for score in scores)


def test_fine_tuning_changes_the_weights_and_keeps_the_held_ones(held: dict[str, Path], tmp_path: Path) -> None:
    folder = held["nllb"]
    before = Seq2SeqTranslator.from_folder(folder, src="en", tgt="de", device=CPU)
    tuned = build_held_system(
        resolve_held_model(folder.name, folder.parent),
        src="en",
        tgt="de",
        out_dir=tmp_path / "tuned",
        language_codes={},
        finetune=FEW_STEPS,
        train=TRAIN,
        val=VAL,
        device=CPU,
        seed=0,
    )
    weight = "model.shared.weight"
    assert not torch.equal(tuned.model.state_dict()[weight], before.model.state_dict()[weight])
    unchanged = Seq2SeqTranslator.from_folder(folder, src="en", tgt="de", device=CPU)
    assert torch.equal(unchanged.model.state_dict()[weight], before.model.state_dict()[weight])


def test_the_family_comes_from_config_and_tokenizer_not_the_folder_name(held: dict[str, Path], tmp_path: Path) -> None:
    found = {
        name: detect_family(held[name], transformers.AutoTokenizer.from_pretrained(str(held[name]))) for name in CASES
    }
    assert found == {name: case.family for name, case in CASES.items()}
    config = json.loads((held["mbart50"] / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "model_type": "t5"}))
    with pytest.raises(InputError, match=r"model_type 't5' with MBart50Tokenizer is not a supported family"):
        detect_family(tmp_path, transformers.AutoTokenizer.from_pretrained(str(held["mbart50"])))


def test_multi_target_marian_prepends_the_target_token(held: dict[str, Path]) -> None:
    folder = held["marian-multi"]
    vocab = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
    for target in ("fr", "de"):
        translator = Seq2SeqTranslator.from_folder(folder, src="en", tgt=target, device=CPU)
        ids = translator.encode(EN[:2], None, max_length=32)["input_ids"]
        assert ids[:, 0].tolist() == [vocab[f">>{target}<<"]] * 2
        assert translator.encode(EN[:1], None, max_length=32)["input_ids"].shape[1] == ids[0].ne(vocab["<pad>"]).sum()
    with pytest.raises(InputError, match=rf"{folder}: this multi-target model has no target token >>cs<< for 'cs'"):
        Seq2SeqTranslator.from_folder(folder, src="en", tgt="cs", device=CPU)
    cs_as_de = Seq2SeqTranslator.from_folder(
        folder, src="en", tgt="cs", device=CPU, language_codes={"marian-multi": {"cs": "de"}}
    )
    assert cs_as_de.languages.source_prefix == ">>de<< "


@pytest.mark.parametrize(
    ("name", "source_code", "target_code"),
    [("nllb", "eng_Latn", "deu_Latn"), ("mbart50", "en_XX", "de_DE"), ("m2m100", "__en__", "__de__")],
)
def test_language_code_families_mark_the_source_and_force_the_target(
    name: str, source_code: str, target_code: str, held: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    translator = Seq2SeqTranslator.from_folder(held[name], src="en", tgt="de", device=CPU)
    tokenizer = translator.tokenizer
    source_id, target_id = tokenizer.convert_tokens_to_ids(source_code), tokenizer.convert_tokens_to_ids(target_code)
    assert translator.languages.forced_bos_token_id == target_id
    encoded = translator.encode(EN[:1], DE[:1], max_length=32)
    assert encoded["input_ids"][0, 0] == source_id and encoded["input_ids"][0, -1] == tokenizer.eos_token_id
    assert encoded["labels"][0, 0] == target_id
    calls: list[dict[str, Any]] = []
    generate = translator.model.generate

    def recording_generate(**kwargs: Any) -> Any:
        calls.append(kwargs)
        return generate(**kwargs)

    monkeypatch.setattr(translator.model, "generate", recording_generate)
    outputs = translator.translate(EN[:2], beam=1, max_len=4)
    assert calls[0]["forced_bos_token_id"] == target_id
    assert all(target_code not in text for text in outputs)  # the code is a special token, decoded away


def test_a_language_without_a_code_names_the_params_key(held: dict[str, Path]) -> None:
    with pytest.raises(InputError, match=r"no nllb language code for 'xx'; set mmt\.seq2seq\.language_codes\.nllb\.xx"):
        Seq2SeqTranslator.from_folder(held["nllb"], src="en", tgt="xx", device=CPU)
    with pytest.raises(InputError, match=r"the mbart50 tokenizer has no language code 'de_CH'"):
        Seq2SeqTranslator.from_folder(
            held["mbart50"], src="en", tgt="de", device=CPU, language_codes={"mbart50": {"de": "de_CH"}}
        )


def _place_in_hub_cache(folder: Path, cache: Path, model_id: str, revision: str) -> Path:
    """The layout huggingface_hub writes: models--org--name/snapshots/<revision>/<files>, refs/main."""
    repo = cache / f"models--{model_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / revision
    snapshot.mkdir(parents=True)
    for path in folder.iterdir():
        (snapshot / path.name).write_bytes(path.read_bytes())
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    return snapshot


def test_a_model_id_is_found_in_the_local_hub_cache_only(
    held: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "hub"
    revision = "0123456789abcdef0123456789abcdef01234567"
    snapshot = _place_in_hub_cache(held["m2m100"], cache, "tiny-org/tiny-m2m100", revision)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    found = resolve_held_model("tiny-org/tiny-m2m100", tmp_path / "mt-models")
    assert found.folder == snapshot and found.origin == "hub_cache"
    translator = build_held_system(
        found,
        src="en",
        tgt="de",
        out_dir=tmp_path / "mt-en-de",
        language_codes={},
        finetune=None,
        train=TRAIN,
        val=VAL,
        device=CPU,
        seed=0,
    )
    assert translator.languages.family == "m2m100"
    origin = json.loads((tmp_path / "mt-en-de" / ORIGIN_FILE).read_text())
    assert (origin["model"], origin["origin"], origin["revision"]) == ("tiny-org/tiny-m2m100", "hub_cache", revision)
    with pytest.raises(InputError, match=rf"^tiny-org/absent: not in the Hugging Face cache {cache} .*huggingface-cli"):
        resolve_held_model("tiny-org/absent", tmp_path / "mt-models")
    with pytest.raises(InputError, match=r"mt-models/opus-mt-xx-yy: no such model folder"):
        resolve_held_model("opus-mt-xx-yy", tmp_path / "mt-models")
