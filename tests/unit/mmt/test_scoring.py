"""Scoring given translations with the regional MMT: the sum of log-softmax at the target's ids, checked against the
loop-by-loop reference of the equations; a text-only system's scores do not depend on the image. A translation
asked to stop gives up before its next batch."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from common.errors import InputError
from common.stopping import Cancelled
from features.store import FeatureStore
from mmt.model import MMTConfig, MMTShape, RegionalMMT
from mmt.text import BOS_ID, TextPipeline
from mmt.translator import MMTTranslator
from tests.unit.mmt.test_model import reference_logits
from tests.unit.mmt.test_systems import write_store
from tests.unit.mmt.test_text import _pipeline

CPU = torch.device("cpu")
SOURCES = ["a man rides a horse on the beach .", "two dogs play in the snow .", "a child ."]
TARGETS = ["ein mann reitet ein pferd am strand .", "zwei hunde spielen im schnee .", "ein kind ."]
IMAGES = ["i0", "i1", "i2"]


@dataclass(frozen=True)
class Parts:
    text: TextPipeline
    store: FeatureStore
    model: RegionalMMT


@pytest.fixture(scope="module")
def parts(tmp_path_factory: pytest.TempPathFactory) -> Parts:
    """A tiny untrained model (scores need no training to be checkable), its text pipeline and a region store."""
    root = tmp_path_factory.mktemp("scoring")
    text = _pipeline(root / "text")
    store = FeatureStore.open(write_store(root / "store", IMAGES, seed=3))
    torch.manual_seed(0)
    shape = MMTShape(src_vocab=text.src_vocab.size, tgt_vocab=text.tgt_vocab.size, region_dim=store.dim)
    return Parts(text, store, RegionalMMT(MMTConfig(emb_dim=16, hidden=16, dropout=0.0), shape))


def translator(parts: Parts, *, multimodal: bool) -> MMTTranslator:
    return MMTTranslator(parts.model, parts.text, name="tiny", regions=parts.store if multimodal else None, device=CPU)


def by_hand(parts: Parts, source: str, target: str, image_id: str | None) -> float:
    """log p(target | source, image): log-softmax of the reference logits at each target id, EOS included, summed."""
    src = parts.text.encode_source([source]).ids[0]
    tgt = parts.text.encode_target([target]).ids[0]
    regions = None
    if image_id is not None:
        features, _, _ = parts.store.batch(parts.store.rows([image_id]))
        regions = torch.from_numpy(features[0].astype(np.float32))
    with torch.no_grad():
        logits = reference_logits(parts.model, src, [BOS_ID, *tgt[:-1]], regions)  # (M, V)
    return float(torch.log_softmax(logits, dim=-1)[torch.arange(len(tgt)), torch.tensor(tgt)].sum())


def test_regional_score_is_the_sum_of_the_target_log_probabilities(parts: Parts) -> None:
    mmt = translator(parts, multimodal=True)
    scores = mmt.score(SOURCES, TARGETS, IMAGES, batch_size=2)  # sentences of three lengths, padded together
    expected = [by_hand(parts, s, t, i) for s, t, i in zip(SOURCES, TARGETS, IMAGES, strict=True)]
    assert scores == pytest.approx(expected, abs=1e-4)
    assert all(score < 0 for score in scores)
    assert mmt.score(SOURCES, TARGETS, IMAGES, batch_size=1) == pytest.approx(scores, abs=1e-5)
    assert mmt.score(SOURCES, TARGETS, IMAGES[::-1]) != pytest.approx(scores, abs=1e-6)  # the image matters


def test_text_only_score_ignores_the_image(parts: Parts) -> None:
    text_only = translator(parts, multimodal=False)
    scores = text_only.score(SOURCES, TARGETS, IMAGES)
    assert text_only.score(SOURCES, TARGETS, IMAGES[::-1]) == scores
    assert text_only.score(SOURCES, TARGETS) == scores
    expected = [by_hand(parts, s, t, None) for s, t in zip(SOURCES, TARGETS, strict=True)]
    assert scores == pytest.approx(expected, abs=1e-4)


def test_score_needs_one_target_and_with_regions_one_image_per_source(parts: Parts) -> None:
    with pytest.raises(ValueError, match="3 sources but 2 targets"):
        translator(parts, multimodal=False).score(SOURCES, TARGETS[:2])
    with pytest.raises(InputError, match="tiny is multimodal: give one image id per sentence"):
        translator(parts, multimodal=True).score(SOURCES, TARGETS)
    assert translator(parts, multimodal=True).score([], [], []) == []


def test_a_translation_asked_to_stop_gives_up_before_its_next_batch(
    parts: Parts, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mmt import translator as module

    mmt, stop = translator(parts, multimodal=True), threading.Event()
    expected = mmt.translate(SOURCES, IMAGES, beam=2, batch_size=1)
    assert mmt.translate(SOURCES, IMAGES, beam=2, batch_size=1, stop=stop) == expected  # not set: no change
    searched, search = [], module.beam_search

    def search_then_stop(*args: object, **kwargs: object) -> list[list[int]]:
        searched.append(1)
        stop.set()  # the stage is stopped while this batch is searched
        return search(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(module, "beam_search", search_then_stop)
    with pytest.raises(Cancelled, match=r"^tiny: translating: given up, the process is stopping$"):
        mmt.translate(SOURCES, IMAGES, beam=2, batch_size=1, stop=stop)
    assert searched == [1]
