"""bench/peer_joeynmt.py: the project's side runs on tiny generated text and reports what it measured; JoeyNMT's
configuration asks for the sizes given; the peer sees exactly the project's segmentation and vocabulary. The JoeyNMT
run itself needs a peer environment (``PEER_JOEYNMT_PYTHON``) and is skipped without one."""

from __future__ import annotations

import gzip
import importlib
import json
import os
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
BENCH = REPO / "bench"
WORDS = {
    "en": ["a", "dog", "man", "woman", "runs", "sits", "on", "the", "grass", "street", "red", "blue"],
    "de": ["ein", "hund", "mann", "frau", "rennt", "sitzt", "auf", "dem", "gras", "straße", "roter", "blauer"],
}


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    sys.path.insert(0, str(BENCH))  # the benches import each other as top-level modules, as when run as scripts
    try:
        return importlib.import_module("peer_joeynmt")
    finally:
        sys.path.remove(str(BENCH))


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Multi30K-shaped folder of generated word-for-word pairs: 60 training, 12 validation."""
    root = tmp_path_factory.mktemp("multi30k")
    raw = root / "task1" / "raw"
    raw.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name, count in (("train", 60), ("val", 12)):
        rows = [rng.integers(0, len(WORDS["en"]), size=int(rng.integers(3, 7))) for _ in range(count)]
        for lang, words in WORDS.items():
            text = "".join(" ".join(words[i] for i in row) + " .\n" for row in rows)
            (raw / f"{name}.{lang}.gz").write_bytes(gzip.compress(text.encode("utf-8")))
    return root


def sizes(bench: ModuleType, **changes: object) -> object:
    fields = dict(vocab=60, emb=8, hidden=12, dropout=0.1, batch=4, lr=1e-3, clip=5.0, threads=1, minutes=0.05)
    fields |= dict(validate_every=5, train_pairs=60, val_pairs=12)
    return bench.Sizes(**(fields | changes))


def test_project_side_of_a_small_run(bench: ModuleType, data: Path, tmp_path: Path) -> None:
    out = tmp_path / "peer.json"
    arguments = ["--data", str(data), "--small", "--minutes", "0.05", "--validate-every", "5", "--vocab", "60"]
    bench.main([*arguments, "--emb", "8", "--hidden", "12", "--batch", "4", "--threads", "1", "--out", str(out)])
    record = json.loads(out.read_text(encoding="utf-8"))
    assert [system["name"] for system in record["systems"]] == ["project (RegionalMMT text-only)"]
    project = record["systems"][0]
    assert project["steps"] >= 5 and project["target_tokens"] > 0
    assert project["tokens_per_s"] == pytest.approx(project["target_tokens"] / project["train_seconds"])
    assert project["train_seconds"] < 0.05 * 60 + 1  # training time alone, inside the wall-time budget
    validations = project["validations"]
    assert validations, "3 s of tiny steps hold several validations"
    assert all(item["step"] % 5 == 0 for item in validations)
    assert all(0.0 <= item["bleu"] <= 100.0 and item["minutes"] <= 0.05 for item in validations)
    assert project["bleu_at_budget"] == validations[-1]["bleu"]
    assert len(record["load_average"]["start"]) == 3 and len(record["load_average"]["end"]) == 3
    assert record["sizes"]["train_pairs"] == 60 and record["sizes"]["val_pairs"] == 12
    table = bench.markdown(record)
    assert f"| project (RegionalMMT text-only) | {project['steps']:,} |" in table


def test_joeynmt_config_asks_for_the_sizes_given(bench: ModuleType, tmp_path: Path) -> None:
    given = sizes(bench, emb=256, hidden=512, dropout=0.3, batch=64, lr=4e-4, validate_every=250)
    path = tmp_path / "peer.yaml"
    bench.write_joeynmt_config(
        path, given, data_dir=tmp_path / "data", model_dir=tmp_path / "model", src="en", tgt="de"
    )
    parsed = yaml.safe_load(path.read_text(encoding="utf-8"))  # what the driver hands JoeyNMT
    model, training, testing = parsed["model"], parsed["training"], parsed["testing"]
    for part in ("encoder", "decoder"):
        assert model[part]["type"] == "recurrent" and model[part]["rnn_type"] == "lstm"
        assert model[part]["hidden_size"] == 512 and model[part]["num_layers"] == 1
        assert model[part]["embeddings"]["embedding_dim"] == 256
        assert model[part]["dropout"] == model[part]["embeddings"]["dropout"] == 0.3
    assert model["encoder"]["bidirectional"] is True
    assert (model["decoder"]["attention"], model["decoder"]["input_feeding"]) == ("luong", True)
    assert (model["decoder"]["init_hidden"], model["decoder"]["hidden_dropout"]) == ("bridge", 0.3)
    assert (training["batch_size"], training["batch_type"], training["normalization"]) == (64, "sentence", "tokens")
    assert (training["optimizer"], training["learning_rate"], training["clip_grad_norm"]) == ("adam", 4e-4, 5.0)
    assert (training["scheduling"], training["decrease_factor"]) == ("exponential", 1.0)  # a constant rate
    assert training["validation_freq"] == 250
    assert (testing["beam_size"], testing["max_output_length"]) == (1, 100)  # greedy, as the project validates
    assert parsed["data"]["src"]["voc_file"] == str(tmp_path / "data" / "vocab.en")
    assert parsed["data"]["trg"]["level"] == "word"  # the project's pieces, split at spaces only
    assert parsed["use_cuda"] is False


def test_the_peer_reads_the_projects_segmentation(bench: ModuleType, data: Path, tmp_path: Path) -> None:
    split = bench.load_text(data, "en", "de", small=True)
    segmented = bench.segment(split, "en", "de", 60, tmp_path / "text")
    bench.write_peer_data(segmented, tmp_path / "peer", "en", "de")
    vocab = (tmp_path / "peer" / "vocab.de").read_text(encoding="utf-8").splitlines()
    assert len(vocab) + 4 == segmented.text.tgt_vocab.size  # JoeyNMT adds its 4 specials: the same size
    assert vocab == segmented.tgt_pieces[4:]
    lines = (tmp_path / "peer" / "train.de").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 60
    pieces = [line.split() for line in lines]
    ids = {piece: i for i, piece in enumerate(segmented.tgt_pieces)}
    assert [[ids[piece] for piece in row] + [3] for row in pieces] == segmented.train_tgt  # EOS is the peer's own
    # A perfect peer output decodes, through the project's decoder, to the project's own text of the references.
    assert bench.decode_peer(lines, segmented) == segmented.text.decode_target(segmented.train_tgt)


@pytest.mark.slow
def test_joeynmt_side_of_a_small_run(bench: ModuleType, data: Path, tmp_path: Path) -> None:
    peer = os.environ.get("PEER_JOEYNMT_PYTHON")
    if not peer or not Path(peer).is_file():
        pytest.skip("PEER_JOEYNMT_PYTHON names no Python with joeynmt (bench/peer_joeynmt.py: setup)")
    out = tmp_path / "peer.json"
    arguments = ["--data", str(data), "--small", "--minutes", "0.3", "--validate-every", "5", "--vocab", "60"]
    arguments += ["--emb", "8", "--hidden", "12", "--batch", "4", "--threads", "1", "--out", str(out)]
    bench.main([*arguments, "--peer-python", peer, "--together"])
    joey = json.loads(out.read_text(encoding="utf-8"))["systems"][1]
    assert joey["steps"] >= 10 and joey["target_tokens"] > 0
    assert joey["validations"] and all(item["step"] % 5 == 0 for item in joey["validations"])


def test_padded_fraction_and_logging_interval(bench: ModuleType) -> None:
    examples = [bench.Example((5,), (4,) * length + (3,)) for length in (1, 3, 3, 7)]  # targets of 2, 4, 4, 8
    assert bench.padded_fraction(examples, [[0, 1], [2, 3]]) == pytest.approx(1 - 18 / (2 * 4 + 2 * 8))
    assert bench.padded_fraction(examples, [[1, 2]]) == 0.0
    # JoeyNMT logs (its training-time figures) at most every 10 steps, below and dividing the validation interval.
    assert [bench.logging_every(every) for every in (2, 5, 12, 100, 250, 7)] == [1, 1, 6, 10, 10, 1]
