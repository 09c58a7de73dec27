"""Vocabulary, caption sets, balanced batches, the training loop, checkpoints and search on tiny inputs."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
import torch

from common.checks import SettingError
from common.errors import InputError
from common.tensor_tree import load_tree, save_tree
from retrieval.checkpoint import load_retrieval, save_retrieval
from retrieval.data import BalancedSampler, Caption, encode_captions, images_of, text_batch
from retrieval.inference import evaluate
from retrieval.losses import RankingLoss
from retrieval.search import gallery_embeddings, search
from retrieval.train import TrainConfig, fit, learning_rate
from retrieval.vocab import UNK, Vocabulary, tokenize
from retrieval.zoo.registry import UnknownModelError, build_model, make_config

COLOURS = ["red", "blue", "green", "yellow"]
FARBEN = ["rot", "blau", "grün", "gelb"]


class ArrayRegions:
    """Region lookup over an in-memory array (what FeatureStore.batch returns)."""

    def __init__(self, features: np.ndarray, valid: np.ndarray) -> None:
        self.features, self.valid = features, valid

    def batch(self, rows):  # type: ignore[no-untyped-def]
        rows = np.asarray(rows)
        return self.features[rows].astype(np.float16), self.valid[rows], np.zeros((len(rows), 4, 4), np.float32)


def toy_data(images: int = 16, seed: int = 0) -> tuple[list[Caption], ArrayRegions]:
    """Image i shows colour i % 4 in region slot 0 (one-hot in the features) and a size word; captions say so."""
    rng = np.random.default_rng(seed)
    features = rng.normal(scale=0.1, size=(images, 3, 8)).astype(np.float32)
    valid = np.ones((images, 3), dtype=bool)
    valid[::3, 2] = False  # some images have fewer regions
    captions = []
    for i in range(images):
        colour, size = i % 4, (i // 4) % 2
        features[i, 0, colour] += 1.0
        features[i, 1, 4 + size] += 1.0
        for n in range(2):
            captions.append(
                Caption(f"i{i}#en#{n}", f"i{i}", "en", f"a {['small', 'big'][size]} {COLOURS[colour]} thing", "human")
            )
        captions.append(
            Caption(f"i{i}#de#mmt", f"i{i}", "de", f"ein {['kleines', 'großes'][size]} {FARBEN[colour]}es ding", "mmt")
        )
    return captions, ArrayRegions(features, valid)


def test_tokenize_and_vocabulary_round_trip() -> None:
    assert tokenize("Ein großer, roter Kreis.") == ["ein", "großer", ",", "roter", "kreis", "."]
    vocab = Vocabulary.build(
        [("en", "a red ball"), ("en", "a blue ball"), ("de", "ein ball")], ["en", "de"], min_count=2
    )
    assert vocab.entries[2:] == ("en:a", "en:ball")
    assert vocab.encode("a green ball", "en", max_len=10) == [2, UNK, 3]
    assert vocab.encode("a green ball", "en", max_len=2) == [2, UNK]
    assert Vocabulary.from_dict(vocab.to_dict()) == vocab
    assert vocab.words_of("en") == {"a": 2, "ball": 3}


def test_encode_captions_errors_name_ids() -> None:
    captions, _ = toy_data(4)
    vocab = Vocabulary.build(((c.lang, c.text) for c in captions), ["en", "de"], min_count=1)
    rows = {f"i{i}": i for i in range(3)}  # i3 has no features
    with pytest.raises(InputError, match=r"train: 1 image\(s\) have captions but no region features, e\.g\. \['i3'\]"):
        encode_captions(captions, vocab, rows, max_len=20, source="train")
    empty = [Caption("c1", "i0", "en", " ... ", "human"), Caption("c2", "i0", "en", "   ", "human")]
    with pytest.raises(InputError, match="caption c2"):
        encode_captions(empty, vocab, {"i0": 0}, max_len=20, source="val")
    with pytest.raises(InputError, match=r"caption c3 is in 'fr'; the model's languages are \['en', 'de'\]"):
        encode_captions([Caption("c3", "i0", "fr", "un", "human")], vocab, {"i0": 0}, max_len=20, source="t")
    with pytest.raises(InputError, match="no captions"):
        encode_captions([], vocab, {}, max_len=20, source="test")


def test_text_batch_pads_and_images_of_dedupes_in_order() -> None:
    captions, _ = toy_data(4)
    vocab = Vocabulary.build(((c.lang, c.text) for c in captions), ["en", "de"], min_count=1)
    encoded = encode_captions(captions, vocab, {f"i{i}": i for i in range(4)}, max_len=3, source="s")
    batch = text_batch(encoded, [0, 2])
    assert batch.tokens.shape == (2, 3) and batch.lengths.tolist() == [3, 3] and batch.langs.tolist() == [0, 1]
    rows, caption_image = images_of(np.array([5, 2, 5, 7, 2]))
    assert rows.tolist() == [5, 2, 7] and caption_image.tolist() == [0, 1, 0, 2, 1]
    assert encoded.type_names == ("de-mmt", "en-human")


def test_balanced_sampler_mixes_equal_portions_and_is_deterministic() -> None:
    synthetic = np.array([False] * 40 + [True] * 15)
    sampler = BalancedSampler(synthetic, batch_size=10, synthetic_fraction=0.5, seed=3)
    batches = sampler.batches(0)
    assert len(batches) == 8  # 40 originals, 5 per batch
    assert all(synthetic[b].sum() == 5 and (~synthetic[b]).sum() == 5 for b in batches)
    originals = np.concatenate([b[~synthetic[b]] for b in batches])
    assert sorted(originals.tolist()) == list(range(40))  # each original once per epoch
    assert all(len(set(b.tolist())) == len(b) for b in batches)
    assert [b.tolist() for b in sampler.batches(0)] == [b.tolist() for b in batches]
    assert [b.tolist() for b in sampler.batches(1)] != [b.tolist() for b in batches]
    plain = BalancedSampler(np.zeros(25, dtype=bool), batch_size=10).batches(0)
    assert [len(b) for b in plain] == [10, 10, 5]


def test_learning_rate_schedule() -> None:
    config = TrainConfig(lr=5e-4, lr_decay_epoch=15, lr_decay=0.1)
    assert learning_rate(config, 14) == 5e-4 and learning_rate(config, 15) == pytest.approx(5e-5)


def train_toy(name: str, *, epochs: int = 6, **train: object) -> tuple[object, object, object, object]:
    captions, regions = toy_data()
    vocab = Vocabulary.build(((c.lang, c.text) for c in captions), ["en", "de"], min_count=1)
    rows = {f"i{i}": i for i in range(16)}
    encoded = encode_captions(captions, vocab, rows, max_len=20, source="train")
    validation = {"en": encoded.subset(np.flatnonzero(encoded.langs == 0))}
    torch.manual_seed(0)
    sizes = {"word_dim": 16, "hidden": 16}
    if name == "mule":
        sizes |= {"mule_dim": 16, "embed_dim": 16, "image_hidden": 16, "pretrain_epochs": 1}
    config = make_config(name, sizes)
    model = build_model(name, config, vocab_size=len(vocab), languages=2, region_dim=8)
    weights = torch.full((len(encoded.type_names),), 0.5)
    result = fit(
        model,
        encoded,
        validation,
        regions,
        loss=RankingLoss(model.default_loss),
        type_weights=weights,
        config=TrainConfig(epochs=epochs, batch_size=12, lr=0.01, lr_decay_epoch=4, **train),  # type: ignore[arg-type]
        seed=0,
        device=torch.device("cpu"),
    )
    return model, result, (encoded, validation, regions), (config, vocab)


def test_fit_learns_the_toy_task_and_keeps_the_best_epoch(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="retrieval.train"):
        model, result, (_, validation, regions), _ = train_toy("san", warmup_epochs=1)
    rsums = [entry["val_rsum"] for entry in result.history]  # type: ignore[attr-defined]
    logged = [record.getMessage() for record in caplog.records if record.name == "retrieval.train"]
    # one line per epoch, counted from 1, as the history and best_epoch count them
    assert [line.split(" · ")[:2] for line in logged] == [["retrieval", f"epoch {n}/6"] for n in range(1, 7)]
    assert [entry["epoch"] for entry in result.history] == [1, 2, 3, 4, 5, 6]  # type: ignore[attr-defined]
    assert result.best_rsum == max(rsums) and result.best_epoch == rsums.index(max(rsums)) + 1  # type: ignore[attr-defined]
    best = logged[result.best_epoch - 1]  # type: ignore[attr-defined]
    assert f"val rsum en {rsums[result.best_epoch - 1]:.1f} (best {result.best_rsum:.1f})" in best  # type: ignore[attr-defined]
    metrics = evaluate(model, validation["en"], regions, device=torch.device("cpu"))  # type: ignore[arg-type]
    assert metrics["rsum"] == pytest.approx(result.best_rsum)  # type: ignore[attr-defined]
    # 8 distinct (colour, size) classes over 16 images: chance t2i R@1 is 1/16; the model must do far better
    assert metrics["t2i"]["r5"] >= 80.0


def test_max_steps_ends_training_in_the_epoch_it_reaches_and_validates_that_epoch() -> None:
    _, result, (encoded, _, _), _ = train_toy("san", epochs=6, max_steps=8)
    per_epoch = len(BalancedSampler(encoded.synthetic, 12, 0.5, 0).batches(0))  # type: ignore[attr-defined]
    assert per_epoch == 6  # 48 captions in balanced batches of 12: the cap of 8 falls in epoch 2
    assert [entry["epoch"] for entry in result.history] == [1, 2]  # type: ignore[attr-defined]
    assert result.history[-1]["val_rsum"] is not None  # type: ignore[attr-defined]


def test_fit_is_deterministic() -> None:
    first = train_toy("vsepp", epochs=2)[1]
    second = train_toy("vsepp", epochs=2)[1]

    def timeless(result: object) -> list[dict[str, object]]:
        return [{k: v for k, v in entry.items() if k != "steps_per_s"} for entry in result.history]  # type: ignore[attr-defined]

    assert timeless(first) == timeless(second)


def test_c2c_steps_and_mule_pretraining_run() -> None:
    _, result, _, _ = train_toy("san", epochs=2, c2c_probability=0.5)
    assert any(entry["c2c_loss"] is not None for entry in result.history)  # type: ignore[attr-defined]
    _, mule_result, _, _ = train_toy("mule", epochs=1)
    assert len(mule_result.history) == 1  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="no caption-caption score"):
        train_toy("scan", epochs=1, c2c_probability=1.0)


def test_checkpoint_round_trip_and_errors(tmp_path: Path) -> None:
    model, _, (encoded, validation, regions), (config, vocab) = train_toy("san", epochs=1)
    assert len(encoded.type_names) == 2  # type: ignore[attr-defined]
    path = tmp_path / "model"
    save_retrieval(
        path,
        model,
        config=config,
        vocab=vocab,
        type_names=encoded.type_names,
        type_weights=[0.5, 0.5],  # type: ignore[arg-type, attr-defined]
        region_dim=8,
        max_len=20,
        extra={"store": "x"},
    )
    loaded = load_retrieval(path, device=torch.device("cpu"), expect_model="san")
    before = evaluate(model, validation["en"], regions, device=torch.device("cpu"))  # type: ignore[arg-type]
    after = evaluate(loaded.model, validation["en"], regions, device=torch.device("cpu"))  # type: ignore[arg-type]
    assert before == after
    with pytest.raises(InputError, match=r"model\.json: holds a 'san' model, not 'scan'"):
        load_retrieval(path, device=torch.device("cpu"), expect_model="scan")
    checkpoint = json.loads((tmp_path / "model.json").read_text())
    checkpoint["config"]["hidden"] = 32  # the earlier format too: one torch.save dict, the weights inside
    torch.save({**checkpoint, "state_dict": model.state_dict()}, tmp_path / "other.pt")  # type: ignore[attr-defined]
    with pytest.raises(InputError, match=r"other\.pt: weights do not fit a 'san' model of the stored config; missing"):
        load_retrieval(tmp_path / "other.pt", device=torch.device("cpu"))
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(InputError, match="not a readable retrieval checkpoint"):
        load_retrieval(tmp_path / "junk.pt", device=torch.device("cpu"))


def test_search_finds_the_described_image_and_uses_the_cache(tmp_path: Path) -> None:
    model, _, (encoded, _, regions), (config, vocab) = train_toy("san", warmup_epochs=1)
    path = tmp_path / "model"
    save_retrieval(
        path,
        model,
        config=config,
        vocab=vocab,
        type_names=encoded.type_names,
        type_weights=[0.5, 0.5],  # type: ignore[arg-type, attr-defined]
        region_dim=8,
        max_len=20,
        extra={},
    )
    loaded = load_retrieval(path, device=torch.device("cpu"))
    ids = [f"i{i}" for i in range(16)]
    cache = tmp_path / "gallery.safetensors"
    gallery = gallery_embeddings(
        loaded, regions, ids, np.arange(16), cache=cache, identity="v1", device=torch.device("cpu")
    )  # type: ignore[arg-type]
    assert cache.is_file()
    hits = search(loaded, gallery, ids, "a big green thing", "en", k=2, device=torch.device("cpu"))
    # green = colour 2, big = size 1: images 6 and 14
    assert {hit.image_id for hit in hits} == {"i6", "i14"}
    cached = load_tree(cache)
    assert cached["identity"] == "v1" and cached["image_ids"] == ids and cached["vectors"].shape[0] == 16
    cached["vectors"] = torch.zeros_like(cached["vectors"])
    save_tree(cache, cached)
    reused = gallery_embeddings(
        loaded, regions, ids, np.arange(16), cache=cache, identity="v1", device=torch.device("cpu")
    )  # type: ignore[arg-type]
    assert float(reused.vectors.abs().sum()) == 0.0  # same identity: the cache is read, not recomputed
    rebuilt = gallery_embeddings(
        loaded, regions, ids, np.arange(16), cache=cache, identity="v2", device=torch.device("cpu")
    )  # type: ignore[arg-type]
    assert float(rebuilt.vectors.abs().sum()) > 0.0
    with pytest.raises(InputError, match="cannot search 'fr'"):
        search(loaded, gallery, ids, "un", "fr", k=2, device=torch.device("cpu"))


def test_unknown_model_lists_known_ones() -> None:
    with pytest.raises(UnknownModelError, match="unknown retrieval model 'clip'; known: dan, mule, multihead"):
        make_config("clip", {})
    with pytest.raises(SettingError, match=r"^hiden: unknown key; did you mean 'hidden'\? allowed keys here: word"):
        make_config("san", {"hiden": 3})
    with pytest.raises(SettingError, match=r"^configs\.san\.rnn: got 'cnn', allowed: lstm, gru"):
        make_config("san", {"rnn": "cnn"}, path="configs.san")
    with pytest.raises(SettingError, match=r"^hidden: expected an integer, got '512'"):
        make_config("san", {"hidden": "512"})


def test_a_non_finite_loss_or_gradient_stops_training_naming_epoch_and_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """A loss that turns NaN at the fourth step stops fit before that step's update; an infinite gradient too."""
    import retrieval.train as train_module

    real = train_module.RankingLoss.__call__
    calls = {"n": 0}

    def poisoned(self: object, *args: object, **kwargs: object) -> torch.Tensor:
        calls["n"] += 1
        value = real(self, *args, **kwargs)  # type: ignore[arg-type]
        return value * float("nan") if calls["n"] == 4 else value

    monkeypatch.setattr(train_module.RankingLoss, "__call__", poisoned)
    with pytest.raises(FloatingPointError, match=r"^retrieval training diverged at epoch 1, step 3: the loss is nan"):
        train_toy("san", epochs=3)
    monkeypatch.setattr(train_module.RankingLoss, "__call__", real)
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", lambda params, clip: torch.tensor(float("inf")))
    with pytest.raises(FloatingPointError, match=r"^retrieval training diverged at epoch 1, step 0: the gradient norm"):
        train_toy("san", epochs=1)
