"""SCAN (Fusion): scores are the mean of a t2i and an i2t SCAN's, and each member trains as it would alone."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from common.checks import SettingError
from retrieval.data import encode_captions, images_of
from retrieval.evaluation import rank_metrics
from retrieval.inference import encode_images, encode_texts, evaluate, similarity_matrix
from retrieval.losses import RankingLoss
from retrieval.model import RetrievalModel
from retrieval.train import TrainConfig, fit
from retrieval.vocab import Vocabulary
from retrieval.zoo.registry import build_model, make_config
from retrieval.zoo.scan import SCAN, SCANConfig
from retrieval.zoo.scan_fusion import SCANFusion, SCANFusionConfig
from tests.unit.retrieval.test_data_train import ArrayRegions, toy_data

CPU = torch.device("cpu")
SIZES = {"word_dim": 8, "hidden": 16, "image_chunk": 3, "caption_chunk": 5}


def test_the_members_are_lee_et_al_s_flickr30k_ensemble_with_the_fusion_s_sizes() -> None:
    config = SCANFusionConfig(word_dim=8, hidden=16)
    assert config.member("t2i") == SCANConfig(
        word_dim=8, hidden=16, direction="t2i", aggregation="mean", lambda_lse=6.0, lambda_softmax=9.0
    )
    assert config.member("i2t") == SCANConfig(
        word_dim=8, hidden=16, direction="i2t", aggregation="lse", lambda_lse=5.0, lambda_softmax=4.0
    )


def test_a_bad_member_setting_is_named_as_the_fusion_names_it() -> None:
    with pytest.raises(SettingError, match=r"^configs\.scan_fusion\.i2t_lambda_softmax: got -1\.0, allowed: "):
        make_config("scan_fusion", {"i2t_lambda_softmax": -1.0}, path="configs.scan_fusion")
    with pytest.raises(SettingError, match=r"^hidden: got 0, allowed: "):
        SCANFusionConfig(hidden=0)


def toy() -> tuple[object, ArrayRegions, Vocabulary]:
    captions, regions = toy_data()
    vocab = Vocabulary.build(((c.lang, c.text) for c in captions), ["en", "de"], min_count=1)
    encoded = encode_captions(captions, vocab, {f"i{i}": i for i in range(16)}, max_len=20, source="toy")
    return encoded, regions, vocab


def fusion_and_its_members(vocab_size: int, *, seed: int = 0) -> tuple[SCANFusion, SCAN, SCAN]:
    """A fusion model and two stand-alone SCAN models holding its members' initial weights."""
    torch.manual_seed(seed)
    fusion = build_model(
        "scan_fusion", make_config("scan_fusion", SIZES), vocab_size=vocab_size, languages=2, region_dim=8
    )
    assert isinstance(fusion, SCANFusion)
    alone = []
    for direction, member in zip(("t2i", "i2t"), fusion.members(), strict=True):
        scan = SCAN(fusion.config.member(direction), vocab_size=vocab_size, languages=2, region_dim=8)
        scan.load_state_dict(member.state_dict())
        alone.append(scan)
    return fusion, alone[0], alone[1]


def scores(model: RetrievalModel, captions: object, regions: ArrayRegions) -> torch.Tensor:
    rows, _ = images_of(captions.image_rows)  # type: ignore[attr-defined]
    images = encode_images(model, regions, rows, device=CPU, batch_size=5)
    texts = encode_texts(model, captions, device=CPU, batch_size=7)  # type: ignore[arg-type]
    return similarity_matrix(model, images, texts, device=CPU, image_chunk=4)


def test_the_fused_scores_are_the_mean_of_the_members_and_the_metrics_come_from_them() -> None:
    encoded, regions, vocab = toy()
    fusion, t2i, i2t = fusion_and_its_members(len(vocab))
    fused, first, second = (scores(model, encoded, regions) for model in (fusion, t2i, i2t))
    assert fused.shape == (16, 48)
    torch.testing.assert_close(fused, (first + second) / 2, atol=1e-6, rtol=1e-6)
    assert not torch.allclose(first, second, atol=1e-3)  # two different models: the mean is not either one
    _, caption_image = images_of(encoded.image_rows)  # type: ignore[attr-defined]
    expected = rank_metrics((first + second) / 2, torch.from_numpy(caption_image))
    found = evaluate(fusion, encoded, regions, device=CPU, batch_size=5)  # type: ignore[arg-type]
    assert found == expected
    assert found != rank_metrics(first, torch.from_numpy(caption_image))


def _fit(model: RetrievalModel, encoded: object, regions: ArrayRegions, *, clip: float) -> None:
    validation = {"en": encoded.subset(np.flatnonzero(encoded.langs == 0))}  # type: ignore[attr-defined]
    fit(
        model,
        encoded,  # type: ignore[arg-type]
        validation,
        regions,
        loss=RankingLoss("max_violation"),
        type_weights=torch.full((len(encoded.type_names),), 0.5),  # type: ignore[attr-defined]
        config=TrainConfig(epochs=1, batch_size=12, lr=0.01, clip=clip),
        seed=3,
        device=CPU,
    )


@pytest.mark.parametrize("clip", [0.05, 0.0])  # 0.05: every step clipped, each member by its own gradient norm
def test_each_member_takes_the_steps_it_would_take_trained_alone(clip: float) -> None:
    encoded, regions, vocab = toy()
    fusion, t2i, i2t = fusion_and_its_members(len(vocab))
    for model in (fusion, t2i, i2t):
        _fit(model, encoded, regions, clip=clip)
    for member, alone in zip(fusion.members(), (t2i, i2t), strict=True):
        for (key, trained), (_, reference) in zip(member.state_dict().items(), alone.state_dict().items(), strict=True):
            torch.testing.assert_close(
                trained, reference, atol=1e-6, rtol=1e-5, msg=lambda detail, key=key: f"{key}: {detail}"
            )
    start = fusion_and_its_members(len(vocab))[0]
    moved = [
        not torch.equal(a, b) for a, b in zip(fusion.state_dict().values(), start.state_dict().values(), strict=True)
    ]
    assert any(moved)
