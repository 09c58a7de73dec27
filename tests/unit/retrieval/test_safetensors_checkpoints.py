"""Retrieval checkpoints as ``model.safetensors`` + ``model.json`` (common/checkpoints.py): every registered model
round-trips, two saves give the same bytes, ``model.pt`` of the earlier format still loads, and a damaged file
or a JSON missing a key is an InputError naming the file."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
import torch

from common.errors import InputError
from retrieval.checkpoint import KEYS, load_retrieval, save_retrieval
from retrieval.model import RetrievalModel
from retrieval.vocab import Vocabulary
from retrieval.zoo.registry import MODELS, build_model, make_config
from tests.unit.retrieval.test_model_contract import TINY

CPU = torch.device("cpu")
VOCAB = Vocabulary.build([("en", "a big red thing"), ("de", "ein großes rotes ding")], ["en", "de"], min_count=1)
TYPES = ("de-mmt", "en-human")
EXTRA: dict[str, Any] = {"best_epoch": 2, "history": [{"epoch": 0, "val_rsum": 12.5}], "store": "data/x"}


def toy(name: str = "san", seed: int = 0) -> tuple[RetrievalModel, Any]:
    torch.manual_seed(seed)
    config = make_config(name, TINY[name])
    return build_model(name, config, vocab_size=len(VOCAB), languages=2, region_dim=12), config


def save(path: Path, model: RetrievalModel, config: Any, extra: dict[str, Any] = EXTRA) -> None:
    save_retrieval(
        path,
        model,
        config=config,
        vocab=VOCAB,
        type_names=TYPES,
        type_weights=[0.25, 0.75],
        region_dim=12,
        max_len=20,
        extra=extra,
    )


def assert_same_weights(model: torch.nn.Module, other: torch.nn.Module) -> None:
    mine, theirs = model.state_dict(), other.state_dict()
    assert mine.keys() == theirs.keys()
    for name, tensor in mine.items():
        assert torch.equal(tensor, theirs[name]) and tensor.dtype == theirs[name].dtype, name


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_model_round_trips(tmp_path: Path, name: str) -> None:
    model, config = toy(name)
    save(tmp_path / "model", model, config)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["model.json", "model.safetensors"]
    loaded = load_retrieval(tmp_path / "model", device=CPU, expect_model=name)
    assert (loaded.name, loaded.vocab, loaded.type_names, loaded.max_len) == (name, VOCAB, TYPES, 20)
    assert loaded.extra == EXTRA and asdict(loaded.model.config) == asdict(config)  # type: ignore[call-overload]
    assert_same_weights(loaded.model, model)
    stored = json.loads((tmp_path / "model.json").read_text())
    assert set(stored) == (KEYS - {"state_dict"}) | {"weights_sha256"}


def test_two_saves_of_the_same_model_are_byte_identical(tmp_path: Path) -> None:
    save(tmp_path / "a" / "model", *toy(seed=1))
    save(tmp_path / "b" / "model", *toy(seed=1), extra=dict(reversed(EXTRA.items())))
    for name in ("model.safetensors", "model.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    text = (tmp_path / "a" / "model.json").read_text()
    assert text == json.dumps(json.loads(text), indent=2, sort_keys=True) + "\n"
    save(tmp_path / "c" / "model", *toy(seed=2))
    assert (tmp_path / "c" / "model.safetensors").read_bytes() != (tmp_path / "a" / "model.safetensors").read_bytes()


def test_a_model_pt_of_the_earlier_format_still_loads(tmp_path: Path) -> None:
    model, config = toy("vsepp", seed=3)
    torch.save(
        {
            "model": "vsepp",
            "config": asdict(config),
            "vocab": VOCAB.to_dict(),
            "type_names": list(TYPES),
            "type_weights": [0.5, 0.5],
            "region_dim": 12,
            "max_len": 20,
            "state_dict": model.state_dict(),
            "extra": {"store": "old"},
        },
        tmp_path / "model.pt",
    )
    for name in ("model.pt", "model"):
        loaded = load_retrieval(tmp_path / name, device=CPU, expect_model="vsepp")
        assert loaded.extra == {"store": "old"} and loaded.type_names == TYPES
        assert_same_weights(loaded.model, model)
    save(tmp_path / "model", *toy("vsepp", seed=4))  # a new save replaces the old file
    assert sorted(path.name for path in tmp_path.iterdir()) == ["model.json", "model.safetensors"]


@pytest.mark.parametrize("cut", [0, 8, 50, -1])
def test_a_truncated_weights_file_names_the_file(tmp_path: Path, cut: int) -> None:
    save(tmp_path / "model", *toy())
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:cut])
    with pytest.raises(InputError, match=r"model\.safetensors: not the weights that model\.json was written with"):
        load_retrieval(tmp_path / "model", device=CPU)


def test_a_corrupt_weights_file_names_the_file(tmp_path: Path) -> None:
    save(tmp_path / "model", *toy())
    weights = tmp_path / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[100] ^= 0x01
    weights.write_bytes(bytes(data))
    with pytest.raises(InputError, match=r"model\.safetensors: not the weights"):
        load_retrieval(tmp_path / "model", device=CPU)


@pytest.mark.parametrize("key", sorted((KEYS - {"state_dict"}) | {"weights_sha256"}))
def test_a_json_missing_a_key_names_the_file(tmp_path: Path, key: str) -> None:
    save(tmp_path / "model", *toy())
    fields = json.loads((tmp_path / "model.json").read_text())
    del fields[key]
    (tmp_path / "model.json").write_text(json.dumps(fields))
    with pytest.raises(InputError, match=r"model\.json: not (a retrieval checkpoint|retrieval checkpoint fields)"):
        load_retrieval(tmp_path / "model", device=CPU)


def test_a_json_of_another_config_or_vocabulary_names_the_file(tmp_path: Path) -> None:
    save(tmp_path / "model", *toy())
    path = tmp_path / "model.json"
    fields = json.loads(path.read_text())
    path.write_text(json.dumps({**fields, "config": {**fields["config"], "hidden": 32}}))
    with pytest.raises(InputError, match=r"model\.safetensors: weights do not fit a 'san' model of the stored config"):
        load_retrieval(tmp_path / "model", device=CPU)
    path.write_text(json.dumps({**fields, "vocab": {"languages": ["en"]}}))
    with pytest.raises(InputError, match=r"model\.json: the vocabulary lacks the key 'entries'"):
        load_retrieval(tmp_path / "model", device=CPU)
    path.write_text(json.dumps({**fields, "model": "nope"}))
    with pytest.raises(InputError, match=r"model\.json: .*nope"):
        load_retrieval(tmp_path / "model", device=CPU)


def test_a_missing_checkpoint_names_the_weights_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"model\.safetensors: retrieval checkpoint not found"):
        load_retrieval(tmp_path / "model", device=CPU)
