"""SCAN's batched cross attention against a one-pair-at-a-time implementation of the reference's definition."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

from retrieval.model import Embedded, ImageBatch, TextBatch
from retrieval.zoo.scan import SCAN, SCANConfig

DIM = 6
EPS = 1e-8


def pair_score(
    regions: Tensor,
    words: Tensor,
    *,
    direction: str,
    aggregation: str,
    norm: str,
    lambda_lse: float = 6.0,
    lambda_softmax: float = 9.0,
    slope: float = 0.1,
) -> float:
    """Score of one image's real (k, d) regions and one caption's real (n, d) words, step by step as the
    reference's func_attention + xattn_score: context (s, d), query (q, d), raw scores (s, q)."""
    query, context = (words, regions) if direction == "t2i" else (regions, words)
    raw = context @ query.t()  # (s, q)
    if norm in ("clipped_l2norm", "clipped"):
        raw = F.leaky_relu(raw, slope)
    if norm in ("clipped_l2norm", "l2norm"):
        raw = raw / (raw.norm(dim=1, keepdim=True) + EPS)
    elif norm == "softmax":
        raw = torch.softmax(raw, dim=1)
    weights = torch.softmax(lambda_softmax * raw.t(), dim=1)  # (q, s)
    attended = weights @ context  # (q, d)
    cosine = (query * attended).sum(1) / (query.norm(dim=1) * attended.norm(dim=1)).clamp(min=EPS)
    if aggregation == "mean":
        return float(cosine.mean())
    return float(torch.log(torch.exp(lambda_lse * cosine).sum()) / lambda_lse)


def reference_scores(images: Embedded, texts: Embedded, **settings: object) -> Tensor:
    """(n_img, n_txt) by looping over captions cut to their length and images cut to their real regions."""
    assert images.mask is not None and texts.mask is not None
    sims = torch.zeros(len(images), len(texts), dtype=torch.float64)
    for c in range(len(texts)):
        words = texts.vectors[c][texts.mask[c]]
        for i in range(len(images)):
            sims[i, c] = pair_score(images.vectors[i][images.mask[i]], words, **settings)  # type: ignore[arg-type]
    return sims


def unit(*shape: int, generator: torch.Generator) -> Tensor:
    x = torch.randn(*shape, generator=generator, dtype=torch.float64)
    return x / x.norm(dim=-1, keepdim=True)


def random_sets(counts: list[int], width: int, generator: torch.Generator) -> Embedded:
    """Unit vectors, item j real in its first counts[j] positions; padding holds junk, not zeros, so a mask
    that is not honoured shows."""
    vectors = unit(len(counts), width, DIM, generator=generator)
    mask = torch.arange(width).unsqueeze(0) < torch.tensor(counts).unsqueeze(1)
    vectors = torch.where(mask.unsqueeze(-1), vectors, 3 * torch.randn(vectors.shape, generator=generator))
    return Embedded(vectors.double(), mask)


def model(**settings: object) -> SCAN:
    config = SCANConfig(word_dim=4, hidden=DIM, **settings)  # type: ignore[arg-type]
    return SCAN(config, vocab_size=10, languages=1, region_dim=5)


@pytest.fixture(scope="module")
def data() -> tuple[Embedded, Embedded]:
    """7 images with 2-5 regions, 9 captions of 1-6 words."""
    generator = torch.Generator().manual_seed(0)
    images = random_sets([5, 3, 5, 2, 4, 5, 1], 5, generator)
    texts = random_sets([3, 6, 1, 4, 2, 6, 5, 3, 2], 6, generator)
    return images, texts


CASES = list(itertools.product(("t2i", "i2t"), ("lse", "mean"), ("clipped_l2norm", "l2norm", "softmax")))


@pytest.mark.parametrize(("direction", "aggregation", "norm"), CASES)
def test_similarity_matches_pairwise_reference(
    data: tuple[Embedded, Embedded], direction: str, aggregation: str, norm: str
) -> None:
    images, texts = data
    scan = model(
        direction=direction,
        aggregation=aggregation,
        raw_feature_norm=norm,
        image_chunk=3,
        caption_chunk=4,
        lambda_lse=5.0,
        lambda_softmax=4.0,
    )
    found = scan.similarity(images, texts)
    expected = reference_scores(
        images, texts, direction=direction, aggregation=aggregation, norm=norm, lambda_lse=5.0, lambda_softmax=4.0
    )
    assert found.dtype == torch.float64
    torch.testing.assert_close(found, expected, rtol=0, atol=1e-10)
    # Without autograd the block's temporaries are overwritten in place: same scores.
    with torch.no_grad():
        torch.testing.assert_close(scan.similarity(images, texts), found, rtol=0, atol=1e-14)


@pytest.mark.parametrize("norm", ["clipped", "no_norm"])
@pytest.mark.parametrize("direction", ["t2i", "i2t"])
def test_other_feature_norms_match_reference(data: tuple[Embedded, Embedded], direction: str, norm: str) -> None:
    images, texts = data
    scan = model(direction=direction, raw_feature_norm=norm, image_chunk=2, caption_chunk=5)
    expected = reference_scores(images, texts, direction=direction, aggregation="lse", norm=norm)
    torch.testing.assert_close(scan.similarity(images, texts), expected, rtol=0, atol=1e-10)
    with torch.no_grad():
        torch.testing.assert_close(scan.similarity(images, texts), expected, rtol=0, atol=1e-10)


