"""Training data held on the device: the same batches, losses and weights as batches built on the host."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from retrieval.data import CaptionSet, DeviceBatches, HostBatches, encode_captions
from retrieval.encoders import TextEncoder
from retrieval.losses import RankingLoss
from retrieval.train import FiniteWatch, TrainConfig, fit
from retrieval.vocab import Vocabulary
from retrieval.zoo.registry import build_model, make_config
from tests.unit.retrieval.test_data_train import ArrayRegions, toy_data

CPU = torch.device("cpu")


def toy_encoded() -> tuple[CaptionSet, ArrayRegions, int]:
    captions, regions = toy_data()
    vocab = Vocabulary.build(((c.lang, c.text) for c in captions), ["en", "de"], min_count=1)
    encoded = encode_captions(captions, vocab, {f"i{i}": i for i in range(16)}, max_len=20, source="train")
    return encoded, regions, len(vocab)


def test_device_batches_equal_host_batches() -> None:
    encoded, regions, _ = toy_encoded()
    host, device = HostBatches(encoded, regions, CPU), DeviceBatches(encoded, regions, CPU, read_rows=5)
    rng = np.random.default_rng(0)
    for _ in range(5):
        indices = rng.choice(len(encoded), size=12, replace=False)
        a, b = host.batch(indices), device.batch(indices)
        for name in ("tokens", "lengths", "langs", "host_lengths"):
            assert torch.equal(getattr(a.texts, name), getattr(b.texts, name)), name
        assert torch.equal(a.images.regions, b.images.regions) and a.images.regions.dtype == torch.float32
        assert torch.equal(a.images.mask, b.images.mask)
        for name in ("caption_image", "langs", "types"):
            assert torch.equal(getattr(a, name), getattr(b, name)), name


@pytest.mark.parametrize("name", ["san", "vsepp"])
def test_resident_training_gives_the_same_losses_and_weights_bit_for_bit(name: str) -> None:
    encoded, regions, words = toy_encoded()
    validation = {"en": encoded.subset(np.flatnonzero(encoded.langs == 0))}

    def train(resident: bool) -> tuple[list[tuple[object, object]], dict[str, torch.Tensor]]:
        torch.manual_seed(0)
        config = make_config(name, {"word_dim": 16, "hidden": 16})
        model = build_model(name, config, vocab_size=words, languages=2, region_dim=8)
        result = fit(
            model,
            encoded,
            validation,
            regions,
            loss=RankingLoss(model.default_loss),
            type_weights=torch.full((len(encoded.type_names),), 0.5),
            config=TrainConfig(epochs=2, batch_size=12, lr=0.01),
            seed=0,
            device=CPU,
            resident=resident,
        )
        return [(e["loss"], e["val_rsum"]) for e in result.history], model.state_dict()

    host_history, host_weights = train(False)
    device_history, device_weights = train(True)
    assert device_history == host_history
    assert all(torch.equal(host_weights[key], device_weights[key]) for key in host_weights)


def test_the_watch_names_the_first_bad_step_when_it_reads() -> None:
    watch = FiniteWatch(4)
    good, norms = torch.tensor(1.0), torch.tensor([0.5, 0.25])
    watch.note("step 0", good, norms)
    watch.note("step 1", torch.tensor(float("nan")), norms)
    watch.note("step 2", torch.tensor(float("inf")), norms)  # not read yet: no error
    with pytest.raises(FloatingPointError, match=r"^retrieval training diverged at step 1: the loss is nan"):
        watch.note("step 3", good, norms)
    watch.note("step 4", good, torch.tensor([0.5, float("inf")]))
    with pytest.raises(FloatingPointError, match=r"^retrieval training diverged at step 4: the gradient norm is inf$"):
        watch.check()
    watch.check()  # what was read is not read again


def test_packing_with_host_lengths_gives_the_states_of_packing_with_the_lengths_tensor() -> None:
    torch.manual_seed(0)
    encoder = TextEncoder(50, 8, 6, rnn="lstm")
    lengths = torch.tensor([3, 7, 7, 1, 5, 7, 2])  # ties: the sort must be the one pack_padded_sequence makes
    tokens = torch.randint(1, 50, (len(lengths), 7)) * (torch.arange(7)[None] < lengths[:, None])
    states, mask = encoder(tokens, lengths)
    host_states, host_mask = encoder(tokens, lengths, lengths.clone())
    assert torch.equal(states, host_states) and torch.equal(mask, host_mask)
