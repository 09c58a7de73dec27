"""Hostile model folders and weights files: a folder must agree with its weights, weights must be finite, and a
pickle-capable file is read with the restricted loader only. Every case is one :class:`InputError` line naming the
folder or file and the first parameters, or (for ``mmtr search``) one ``mmtr: error:`` line with exit status 2.

Each model here is a tiny one the test builds; nothing is trained beyond a few glimpses of the compact encoder.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file

import common.weights
from common.checkpoints import read_checkpoint, write_checkpoint
from common.errors import InputError
from common.runtime import Runtime
from features.compact import load_encoder
from mmt.checkpoint import load_mmt, save_mmt
from mmt.model import RegionalMMT
from mmt.seq2seq import Seq2SeqTranslator
from mmt.systems import SYSTEM_FILE, check_regional_backend, load_system
from mmt.text import SubwordConfig, TextPipeline
from mmtr import cli
from tests.unit.mmt.test_seq2seq import _marian_folder
from tests.unit.mmt.test_train import CONFIG, CPU, SHAPE, new_model
from tests.unit.pickle_payload import Payload
from tests.unit.retrieval.test_safetensors_checkpoints import save, toy

# what torch.load(weights_only=True) names for Payload (pickled as getattr(Path, "touch"))
REFUSED = "Unsupported global: GLOBAL getattr was not an allowed global by default"
LAYER_1 = r"model\.encoder\.layers\.1\.fc1\.bias, model\.encoder\.layers\.1\.fc1\.weight"


def one_line_error(err: str, program: str, culprit: str) -> None:
    """As test_hostile_inputs checks the entry points (not imported: it resolves every stage through DVC)."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line, got:\n{err}"
    assert lines[0].startswith(f"{program}: error: "), lines[0]
    assert re.search(culprit, lines[0]), f"{culprit!r} not named in: {lines[0]}"


def one_line(error: pytest.ExceptionInfo[InputError]) -> str:
    message = str(error.value)
    assert "\n" not in message, message
    return message


