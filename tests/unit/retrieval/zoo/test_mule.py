"""MULE and PARALLEL-EmbN: shapes, padding, language branches, and the extra losses against loop
implementations written from their definitions (EmbN's neighbourhood hinge, DANN gradient reversal)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from common.checks import SettingError
from retrieval.losses import RankingLoss
from retrieval.model import BatchContext, Embedded, ImageBatch, RetrievalModel, TextBatch
from retrieval.zoo.mule import (
    MULE,
    MULEConfig,
    apply_by_language,
    dann_schedule,
    language_classifier_loss,
    neighbourhood_loss,
    reverse_gradient,
)
from retrieval.zoo.parallel_embn import ParallelEmbN, ParallelEmbNConfig

VOCAB, LANGUAGES, REGION_DIM = 30, 3, 6
# Four images, two captions each, every image described in two languages (0/1, 2/0, 1/2, 0/1).
CAPTION_IMAGE = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])
LANGS = torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])
LENGTHS = torch.tensor([3, 5, 2, 4, 5, 1, 2, 3])
# For the loss comparisons: three captions per image, some images with two captions in one language, so
# the within-language positives are not only the anchors themselves.
RICH_IMAGE = torch.tensor([0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3])
RICH_LANGS = torch.tensor([0, 0, 1, 1, 1, 2, 2, 0, 0, 1, 2, 2])


def make_mule(**overrides: Any) -> MULE:
    torch.manual_seed(0)
    config = MULEConfig(word_dim=8, mule_dim=12, hidden=16, embed_dim=10, image_hidden=16, **overrides)
    return MULE(config, vocab_size=VOCAB, languages=LANGUAGES, region_dim=REGION_DIM)


def make_parallel(**overrides: Any) -> ParallelEmbN:
    torch.manual_seed(0)
    config = ParallelEmbNConfig(word_dim=8, hidden=16, embed_dim=10, image_hidden=16, **overrides)
    return ParallelEmbN(config, vocab_size=VOCAB, languages=LANGUAGES, region_dim=REGION_DIM)


MAKERS = pytest.mark.parametrize("make", [make_mule, make_parallel], ids=["mule", "parallel_embn"])


def text_batch(lengths: torch.Tensor = LENGTHS, langs: torch.Tensor = LANGS) -> TextBatch:
    generator = torch.Generator().manual_seed(1)
    steps = int(lengths.max())
    tokens = torch.randint(1, VOCAB, (len(lengths), steps), generator=generator)
    tokens = tokens * (torch.arange(steps) < lengths.unsqueeze(1))
    return TextBatch(tokens, lengths, langs)


def image_batch(n: int = 4, regions: int = 5) -> ImageBatch:
    generator = torch.Generator().manual_seed(2)
    return ImageBatch(
        torch.randn(n, regions, REGION_DIM, generator=generator), torch.ones(n, regions, dtype=torch.bool)
    )


def unit_rows(n: int, d: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return F.normalize(torch.randn(n, d, generator=generator, dtype=torch.float64), dim=1)


# --- loop implementations from the definitions ----------------------------------------------------------


def loop_distance(x: list[float], y: list[float]) -> float:
    return math.sqrt(
        sum(a * a for a in x) - 2 * sum(a * b for a, b in zip(x, y, strict=True)) + sum(b * b for b in y) + 1e-4
    )


def loop_neighbourhood(anchors, anchor_image, others, other_image, k, margin):
    """Per anchor: farthest same-image other as positive, K largest hinges over other-image others; mean of
    all hinges kept. None when nothing is kept."""
    kept: list[float] = []
    for anchor, image in zip(anchors.tolist(), anchor_image.tolist(), strict=True):
        pairs = list(zip(others.tolist(), other_image.tolist(), strict=True))
        positives = [loop_distance(anchor, other) for other, j in pairs if j == image]
        negatives = [loop_distance(anchor, other) for other, j in pairs if j != image]
        if not positives or not negatives:
            continue
        hinges = sorted((max(0.0, margin + max(positives) - d) for d in negatives), reverse=True)
        kept += hinges[:k]
    return sum(kept) / len(kept) if kept else None


def loop_mean(values):
    present = [value for value in values if value is not None]
    return sum(present) / len(present) if present else None


def loop_cross_lingual(vectors, caption_image, langs, k, margin):
    present = sorted(set(langs.tolist()))
    losses = []
    for i, a in enumerate(present):
        for b in present[i + 1 :]:
            in_a, in_b = langs == a, langs == b
            losses.append(
                loop_neighbourhood(vectors[in_a], caption_image[in_a], vectors[in_b], caption_image[in_b], k, margin)
            )
    return loop_mean(losses)


def loop_within_language(vectors, caption_image, langs, k, margin):
    losses = []
    for lang in sorted(set(langs.tolist())):
        rows = langs == lang
        losses.append(
            loop_neighbourhood(vectors[rows], caption_image[rows], vectors[rows], caption_image[rows], k, margin)
        )
    return loop_mean(losses)


def loop_language_classifier(weight, bias, features, langs, domain_adapt):
    per_language: dict[int, list[float]] = {}
    for feature, lang in zip(features.tolist(), langs.tolist(), strict=True):
        logits = [
            sum(w * f for w, f in zip(row, feature, strict=True)) + b
            for row, b in zip(weight.tolist(), bias.tolist(), strict=True)
        ]
        log_total = math.log(sum(math.exp(logit) for logit in logits))
        per_language.setdefault(lang, []).append(log_total - logits[lang])
    means = [sum(values) / len(values) for values in per_language.values()]
    return domain_adapt * sum(means) / len(means)


# --- encoders ---------------------------------------------------------------------------------------------


@MAKERS
def test_shapes_and_unit_norm(make: Callable[..., RetrievalModel]) -> None:
    model = make().eval()
    images = model.encode_images(image_batch())
    texts = model.encode_texts(text_batch())
    assert images.vectors.shape == (4, 10) and texts.vectors.shape == (8, 10)
    assert model.similarity(images, texts).shape == (4, 8)
    torch.testing.assert_close(images.vectors.norm(dim=1), torch.ones(4))
    torch.testing.assert_close(texts.vectors.norm(dim=1), torch.ones(8))


def test_mule_extras_and_separate_branches() -> None:
    for separate in (False, True):
        model = make_mule(separate_lang_branch=separate).eval()
        texts = model.encode_texts(text_batch())
        assert len(model.sentence_branches) == (LANGUAGES if separate else 1)
        assert texts.vectors.shape == (8, 10)
        assert texts.extras["mule"].shape == (8, 12)
        torch.testing.assert_close(texts.extras["mule"].norm(dim=1), torch.ones(8))


@MAKERS
def test_language_branch_changes_the_embedding(make: Callable[..., RetrievalModel]) -> None:
    model = make().eval()
    lengths = torch.tensor([4, 4])
    tokens = text_batch(lengths[:1], torch.tensor([0])).tokens.repeat(2, 1)  # the same caption twice
    vectors = model.encode_texts(TextBatch(tokens, lengths, torch.tensor([0, 1]))).vectors
    assert (vectors[0] - vectors[1]).abs().max() > 1e-3


@MAKERS
def test_padding_does_not_change_embeddings(make: Callable[..., RetrievalModel]) -> None:
    model = make().eval()
    batch = text_batch()
    padded = TextBatch(F.pad(batch.tokens, (0, 4)), batch.lengths, batch.langs)
    expected = model.encode_texts(batch).vectors
    torch.testing.assert_close(model.encode_texts(padded).vectors, expected)
    alone = TextBatch(batch.tokens[2:3, :2], batch.lengths[2:3], batch.langs[2:3])
    torch.testing.assert_close(model.encode_texts(alone).vectors, expected[2:3])

    images = image_batch()
    junk = torch.randn(4, 3, REGION_DIM) * 100
    more = ImageBatch(torch.cat([images.regions, junk], 1), F.pad(images.mask, (0, 3), value=False))
    torch.testing.assert_close(model.encode_images(more).vectors, model.encode_images(images).vectors)


def test_mule_mean_embedding_ignores_padding() -> None:
    model = make_mule().eval()
    batch = text_batch()
    padded = TextBatch(F.pad(batch.tokens, (0, 4)), batch.lengths, batch.langs)
    torch.testing.assert_close(model.encode_texts(padded).extras["mule"], model.encode_texts(batch).extras["mule"])


def test_config_validation() -> None:
    with pytest.raises(SettingError, match=r"^topk: got 0, allowed: topk > 0$"):
        MULEConfig(topk=0)
    with pytest.raises(SettingError, match=r"^domain_adapt: got -1\.0, allowed: domain_adapt >= 0$"):
        MULEConfig(domain_adapt=-1.0, pretrain_epochs=-1)
    with pytest.raises(SettingError, match=r"^rnn: got 'lstmm', allowed: lstm, gru$"):
        MULEConfig(rnn="lstmm")  # type: ignore[arg-type]
    with pytest.raises(SettingError, match=r"^dropout: got 1\.0, allowed: 0 <= dropout < 1$"):
        ParallelEmbNConfig(dropout=1.0)


def test_unknown_language_index_is_an_error() -> None:
    with pytest.raises(ValueError, match="language indices"):
        apply_by_language(torch.tensor([0, 3]), LANGUAGES, lambda lang, rows: rows.float())


# --- neighbourhood constraints ----------------------------------------------------------------------------


def test_neighbourhood_loss_hand_computed() -> None:
    # Anchor (1, 0) of image 0; positive (0, 1) at sqrt(2 + 1e-4); negatives (1, 0) at 0.01 and (-1, 0) at
    # sqrt(4 + 1e-4). Hinges: 0.05 + 1.4142489 - 0.01 = 1.4542489 and 0.05 + 1.4142489 - 2.000025 < 0 -> 0.
    anchors = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    others = torch.tensor([[0.0, 1.0], [1.0, 0.0], [-1.0, 0.0]], dtype=torch.float64)
    anchor_image, other_image = torch.tensor([0]), torch.tensor([0, 1, 2])
    violated = 0.05 + math.sqrt(2.0001) - 0.01
    top1 = neighbourhood_loss(anchors, anchor_image, others, other_image, k=1, margin=0.05)
    top10 = neighbourhood_loss(anchors, anchor_image, others, other_image, k=10, margin=0.05)
    assert top1 is not None and top10 is not None
    assert abs(top1.item() - violated) < 1e-9
    assert abs(top10.item() - violated / 2) < 1e-9  # both negatives kept, one hinge is 0


@pytest.mark.parametrize("k", [1, 3, 10])
def test_neighbourhood_loss_matches_loops(k: int) -> None:
    generator = torch.Generator().manual_seed(k)
    anchors, others = unit_rows(7, 5, seed=10 + k), unit_rows(9, 5, seed=20 + k)
    anchor_image = torch.randint(0, 5, (7,), generator=generator)  # image 4 of some anchors may have no other
    other_image = torch.randint(0, 4, (9,), generator=generator)
    got = neighbourhood_loss(anchors, anchor_image, others, other_image, k=k, margin=0.3)
    expected = loop_neighbourhood(anchors, anchor_image, others, other_image, k, 0.3)
    assert got is not None and expected is not None
    assert abs(got.item() - expected) < 1e-6


def test_neighbourhood_loss_without_negatives_is_none() -> None:
    vectors = unit_rows(3, 4, seed=0)
    images = torch.zeros(3, dtype=torch.long)
    assert neighbourhood_loss(vectors, images, vectors, images, k=10, margin=0.05) is None


def test_mule_extra_losses_match_loops() -> None:
    config = {"uni_align": 0.7, "embed_align": 1.3, "neighbourhood": 0.05, "domain_adapt": 0.01, "margin": 0.4}
    model = make_mule(topk=2, **config).double()
    # Low-dimensional sentence vectors spread the distances, so many hinges are violated.
    sentences, mule = unit_rows(12, 4, seed=3), unit_rows(12, 12, seed=4)
    texts = Embedded(sentences, extras={"mule": mule})
    context = BatchContext(RICH_IMAGE, RICH_LANGS, 0.3)
    losses = model.extra_losses(Embedded(unit_rows(4, 4, seed=5)), texts, context)
    args = (RICH_IMAGE, RICH_LANGS, 2, 0.4)
    classifier = model.language_classifier
    expected = {
        "uni_align": 0.7 * loop_cross_lingual(sentences, *args),
        "embed_align": 1.3 * loop_cross_lingual(mule, *args),
        "neighbourhood": 0.05 * loop_within_language(sentences, *args),
        "language_classifier": loop_language_classifier(classifier.weight, classifier.bias, mule, RICH_LANGS, 0.01),
    }
    assert set(losses) == set(expected)
    for name, value in expected.items():
        assert value > 0, name  # a comparison of zeros would prove little
        assert abs(losses[name].item() - value) < 1e-6, name


def test_parallel_extra_losses_match_loops() -> None:
    model = make_parallel(topk=3, margin=0.4).double()
    sentences = unit_rows(12, 4, seed=6)
    context = BatchContext(RICH_IMAGE, RICH_LANGS, 0.5)
    losses = model.extra_losses(Embedded(unit_rows(4, 4, seed=7)), Embedded(sentences), context)
    assert set(losses) == {"neighbourhood"}
    expected = 0.05 * loop_within_language(sentences, RICH_IMAGE, RICH_LANGS, 3, 0.4)
    assert expected > 0
    assert abs(losses["neighbourhood"].item() - expected) < 1e-6


@MAKERS
def test_single_language_batch_has_no_cross_lingual_terms(make: Callable[..., RetrievalModel]) -> None:
    model = make()
    langs = torch.zeros(8, dtype=torch.long)
    images = model.encode_images(image_batch())
    texts = model.encode_texts(text_batch(langs=langs))
    losses = model.extra_losses(images, texts, BatchContext(CAPTION_IMAGE, langs, 0.5))
    assert set(losses) == {"neighbourhood"}
    assert all(torch.isfinite(loss) for loss in losses.values())
    if isinstance(model, MULE):
        pretrain = model.pretrain_loss(texts, BatchContext(CAPTION_IMAGE, langs, 0.0))
        assert pretrain.item() == 0.0
        pretrain.backward()  # still differentiable


# --- gradient reversal ------------------------------------------------------------------------------------


def test_gradient_reversal_negates_and_scales() -> None:
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    weights = torch.randn(3, 4, dtype=torch.float64)
    y = reverse_gradient(x, 0.3)
    torch.testing.assert_close(y, x)
    (y * weights).sum().backward()
    assert x.grad is not None
    torch.testing.assert_close(x.grad, -0.3 * weights)


def test_language_classifier_gradient_is_reversed_on_features_only() -> None:
    torch.manual_seed(0)
    classifier = torch.nn.Linear(4, LANGUAGES).double()
    features = unit_rows(6, 4, seed=8)
    langs = torch.tensor([0, 1, 2, 0, 0, 1])
    progress, weight = 0.4, 0.01

    reversed_features = features.clone().requires_grad_()
    loss = language_classifier_loss(classifier, reversed_features, langs, progress=progress, weight=weight)
    loss.backward()
    assert reversed_features.grad is not None and classifier.weight.grad is not None
    reversed_grad, classifier_grad = reversed_features.grad, classifier.weight.grad.clone()

    classifier.zero_grad()
    plain_features = features.clone().requires_grad_()
    per_caption = F.cross_entropy(classifier(plain_features), langs, reduction="none")
    plain = weight * torch.stack([per_caption[langs == lang].mean() for lang in range(LANGUAGES)]).mean()
    plain.backward()
    assert plain_features.grad is not None and classifier.weight.grad is not None

    torch.testing.assert_close(loss, plain)
    torch.testing.assert_close(reversed_grad, -dann_schedule(progress, weight) * plain_features.grad)
    torch.testing.assert_close(classifier_grad, classifier.weight.grad)  # the classifier still minimises


def test_dann_schedule() -> None:
    assert dann_schedule(0.0, 1e-6) == 0.0
    assert dann_schedule(1.0, 1e-6) == pytest.approx((2 / (1 + math.exp(-10)) - 1) * 1e-6, rel=1e-12)
    assert dann_schedule(1.0, 1.0) == pytest.approx(0.9999092, abs=1e-7)
    assert 0 < dann_schedule(0.1, 1.0) < dann_schedule(0.5, 1.0) < 1.0


# --- pre-training and training --------------------------------------------------------------------------


def test_pretrain_loss_trains_only_the_mule_layers() -> None:
    model = make_mule()
    assert model.pretrain_epochs() == 5
    assert make_parallel().pretrain_epochs() == 0
    texts = model.encode_texts(text_batch())
    loss = model.pretrain_loss(texts, BatchContext(CAPTION_IMAGE, LANGS, 0.0))
    assert loss.item() > 0
    loss.backward()
    assert model.word_embedding.weight.grad is None
    assert all(layer.weight.grad is not None for layer in model.mule_layers)
    assert all(parameter.grad is None for parameter in model.sentence_branches.parameters())
    assert model.language_classifier.weight.grad is None


@MAKERS
def test_one_step_decreases_the_total_loss(make: Callable[..., RetrievalModel]) -> None:
    model = make(dropout=0.0).train()
    images, texts = image_batch(), text_batch()
    ranking = RankingLoss(kind="topk", topk=10, topk_margin=0.05)
    context = BatchContext(CAPTION_IMAGE, LANGS, 0.5)

    def total() -> torch.Tensor:
        encoded_images, encoded_texts = model.encode_images(images), model.encode_texts(texts)
        sims = model.similarity(encoded_images, encoded_texts)
        loss = ranking(sims, CAPTION_IMAGE, LANGS, torch.ones(LANGUAGES))
        return loss + sum(model.extra_losses(encoded_images, encoded_texts, context).values())

    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    before = total()
    before.backward()
    optimizer.step()
    with torch.no_grad():
        after = total()
    assert after.item() < before.item()
