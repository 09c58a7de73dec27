"""Greedy decoding and beam search: the vectorised search returns exactly what the one-sentence reference returns."""

from __future__ import annotations

import copy
import functools

import pytest
import torch

from mmt.beam import beam_search, beam_search_reference, greedy_decode
from mmt.model import MMTConfig, MMTShape, RegionalMMT, SourceBatch, pad_ids, source_batch
from tests.unit.mmt.test_model import random_regions, random_sentences

CPU = torch.device("cpu")
CONFIG = MMTConfig(emb_dim=16, hidden=16, dropout=0.2)
SHAPE = MMTShape(src_vocab=40, tgt_vocab=30, region_dim=12)
MAX_LEN = 12


@functools.cache
def _partly_trained(seed: int) -> RegionalMMT:
    """A tiny model after a few dozen Adam steps on random pairs whose targets have 1-8 tokens.

    A random LSTM decoder emits EOS either at once or never; a little training gives hypotheses that finish
    at different steps and distributions that are neither flat nor one-hot, which the search tests need.
    """
    torch.manual_seed(seed)
    model = RegionalMMT(CONFIG, SHAPE)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    src = random_sentences(32, vocab=SHAPE.src_vocab, seed=seed, lengths=(1, 8))
    tgt = [[4 + (token * 7) % (SHAPE.tgt_vocab - 4) for token in ids] + [SHAPE.eos_id] for ids in src]
    features, mask = random_regions([4] * 32, max_regions=4, dim=SHAPE.region_dim, seed=seed)
    batch = source_batch(src, pad_id=0, device=CPU, regions=features, region_mask=mask)
    tgt_in = pad_ids([[SHAPE.bos_id, *ids[:-1]] for ids in tgt], pad_id=0, device=CPU)
    tgt_out = pad_ids(tgt, pad_id=0, device=CPU)
    for step in range(40):
        optimizer.zero_grad()
        text_only = SourceBatch(batch.src) if step % 2 else batch  # both modes learn to stop
        loss = torch.nn.functional.cross_entropy(
            model(text_only, tgt_in).flatten(0, 1), tgt_out.flatten(), ignore_index=0
        )
        loss.backward()
        optimizer.step()
    return model


def search_model(seed: int = 0) -> RegionalMMT:
    """A float64 copy of the partly trained model (see :func:`_partly_trained`).

    float64 keeps the batched and the per-hypothesis arithmetic from differing in the last bits, which could
    otherwise reorder two near-equal hypotheses.
    """
    return copy.deepcopy(_partly_trained(seed)).double()


def sources(seed: int) -> list[list[int]]:
    return random_sentences(5, vocab=SHAPE.src_vocab, seed=seed, lengths=(1, 9))


@pytest.mark.parametrize("beam", [1, 3, 5])
@pytest.mark.parametrize("with_regions", [False, True])
@pytest.mark.parametrize("length_penalty", [0.0, 1.0])
def test_batched_beam_search_equals_the_reference(beam: int, with_regions: bool, length_penalty: float) -> None:
    model = search_model()
    src = sources(seed=1)
    valid = [6, 1, 3, 6, 2]
    features, mask = random_regions(valid, max_regions=6, dim=SHAPE.region_dim, seed=2)
    features = features.double()
    if with_regions:
        batch = source_batch(src, pad_id=0, device=CPU, regions=features, region_mask=mask)
    else:
        batch = source_batch(src, pad_id=0, device=CPU)
    found = beam_search(model, batch, beam=beam, max_len=MAX_LEN, length_penalty=length_penalty)
    expected = [
        beam_search_reference(
            model,
            ids,
            regions=features[row, : valid[row]] if with_regions else None,
            region_mask=mask[row, : valid[row]] if with_regions else None,
            beam=beam,
            max_len=MAX_LEN,
            length_penalty=length_penalty,
        )
        for row, ids in enumerate(src)
    ]
    assert found == expected
    lengths = {len(ids) for ids in found}
    assert len(lengths) > 1 and min(lengths) < MAX_LEN  # finished hypotheses were exercised
    assert all(SHAPE.eos_id not in ids and SHAPE.bos_id not in ids and SHAPE.pad_id not in ids for ids in found)


def test_beam_width_changes_the_result_somewhere() -> None:
    """Guards the equality test above from passing on a search that ignores ``beam``."""
    model = search_model()
    batch = source_batch(sources(seed=3) + sources(seed=4), pad_id=0, device=CPU)
    assert beam_search(model, batch, beam=1, max_len=MAX_LEN) != beam_search(model, batch, beam=5, max_len=MAX_LEN)


@pytest.mark.parametrize("with_regions", [False, True])
def test_greedy_equals_beam_one(with_regions: bool) -> None:
    model = search_model(seed=5)
    src = sources(seed=6)
    features, mask = random_regions([2, 4, 4, 1, 3], max_regions=4, dim=SHAPE.region_dim, seed=7)
    features = features.double()
    if with_regions:
        batch = source_batch(src, pad_id=0, device=CPU, regions=features, region_mask=mask)
    else:
        batch = source_batch(src, pad_id=0, device=CPU)
    greedy = greedy_decode(model, batch, max_len=MAX_LEN)
    assert greedy == beam_search(model, batch, beam=1, max_len=MAX_LEN)
    one_by_one = [
        beam_search_reference(
            model,
            ids,
            regions=features[row] if with_regions else None,
            region_mask=mask[row] if with_regions else None,
            beam=1,
            max_len=MAX_LEN,
        )
        for row, ids in enumerate(src)
    ]
    assert greedy == one_by_one


def test_max_len_bounds_the_output_and_the_mode_is_restored() -> None:
    model = search_model()
    with torch.no_grad():
        model.output.bias[SHAPE.eos_id] -= 1000.0  # EOS never wins: every hypothesis runs to max_len
    model.train()
    batch = source_batch(sources(seed=8), pad_id=0, device=CPU)
    assert all(len(ids) == 4 for ids in beam_search(model, batch, beam=3, max_len=4))
    assert all(len(ids) == 4 for ids in greedy_decode(model, batch, max_len=4))
    assert model.training


def test_float32_model_and_invalid_arguments() -> None:
    torch.manual_seed(0)
    model = RegionalMMT(CONFIG, SHAPE)
    batch = source_batch(sources(seed=9), pad_id=0, device=CPU)
    assert len(beam_search(model, batch, beam=2, max_len=3)) == 5
    with pytest.raises(ValueError, match=r"beam must be in 1\.\.28"):
        beam_search(model, batch, beam=29)
    with pytest.raises(ValueError, match="max_len"):
        greedy_decode(model, batch, max_len=0)