@pytest.fixture(autouse=True)
def fresh_finite_checks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each case scans its weights afresh: no success remembered by an earlier test of the same bytes."""
    monkeypatch.setenv("MMTR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(common.weights, "_VERIFIED", set())


@pytest.fixture(scope="module")
def marian(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _marian_folder(tmp_path_factory.mktemp("held") / "opus-mt-en-de")


def marian_copy(marian: Path, tmp_path: Path) -> Path:
    folder = tmp_path / "opus-mt-en-de"
    shutil.copytree(marian, folder)
    return folder


def edit_json(path: Path, **changes: Any) -> None:
    fields = json.loads(path.read_text(encoding="utf-8"))
    for dotted, value in changes.items():
        *parents, leaf = dotted.split("__")
        node = fields
        for key in parents:
            node = node[key]
        node[leaf] = value
    path.write_text(json.dumps(fields), encoding="utf-8")


def load_marian(folder: Path) -> Seq2SeqTranslator:
    return Seq2SeqTranslator.from_folder(folder, src="en", tgt="de", device=CPU)


# --- Hugging Face (Marian) folders ---------------------------------------------------------------------------------


def test_a_marian_config_with_more_layers_than_its_weights_is_refused(marian: Path, tmp_path: Path) -> None:
    folder = marian_copy(marian, tmp_path)
    edit_json(folder / "config.json", encoder_layers=2)
    with pytest.raises(InputError) as error:
        load_marian(folder)
    assert re.fullmatch(
        rf"{re.escape(str(folder))}: the weights in model\.safetensors do not fit the model config\.json describes: "
        rf"missing 16 \({LAYER_1}, .* and 11 more\)",
        one_line(error),
    )


def test_a_marian_config_of_another_width_is_refused_not_reinitialised(marian: Path, tmp_path: Path) -> None:
    folder = marian_copy(marian, tmp_path)
    edit_json(folder / "config.json", d_model=32)
    with pytest.raises(InputError) as error:
        load_marian(folder)
    message = one_line(error)
    assert message.startswith(f"{folder}: the weights in model.safetensors do not fit the model config.json describes")
    assert re.search(
        r"mis-shaped \d+ \(model\.decoder\.layers\.0\.encoder_attn\.k_proj\.bias: weights \(16,\), model \(32,\); ",
        message,
    )
    assert message.endswith(" more)")


def test_an_unexpected_tensor_in_the_weights_is_refused(marian: Path, tmp_path: Path) -> None:
    folder = marian_copy(marian, tmp_path)
    tensors = load_file(folder / "model.safetensors")
    save_file({**tensors, "model.encoder.layers.7.fc1.weight": torch.zeros(2, 2)}, folder / "model.safetensors")
    with pytest.raises(InputError) as error:
        load_marian(folder)
    assert one_line(error).endswith("describes: unexpected 1 (model.encoder.layers.7.fc1.weight)")


def test_a_pickled_pytorch_model_bin_with_an_object_is_refused_unrun(marian: Path, tmp_path: Path) -> None:
    folder = marian_copy(marian, tmp_path)
    tensors = load_file(folder / "model.safetensors")
    (folder / "model.safetensors").unlink()
    ran = tmp_path / "payload-ran"
    torch.save({**tensors, "extra": Payload(ran)}, folder / "pytorch_model.bin")
    with pytest.raises(InputError) as error:
        load_marian(folder)
    assert one_line(error) == (
        f"{folder / 'pytorch_model.bin'}: refused to unpickle this model weights file: {REFUSED}; a pickle can run "
        "code when it is read, so only tensors, numbers, strings, lists and dicts are read from one: convert it to "
        "safetensors where you trust it (docs/errors.md, 'Pickle-capable files')"
    )
    assert not ran.exists()


def test_nan_in_marian_weights_is_refused(marian: Path, tmp_path: Path) -> None:
    folder = marian_copy(marian, tmp_path)
    tensors = load_file(folder / "model.safetensors")
    tensors["model.encoder.layers.0.fc2.bias"][3] = float("nan")
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(InputError) as error:
        load_marian(folder)
    assert one_line(error) == (
        f"{folder / 'model.safetensors'}: model.encoder.layers.0.fc2.bias holds 1 NaN or infinite value (weights of a "
        "diverged run or a damaged file): retrain the model or restore its weights"
    )


# --- the regional MMT and the text-only system ---------------------------------------------------------------------


def test_an_mmt_config_that_disagrees_with_its_weights_is_one_line(tmp_path: Path) -> None:
    save_mmt(tmp_path / "finetune", new_model(), extra={})
    edit_json(tmp_path / "finetune.json", config__hidden=24)
    with pytest.raises(InputError) as error:
        load_mmt(tmp_path / "finetune", device=CPU)
    message = one_line(error)
    assert message.startswith(
        f"{tmp_path / 'finetune.safetensors'}: the weights do not fit the model finetune.json describes: mis-shaped "
    )
    assert "decoder.0.weight_hh: weights (128, 32), model (96, 24); " in message and message.endswith(" more)")


def test_an_mmt_vocabulary_size_that_disagrees_with_its_embeddings_is_refused(tmp_path: Path) -> None:
    save_mmt(tmp_path / "finetune", new_model(), extra={})
    edit_json(tmp_path / "finetune.json", shape__src_vocab=SHAPE.src_vocab + 4)
    with pytest.raises(InputError) as error:
        load_mmt(tmp_path / "finetune", device=CPU)
    assert one_line(error).endswith("mis-shaped 1 (src_embedding.weight: weights (30, 16), model (34, 16))")


def test_more_layers_in_the_mmt_config_than_in_its_weights_names_the_missing(tmp_path: Path) -> None:
    save_mmt(tmp_path / "finetune", new_model(), extra={})
    edit_json(tmp_path / "finetune.json", config__layers=2)
    with pytest.raises(InputError) as error:
        load_mmt(tmp_path / "finetune", device=CPU)
    assert re.search(
        r"describes: missing \d+ \(decoder\.1\.bias_hh, decoder\.1\.bias_ih, decoder\.1\.weight_hh, "
        r"decoder\.1\.weight_ih, encoder\.bias_hh_l1 and \d+ more\)",
        one_line(error),
    )


def test_an_unexpected_tensor_in_mmt_weights_is_refused(tmp_path: Path) -> None:
    model = new_model()
    save_mmt(tmp_path / "finetune", model, extra={}, state_dict={**model.state_dict(), "probe.weight": torch.ones(2)})
    with pytest.raises(InputError) as error:
        load_mmt(tmp_path / "finetune", device=CPU)
    assert one_line(error).endswith("finetune.json describes: unexpected 1 (probe.weight)")


@pytest.mark.parametrize(("value", "name"), [(float("nan"), "nan"), (float("inf"), "inf"), (-float("inf"), "-inf")])
def test_non_finite_mmt_weights_are_refused(tmp_path: Path, value: float, name: str) -> None:
    model = new_model()
    state = model.state_dict()
    state["output.bias"][[0, 4]] = value
    save_mmt(tmp_path / "finetune", model, extra={}, state_dict=state)
    with pytest.raises(InputError) as error:
        load_mmt(tmp_path / "finetune", device=CPU)
    assert one_line(error) == (
        f"{tmp_path / 'finetune.safetensors'}: output.bias holds 2 NaN or infinite values (weights of a diverged run "
        "or a damaged file): retrain the model or restore its weights"
    )


def text_only_folder(folder: Path, *, regions_trained: bool) -> Path:
    """A system folder of the text-only backend: its text pipeline and a tiny model whose region projection's bias
    is zero (never read regions) or not (fine-tuned with them)."""
    sentences = ["a red circle", "a blue square", "a green star", "the dog runs"] * 5
    text = TextPipeline.train(
        sentences, sentences, src_lang="en", tgt_lang="de", config=SubwordConfig(vocab_size=50), out_dir=folder, seed=0
    )
    shape = replace(SHAPE, src_vocab=text.src_vocab.size, tgt_vocab=text.tgt_vocab.size)
    model = RegionalMMT(CONFIG, shape)
    with torch.no_grad():
        model.region_proj.bias.fill_(0.5 if regions_trained else 0.0)
    save_mmt(folder / "finetune", model, extra={})
    (folder / SYSTEM_FILE).write_text(json.dumps({"backend": "text-only", "src": "en", "tgt": "de"}))
    return folder


def test_a_regional_folder_named_text_only_is_refused(tmp_path: Path) -> None:
    folder = text_only_folder(tmp_path / "mt-en-de", regions_trained=True)
    with pytest.raises(InputError) as error:
        load_system(str(folder), None, Runtime("cpu"))
    assert one_line(error) == (
        f"{folder / SYSTEM_FILE}: names the text-only backend, but finetune.safetensors holds a model fine-tuned to "
        "read image regions: retrain the system, or restore the folder's system.json"
    )
    text_only = text_only_folder(tmp_path / "mt-en-de-2", regions_trained=False)  # the same, as its backend says
    translated = load_system(str(text_only), None, Runtime("cpu")).translate(["a red circle"], beam=1, max_len=4)
    assert len(translated) == 1 and isinstance(translated[0], str)


def test_a_text_only_model_named_multimodal_is_refused(tmp_path: Path) -> None:
    folder = text_only_folder(tmp_path / "mmt-en-de", regions_trained=False)
    model, _ = load_mmt(folder / "finetune", device=CPU)
    with pytest.raises(InputError) as error:
        check_regional_backend(folder, model, multimodal=True, store=None)
    assert one_line(error).startswith(
        f"{folder / SYSTEM_FILE}: names the mmt backend, but finetune.safetensors holds a model fine-tuned to never "
        "read image regions"
    )


# --- retrieval weights through `mmtr search` -----------------------------------------------------------------------


def test_nan_retrieval_weights_stop_search_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A diverged run's weights, written as a consistent pair: the hash matches, so only the scan catches them."""
    model, config = toy("san")
    with torch.no_grad():
        next(iter(model.parameters())).fill_(float("nan"))
    save(tmp_path / "run" / "model", model, config)
    monkeypatch.chdir(Path(__file__).resolve().parents[3])  # search reads the repository's params.yaml
    with pytest.raises(SystemExit) as stopped:
        cli.main(["search", "a big red thing", "--model", str(tmp_path / "run"), "--lang", "en"])
    assert stopped.value.code == 2
    weights = re.escape(str(tmp_path / "run" / "model.safetensors"))
    one_line_error(capsys.readouterr().err, "mmtr", rf"{weights}: \S+ holds \d+ NaN or infinite values")