def padded(sets: Embedded, extra: int, generator: torch.Generator) -> Embedded:
    """The same sets with ``extra`` more padded positions holding junk."""
    assert sets.mask is not None
    n, _, d = sets.vectors.shape
    junk = torch.randn(n, extra, d, generator=generator, dtype=sets.vectors.dtype)
    return Embedded(torch.cat([sets.vectors, junk], 1), F.pad(sets.mask, (0, extra), value=False))


@pytest.mark.parametrize("direction", ["t2i", "i2t"])
def test_padding_does_not_change_scores(data: tuple[Embedded, Embedded], direction: str) -> None:
    images, texts = data
    generator = torch.Generator().manual_seed(1)
    scan = model(direction=direction, image_chunk=4, caption_chunk=3)
    before = scan.similarity(images, texts)
    after = scan.similarity(padded(images, 3, generator), padded(texts, 4, generator))
    torch.testing.assert_close(after, before, rtol=0, atol=1e-12)
    # A caption scored alone (no other caption's length in its block) gets the same scores too.
    alone = scan.similarity(images, texts.slice(1, 2))
    torch.testing.assert_close(alone, before[:, 1:2], rtol=0, atol=1e-12)


@pytest.mark.parametrize("direction", ["t2i", "i2t"])
def test_leaky_clipping_not_relu(data: tuple[Embedded, Embedded], direction: str) -> None:
    """Negative raw scores pass through LeakyReLU(0.1); with ReLU the scores would differ."""
    images, texts = data
    found = model(direction=direction).similarity(images, texts)
    settings = {"direction": direction, "aggregation": "lse", "norm": "clipped_l2norm"}
    leaky = reference_scores(images, texts, **settings)
    relu = reference_scores(images, texts, **settings, slope=0.0)
    torch.testing.assert_close(found, leaky, rtol=0, atol=1e-10)
    assert (found - relu).abs().max() > 1e-3


def test_leaky_clipping_hand_case() -> None:
    """Two words, two regions; region 1 scores -0.8 with word 2. ReLU clips it to 0, so region 1 would score
    (1, 0) after the l2 norm over words and word 2 would attend to it with raw score 0 instead of -0.13."""
    words = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]], dtype=torch.float64)
    regions = torch.tensor([[[0.6, -0.8], [0.8, 0.6]]], dtype=torch.float64)
    images = Embedded(regions, torch.ones(1, 2, dtype=torch.bool))
    texts = Embedded(words, torch.ones(1, 2, dtype=torch.bool))
    scan = SCAN(SCANConfig(hidden=2, word_dim=2, aggregation="mean"), vocab_size=5, languages=1, region_dim=2)
    found = float(scan.similarity(images, texts))
    settings = {"direction": "t2i", "aggregation": "mean", "norm": "clipped_l2norm"}
    leaky = pair_score(regions[0], words[0], **settings)  # type: ignore[arg-type]
    relu = pair_score(regions[0], words[0], **settings, slope=0.0)  # type: ignore[arg-type]
    assert found == pytest.approx(leaky, abs=1e-12)
    assert abs(found - relu) > 1e-3


def tiny_batches() -> tuple[ImageBatch, TextBatch]:
    generator = torch.Generator().manual_seed(2)
    regions = torch.rand(3, 4, 5, generator=generator)
    region_mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0]], dtype=torch.bool)
    lengths = torch.tensor([4, 2, 5, 1])
    tokens = torch.randint(1, 10, (4, 5), generator=generator)
    tokens = tokens.masked_fill(torch.arange(5).unsqueeze(0) >= lengths.unsqueeze(1), 0)
    return ImageBatch(regions, region_mask), TextBatch(tokens, lengths, torch.zeros(4, dtype=torch.long))


def test_encoders_give_unit_vectors_and_masks() -> None:
    images, texts = tiny_batches()
    scan = model()
    regions, words = scan.encode_images(images), scan.encode_texts(texts)
    assert regions.vectors.shape == (3, 4, DIM) and words.vectors.shape == (4, 5, DIM)
    assert regions.mask is not None and words.mask is not None
    assert torch.equal(regions.mask, images.mask)
    assert torch.equal(words.mask.sum(1), texts.lengths)
    for sets in (regions, words):
        assert sets.mask is not None
        norms = sets.vectors.norm(dim=-1)
        torch.testing.assert_close(norms[sets.mask], torch.ones(int(sets.mask.sum())), atol=1e-6, rtol=0)
        assert torch.all(norms[~sets.mask] == 0)


@pytest.mark.parametrize("direction", ["t2i", "i2t"])
def test_gradients_reach_every_parameter(direction: str) -> None:
    torch.manual_seed(0)
    images, texts = tiny_batches()
    scan = model(direction=direction, image_chunk=2, caption_chunk=3)
    sims = scan.similarity(scan.encode_images(images), scan.encode_texts(texts))
    assert sims.shape == (3, 4)
    (sims.diagonal().sum() - sims.logsumexp(1).sum()).backward()
    for name, parameter in scan.named_parameters():
        assert parameter.grad is not None, name
        assert torch.isfinite(parameter.grad).all(), name
        assert parameter.grad.abs().sum() > 0, name


def test_no_caption_caption_score(data: tuple[Embedded, Embedded]) -> None:
    _, texts = data
    with pytest.raises(ValueError, match="caption-caption"):
        model().text_similarity(texts, texts)


def test_config_rejects_bad_values() -> None:
    with pytest.raises(ValueError, match="direction"):
        SCANConfig(direction="both")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="caption_chunk"):
        SCANConfig(caption_chunk=0)


def test_empty_sets_give_empty_matrix(data: tuple[Embedded, Embedded]) -> None:
    images, texts = data
    assert model().similarity(images, texts.slice(0, 0)).shape == (7, 0)
