"""MMT checkpoints as ``<name>.safetensors`` + ``<name>.json`` (common/checkpoints.py): round trip, reproducible
bytes, the earlier ``.pt`` format still read, and damaged files refused naming the file."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, replace
from pathlib import Path

import pytest
import torch

from common.checkpoints import checkpoint_files, checkpoint_stem, write_checkpoint
from common.checkpoints import read_checkpoint as read_checkpoint_files
from common.errors import InputError
from mmt.checkpoint import load_mmt, load_pretrained_into, read_checkpoint, record_text_pipeline, save_mmt
from mmt.model import RegionalMMT
from mmt.systems import BACKENDS, history_file
from tests.unit.mmt.test_train import CONFIG, CPU, new_model

EXTRA = {"step": 12, "score": 0.25, "train_config": {"lr": 0.0004, "epochs": 3}, "note": "x"}


def assert_same_weights(model: RegionalMMT, other: RegionalMMT) -> None:
    mine, theirs = model.state_dict(), other.state_dict()
    assert mine.keys() == theirs.keys()
    for name, tensor in mine.items():
        assert torch.equal(tensor, theirs[name]) and tensor.dtype == theirs[name].dtype, name


def save_old_format(path: Path, model: RegionalMMT, extra: dict[str, object]) -> None:
    """A checkpoint as the earlier save_mmt wrote it: one torch.save dict."""
    torch.save(
        {
            "config": asdict(model.config),
            "shape": asdict(model.shape),
            "state_dict": model.state_dict(),
            "extra": extra,
        },
        path,
    )


def test_round_trip_gives_the_same_tensors_config_and_extra(tmp_path: Path) -> None:
    model = new_model(replace(CONFIG, layers=2))
    save_mmt(tmp_path / "finetune", model, extra=EXTRA)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["finetune.json", "finetune.safetensors"]
    loaded, extra = load_mmt(tmp_path / "finetune", device=CPU)
    assert extra == EXTRA and loaded.config == model.config and loaded.shape == model.shape
    assert_same_weights(loaded, model)
    stored = json.loads((tmp_path / "finetune.json").read_text())
    assert set(stored) == {"config", "shape", "extra", "weights_sha256"}  # no tensor in the JSON
    # any of the checkpoint's names reaches the same files
    for name in ("finetune.safetensors", "finetune.json", "finetune.pt"):
        assert_same_weights(load_mmt(tmp_path / name, device=CPU)[0], model)


def test_two_saves_of_the_same_model_are_byte_identical(tmp_path: Path) -> None:
    save_mmt(tmp_path / "a" / "finetune", new_model(seed=3), extra=EXTRA)
    save_mmt(tmp_path / "b" / "finetune", new_model(seed=3), extra=dict(reversed(EXTRA.items())))
    for name in ("finetune.safetensors", "finetune.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    text = (tmp_path / "a" / "finetune.json").read_text()
    assert text == json.dumps(json.loads(text), indent=2, sort_keys=True) + "\n"  # sorted keys, a final newline
    save_mmt(tmp_path / "c" / "finetune", new_model(seed=4), extra=EXTRA)  # other weights: other bytes, other hash
    weights = [(tmp_path / folder / "finetune.safetensors").read_bytes() for folder in ("a", "c")]
    assert weights[0] != weights[1]
    assert (tmp_path / "c" / "finetune.json").read_text() != text


def test_a_checkpoint_of_the_earlier_pt_format_still_loads(tmp_path: Path) -> None:
    model = new_model(seed=5)
    save_old_format(tmp_path / "finetune.pt", model, {"step": 3})
    for name in ("finetune.pt", "finetune", "finetune.safetensors"):  # only the .pt is there: every name reads it
        loaded, extra = load_mmt(tmp_path / name, device=CPU)
        assert extra == {"step": 3} and loaded.config == model.config
        assert_same_weights(loaded, model)
    assert BACKENDS["mmt"].weights_file(tmp_path) == tmp_path / "finetune.pt"
    # fine-tuning from an old pretrain.pt works as before
    save_old_format(tmp_path / "pretrain.pt", new_model(seed=6), {})
    skipped = load_pretrained_into(new_model(seed=7), tmp_path / "pretrain.pt")
    assert skipped == ["region_proj.bias", "region_proj.weight"]


def test_saving_replaces_an_earlier_pt_and_recording_the_pipeline_converts_one(tmp_path: Path) -> None:
    save_old_format(tmp_path / "finetune.pt", new_model(seed=1), {"step": 1})
    record_text_pipeline(tmp_path / "finetune.pt", {"src_lang": "en", "tgt_lang": "de"})
    assert sorted(path.name for path in tmp_path.iterdir()) == ["finetune.json", "finetune.safetensors"]
    loaded, extra = load_mmt(tmp_path / "finetune", device=CPU)
    assert extra == {"step": 1, "text_pipeline": {"src_lang": "en", "tgt_lang": "de"}}
    assert_same_weights(loaded, new_model(seed=1))
    save_old_format(tmp_path / "pretrain.pt", new_model(seed=1), {})
    save_mmt(tmp_path / "pretrain", new_model(seed=2), extra={})
    assert not (tmp_path / "pretrain.pt").exists()  # never read in place of the new weights
    assert_same_weights(load_mmt(tmp_path / "pretrain.pt", device=CPU)[0], new_model(seed=2))


def test_recording_the_text_pipeline_rewrites_the_json_only(tmp_path: Path) -> None:
    save_mmt(tmp_path / "finetune", new_model(), extra=EXTRA)
    weights = (tmp_path / "finetune.safetensors").read_bytes()
    stamp = (tmp_path / "finetune.safetensors").stat().st_ino
    record_text_pipeline(tmp_path / "finetune", {"src_lang": "en", "tgt_lang": "de", "src_model": "ab"})
    assert (tmp_path / "finetune.safetensors").read_bytes() == weights
    assert (tmp_path / "finetune.safetensors").stat().st_ino == stamp
    assert load_mmt(tmp_path / "finetune", device=CPU)[1]["text_pipeline"]["src_model"] == "ab"
    assert not list(tmp_path.glob(".*tmp"))  # written atomically, nothing left behind


@pytest.mark.parametrize("cut", [0, 7, 100, -1])
def test_a_truncated_weights_file_names_the_file(tmp_path: Path, cut: int) -> None:
    save_mmt(tmp_path / "finetune", new_model(), extra={})
    weights = tmp_path / "finetune.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[:cut])
    with pytest.raises(InputError, match=r"finetune\.safetensors: not the weights that finetune\.json was written"):
        load_mmt(tmp_path / "finetune", device=CPU)


def test_damaged_weights_or_a_torn_pair_are_refused(tmp_path: Path) -> None:
    save_mmt(tmp_path / "finetune", new_model(seed=1), extra={})
    weights = tmp_path / "finetune.safetensors"
    data = bytearray(weights.read_bytes())
    data[-3] ^= 0xFF  # one flipped byte in a tensor: still a valid safetensors file
    weights.write_bytes(bytes(data))
    with pytest.raises(InputError, match=r"finetune\.safetensors: not the weights that finetune\.json"):
        read_checkpoint(tmp_path / "finetune", device=CPU)
    # the weights of another save beside this save's JSON (a crash between the two renames)
    save_mmt(tmp_path / "other", new_model(seed=2), extra={})
    (tmp_path / "other.safetensors").replace(weights)
    with pytest.raises(InputError, match=r"finetune\.safetensors: not the weights"):
        load_pretrained_into(new_model(), tmp_path / "finetune")


def test_a_malformed_weights_file_that_matches_its_json_names_the_file(tmp_path: Path) -> None:
    write_checkpoint(tmp_path / "finetune", {}, {"config": {}, "shape": {}, "extra": {}})
    (tmp_path / "finetune.safetensors").write_bytes(b"\xff" * 16)
    fields = json.loads((tmp_path / "finetune.json").read_text())
    fields["weights_sha256"] = hashlib.sha256(b"\xff" * 16).hexdigest()
    (tmp_path / "finetune.json").write_text(json.dumps(fields))
    with pytest.raises(InputError, match=r"finetune\.safetensors: not a readable MMT checkpoint"):
        load_mmt(tmp_path / "finetune", device=CPU)


@pytest.mark.parametrize("key", ["config", "shape", "extra", "weights_sha256"])
def test_a_json_missing_a_key_names_the_file(tmp_path: Path, key: str) -> None:
    save_mmt(tmp_path / "finetune", new_model(), extra={})
    fields = json.loads((tmp_path / "finetune.json").read_text())
    del fields[key]
    (tmp_path / "finetune.json").write_text(json.dumps(fields))
    with pytest.raises(InputError, match=r"finetune\.json: not (an MMT checkpoint of this version|MMT checkpoint fie)"):
        load_mmt(tmp_path / "finetune", device=CPU)


def test_a_json_with_bad_fields_names_the_file(tmp_path: Path) -> None:
    save_mmt(tmp_path / "finetune", new_model(), extra={})
    path = tmp_path / "finetune.json"
    fields = json.loads(path.read_text())
    path.write_text(json.dumps({**fields, "shape": {**fields["shape"], "colour": 1}}))
    with pytest.raises(InputError, match=r"finetune\.json: shape fields \['colour'\] are unknown to MMTShape"):
        load_mmt(tmp_path / "finetune", device=CPU)
    path.write_text(json.dumps({**fields, "config": [1, 2]}))
    with pytest.raises(InputError, match=r"finetune\.json: config is a list, not an object of fields"):
        load_mmt(tmp_path / "finetune", device=CPU)
    path.write_text(json.dumps(fields)[:-5])
    with pytest.raises(InputError, match=r"finetune\.json.*not valid JSON"):
        load_mmt(tmp_path / "finetune", device=CPU)
    path.write_text("[]")
    with pytest.raises(InputError, match=r"finetune\.json: not MMT checkpoint fields \(expected a JSON object"):
        load_mmt(tmp_path / "finetune", device=CPU)


def test_a_missing_half_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"finetune\.safetensors: MMT checkpoint not found"):
        load_mmt(tmp_path / "finetune", device=CPU)
    save_mmt(tmp_path / "finetune", new_model(), extra={})
    (tmp_path / "finetune.json").unlink()
    with pytest.raises(InputError, match=r"finetune\.json: MMT checkpoint not found"):
        load_mmt(tmp_path / "finetune", device=CPU)
    save_mmt(tmp_path / "finetune", new_model(), extra={})
    (tmp_path / "finetune.safetensors").unlink()
    with pytest.raises(InputError, match=r"finetune\.safetensors: MMT checkpoint not found"):
        load_mmt(tmp_path / "finetune", device=CPU)


def test_names_of_a_checkpoint(tmp_path: Path) -> None:
    assert checkpoint_stem(tmp_path / "finetune.safetensors") == checkpoint_stem(tmp_path / "finetune.pt")
    assert checkpoint_stem("a/m.best") == Path("a/m.best")  # only the checkpoint suffixes are stems' suffixes
    files = checkpoint_files(tmp_path / "finetune")
    assert (files.weights.name, files.fields.name, files.legacy) == ("finetune.safetensors", "finetune.json", False)
    # the learning curve keeps its name whatever name the checkpoint is given by
    for name in ("finetune", "finetune.safetensors", "finetune.pt"):
        assert history_file(tmp_path / name) == tmp_path / "finetune.history.tsv"
    assert BACKENDS["text-only"].weights_file(tmp_path) == tmp_path / "finetune.safetensors"


def test_fields_that_json_cannot_hold_are_refused_before_anything_is_written(tmp_path: Path) -> None:
    with pytest.raises(TypeError):
        save_mmt(tmp_path / "finetune", new_model(), extra={"tensor": torch.zeros(1)})
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError, match="may not be named"):
        write_checkpoint(tmp_path / "x", {}, {"state_dict": 1})


def test_shared_and_non_contiguous_tensors_are_saved(tmp_path: Path) -> None:
    base = torch.arange(12.0).reshape(3, 4)
    write_checkpoint(tmp_path / "x", {"a": base, "b": base, "t": base.T}, {"n": 1})
    checkpoint, _ = read_checkpoint_files(tmp_path / "x", device=CPU, kind="checkpoint")
    assert checkpoint["n"] == 1
    tensors = checkpoint["state_dict"]
    assert torch.equal(tensors["a"], base) and torch.equal(tensors["b"], base) and torch.equal(tensors["t"], base.T)