# --- pickle-capable files of the earlier format --------------------------------------------------------------------


def test_a_legacy_pt_holding_an_object_is_refused_unrun(tmp_path: Path) -> None:
    ran = tmp_path / "payload-ran"
    model = new_model()
    torch.save(
        {"config": {}, "shape": {}, "state_dict": model.state_dict(), "extra": {"note": Payload(ran)}},
        tmp_path / "finetune.pt",
    )
    with pytest.raises(InputError) as error:
        load_mmt(tmp_path / "finetune.pt", device=CPU)
    message = one_line(error)
    assert message.startswith(f"{tmp_path / 'finetune.pt'}: refused to unpickle this MMT checkpoint: ")
    assert REFUSED in message and message.endswith("(docs/errors.md, 'Pickle-capable files')")
    assert not ran.exists()


def test_a_legacy_pt_whose_state_dict_holds_a_non_tensor_is_refused(tmp_path: Path) -> None:
    torch.save({"config": {}, "shape": {}, "state_dict": {"output.bias": "zeros"}, "extra": {}}, tmp_path / "old.pt")
    with pytest.raises(InputError) as error:
        load_mmt(tmp_path / "old.pt", device=CPU)
    assert one_line(error) == f"{tmp_path / 'old.pt'}: state_dict entries that are not tensors: output.bias (str)"


def test_a_tampered_compact_encoder_cache_of_the_pickle_format_is_never_unpickled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran = tmp_path / "payload-ran"
    stem = tmp_path / "compact" / "encoder-0123456789abcdef"
    stem.parent.mkdir()
    torch.save({"config": Payload(ran)}, stem.with_suffix(".pt"))

    def no_unpickling(*args: object, **kwargs: object) -> None:
        raise AssertionError("torch.load called on a cache file")

    monkeypatch.setattr(torch, "load", no_unpickling)
    with pytest.raises(InputError) as error:
        load_encoder(stem.with_suffix(".safetensors"))
    assert one_line(error) == (
        f"{stem}.pt: a compact encoder of the earlier pickle format is never read; delete it (the features stage "
        "trains the encoder again into a .safetensors/.json pair)"
    )
    assert not ran.exists()


# --- the finite scan runs once per version of the weights ----------------------------------------------------------


def test_the_finite_scan_runs_once_per_weights_hash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scans: list[int] = []
    real = common.weights.non_finite

    def counted(tensors: Any) -> Any:
        scans.append(len(tensors))
        return real(tensors)

    monkeypatch.setattr(common.weights, "non_finite", counted)
    write_checkpoint(tmp_path / "model", {"w": torch.ones(3)}, {})
    read_checkpoint(tmp_path / "model", device=CPU, kind="test checkpoint")
    read_checkpoint(tmp_path / "model", device=CPU, kind="test checkpoint")
    assert scans == [1]
    monkeypatch.setattr(common.weights, "_VERIFIED", set())  # a new process: the user cache remembers it
    read_checkpoint(tmp_path / "model", device=CPU, kind="test checkpoint")
    assert scans == [1]
    write_checkpoint(tmp_path / "model", {"w": torch.full((3,), 2.0)}, {})  # new weights, new hash: scanned
    read_checkpoint(tmp_path / "model", device=CPU, kind="test checkpoint")
    assert scans == [1, 1]
    assert len(os.listdir(tmp_path / "cache" / "verified-weights")) == 2


def test_a_detector_pth_holding_an_object_is_refused_unrun(tmp_path: Path) -> None:
    from features.bottom_up.weights import CheckpointError
    from features.bottom_up.weights import read_checkpoint as read_detector

    ran = tmp_path / "payload-ran"
    torch.save({"model": {"backbone.stem.conv1.weight": torch.zeros(2)}, "note": Payload(ran)}, tmp_path / "det.pth")
    with pytest.raises(CheckpointError) as error:
        read_detector(tmp_path / "det.pth")
    message = one_line(error)
    assert message.startswith(f"{tmp_path / 'det.pth'}: refused to unpickle this detector checkpoint: {REFUSED}; ")
    assert not ran.exists()
