"""DAN, VSE++ and multi-head attention with diversity: shapes, masks, gradients, and the scores and the
diversity loss against straightforward loop implementations written from the papers' definitions."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
from torch import Tensor

from retrieval.model import BatchContext, Embedded, ImageBatch, RetrievalModel, TextBatch
from retrieval.zoo.dan import DAN, DANConfig
from retrieval.zoo.multihead import HEADS, DiversityHinge, MultiHeadConfig, MultiHeadDiversity, diversity_loss
from retrieval.zoo.vsepp import VSEPP, VSEPPConfig

VOCAB = 40
REGION_DIM = 12
LANGUAGES = 3
HIDDEN = 16


def make_dan(*, normalize: bool = True) -> DAN:
    config = DANConfig(word_dim=8, hidden=HIDDEN, steps=2, normalize=normalize)
    return DAN(config, vocab_size=VOCAB, languages=LANGUAGES, region_dim=REGION_DIM)


def make_vsepp() -> VSEPP:
    return VSEPP(VSEPPConfig(word_dim=8, hidden=HIDDEN), vocab_size=VOCAB, languages=LANGUAGES, region_dim=REGION_DIM)


def make_multihead(*, language_attention: bool = True, diversity_weight: float = 1.0) -> MultiHeadDiversity:
    config = MultiHeadConfig(
        word_dim=8,
        hidden=HIDDEN,
        heads=3,
        attention_dim=12,
        context_dim=10,
        language_attention=language_attention,
        diversity_weight=diversity_weight,
    )
    return MultiHeadDiversity(config, vocab_size=VOCAB, languages=LANGUAGES, region_dim=REGION_DIM)


# name -> (builder, embedding size)
MODELS: dict[str, tuple[Callable[[], RetrievalModel], int]] = {
    "dan": (make_dan, 3 * HIDDEN),
    "vsepp": (make_vsepp, HIDDEN),
    "multihead": (make_multihead, 3 * HIDDEN),
}


def make_texts(lengths: list[int], langs: list[int], *, width: int | None = None, seed: int = 0) -> TextBatch:
    """Random captions of the given lengths, zero-padded to ``width`` (default: the longest)."""
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.zeros(len(lengths), width or max(lengths), dtype=torch.long)
    for row, length in enumerate(lengths):
        tokens[row, :length] = torch.randint(1, VOCAB, (length,), generator=generator)
    return TextBatch(tokens, torch.tensor(lengths), torch.tensor(langs))


def make_images(counts: list[int], *, slots: int | None = None, seed: int = 0) -> ImageBatch:
    """Random regions, ``counts[i]`` real ones per image; padded slots hold random values too, so only the
    mask can keep them out."""
    generator = torch.Generator().manual_seed(seed)
    slots = slots or max(counts)
    regions = torch.randn(len(counts), slots, REGION_DIM, generator=generator)
    mask = torch.arange(slots).unsqueeze(0) < torch.tensor(counts).unsqueeze(1)
    return ImageBatch(regions, mask)


def widen_images(images: ImageBatch, extra: int, *, seed: int = 1) -> ImageBatch:
    """The same images with ``extra`` more masked slots of random values."""
    generator = torch.Generator().manual_seed(seed)
    batch, _, dim = images.regions.shape
    noise = torch.randn(batch, extra, dim, generator=generator)
    mask = torch.cat([images.mask, torch.zeros(batch, extra, dtype=torch.bool)], dim=1)
    return ImageBatch(torch.cat([images.regions, noise], dim=1), mask)


def build(name: str) -> RetrievalModel:
    torch.manual_seed(0)
    model = MODELS[name][0]()
    model.eval()
    return model


@pytest.mark.parametrize("name", sorted(MODELS))
def test_shapes(name: str) -> None:
    model = build(name)
    with torch.no_grad():
        images = model.encode_images(make_images([4, 2, 3]))
        texts = model.encode_texts(make_texts([3, 5, 1, 4, 2], [0, 1, 2, 0, 1]))
        sims = model.similarity(images, texts)
    assert model.gallery_cacheable
    assert images.vectors.shape == (3, MODELS[name][1])
    assert texts.vectors.shape == (5, MODELS[name][1])
    assert images.mask is None and texts.mask is None
    assert sims.shape == (3, 5)
    assert torch.isfinite(sims).all()


@pytest.mark.parametrize("name", sorted(MODELS))
def test_caption_padding_does_not_change_the_embedding(name: str) -> None:
    model = build(name)
    batch = make_texts([3, 6, 1, 4], [0, 1, 2, 0], width=9)
    with torch.no_grad():
        together = model.encode_texts(batch).vectors
        for row, length in enumerate(batch.lengths.tolist()):
            alone = TextBatch(
                batch.tokens[row : row + 1, :length], batch.lengths[row : row + 1], batch.langs[row : row + 1]
            )
            torch.testing.assert_close(model.encode_texts(alone).vectors[0], together[row], atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_masked_regions_do_not_change_the_embedding(name: str) -> None:
    model = build(name)
    images = make_images([5, 2, 3])
    with torch.no_grad():
        reference = model.encode_images(images).vectors
        widened = model.encode_images(widen_images(images, 4)).vectors
        torch.testing.assert_close(widened, reference, atol=1e-6, rtol=1e-5)
        for row, count in enumerate(images.mask.sum(1).tolist()):
            alone = ImageBatch(images.regions[row : row + 1, :count], images.mask[row : row + 1, :count])
            torch.testing.assert_close(model.encode_images(alone).vectors[0], reference[row], atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_parameter_gets_a_finite_gradient(name: str) -> None:
    model = build(name)
    model.train()
    image_batch = make_images([4, 2, 3])
    text_batch = make_texts([3, 5, 1, 4, 2, 3], [0, 1, 2, 0, 1, 2])
    caption_image = torch.tensor([0, 0, 0, 1, 1, 2])
    images, texts = model.encode_images(image_batch), model.encode_texts(text_batch)
    sims = model.similarity(images, texts)
    weights = torch.randn(sims.shape, generator=torch.Generator().manual_seed(3))
    context = BatchContext(caption_image=caption_image, langs=text_batch.langs, progress=0.5)
    loss = (sims * weights).sum() + sum(model.extra_losses(images, texts, context).values())
    loss.backward()
    for parameter_name, parameter in model.named_parameters():
        assert parameter.grad is not None, parameter_name
        assert torch.isfinite(parameter.grad).all(), parameter_name


# --- DAN: the score against a loop over pairs, tokens, regions and steps -----------------------------------


def _softmax(scores: list[Tensor]) -> list[Tensor]:
    top = max(scores)
    exps = [torch.exp(score - top) for score in scores]
    return [value / sum(exps) for value in exps]


def _layer(linear: torch.nn.Linear, x: Tensor) -> Tensor:
    return linear.weight @ x + linear.bias


def dan_text_states(model: DAN, tokens: Tensor) -> list[Tensor]:
    """Token states of one unpadded caption: the model's embedding and LSTM, directions averaged."""
    output, _ = model.text_encoder.rnn(model.text_encoder.embedding(tokens).unsqueeze(0))
    forward, backward = output[0].chunk(2, dim=-1)
    return [(forward[t] + backward[t]) / 2 for t in range(tokens.shape[0])]


def dan_reference_score(model: DAN, regions: list[Tensor], states: list[Tensor]) -> Tensor:
    """S for one (image, caption) pair, from the definition (Nam et al. 2017), with the model's weights."""
    u = sum(states) / len(states)
    v = torch.tanh(_layer(model.image_start, sum(regions) / len(regions)))
    pairs = [(v, u)]
    memory_v, memory_u = v, u
    for visual, textual in zip(model.visual_steps, model.textual_steps, strict=True):
        guide_v = torch.tanh(_layer(visual.memory, memory_v))
        scores = [_layer(visual.score, torch.tanh(_layer(visual.item, r)) * guide_v)[0] for r in regions]
        v = torch.tanh(_layer(visual.project, sum(a * r for a, r in zip(_softmax(scores), regions, strict=True))))
        guide_u = torch.tanh(_layer(textual.memory, memory_u))
        scores = [_layer(textual.score, torch.tanh(_layer(textual.item, s)) * guide_u)[0] for s in states]
        u = sum(a * s for a, s in zip(_softmax(scores), states, strict=True))
        pairs.append((v, u))
        memory_v, memory_u = memory_v + v, memory_u + u
    if model.config.normalize:
        return sum(torch.dot(a, b) / (a.norm() * b.norm()) for a, b in pairs) / len(pairs)
    return sum(torch.dot(a, b) for a, b in pairs)


@pytest.mark.parametrize("normalize", [True, False])
def test_dan_similarity_matches_the_definition(normalize: bool) -> None:
    torch.manual_seed(0)
    model = make_dan(normalize=normalize).double().eval()
    image_batch = make_images([4, 2, 3])
    image_batch = ImageBatch(image_batch.regions.double(), image_batch.mask)
    text_batch = make_texts([3, 5, 1, 4], [0, 1, 2, 0])
    with torch.no_grad():
        sims = model.similarity(model.encode_images(image_batch), model.encode_texts(text_batch))
        expected = torch.zeros(3, 4, dtype=torch.float64)
        for j, length in enumerate(text_batch.lengths.tolist()):
            states = dan_text_states(model, text_batch.tokens[j, :length])
            for i, count in enumerate(image_batch.mask.sum(1).tolist()):
                regions = list(image_batch.regions[i, :count])
                expected[i, j] = dan_reference_score(model, regions, states)
    torch.testing.assert_close(sims, expected, atol=1e-6, rtol=0)
    if normalize:
        assert sims.abs().max() <= 1.0


# --- Multi-head: embedding, per-language heads, diversity loss --------------------------------------------


def test_multihead_similarity_is_the_cosine_of_concatenated_heads() -> None:
    model = build("multihead")
    with torch.no_grad():
        images = model.encode_images(make_images([4, 2]))
        texts = model.encode_texts(make_texts([3, 5, 2], [0, 1, 2]))
        sims = model.similarity(images, texts)
    flat_images, flat_texts = images.extras[HEADS].flatten(1), texts.extras[HEADS].flatten(1)
    expected = torch.nn.functional.cosine_similarity(flat_images.unsqueeze(1), flat_texts.unsqueeze(0), dim=-1)
    torch.testing.assert_close(sims, expected, atol=1e-6, rtol=0)
    assert images.extras[HEADS].shape == (2, 3, HIDDEN)


def test_multihead_text_heads_belong_to_the_caption_language() -> None:
    model = build("multihead")
    batch = make_texts([4, 4], [0, 0])
    with torch.no_grad():
        same = model.encode_texts(batch).vectors
        other = model.encode_texts(TextBatch(batch.tokens, batch.lengths, torch.tensor([0, 1]))).vectors
        shared = build_shared_multihead().encode_texts(TextBatch(batch.tokens, batch.lengths, torch.tensor([0, 1])))
    torch.testing.assert_close(other[0], same[0])
    assert not torch.allclose(other[1], same[1])
    assert len(build_shared_multihead().text_attention) == 1 and shared.vectors.shape == (2, 3 * HIDDEN)


def build_shared_multihead() -> MultiHeadDiversity:
    torch.manual_seed(0)
    return make_multihead(language_attention=False).eval()


def reference_diversity(
    image_heads: Tensor, text_heads: Tensor, caption_image: list[int], langs: list[int], margin: float, hinge: str
) -> float:
    """Eq. 5-6 of Huang et al. 2019 written out term by term (hinge as in retrieval.zoo.multihead's notes)."""

    def h(similarity: float) -> float:
        return max(0.0, similarity - margin) if hinge == "below_margin" else max(0.0, margin - similarity)

    def pair(x: Tensor, y: Tensor) -> float:  # sum_k sum_{r != k} h(s(x^k, y^r))
        heads = x.shape[0]
        cosine = torch.nn.functional.cosine_similarity
        return sum(h(float(cosine(x[k], y[r], dim=0))) for k in range(heads) for r in range(heads) if r != k)

    total = sum(pair(image, image) for image in image_heads)  # l^D(V, V)
    for lang in sorted(set(langs)):
        captions = [c for c in range(len(langs)) if langs[c] == lang]
        total += sum(pair(text_heads[c], text_heads[c]) for c in captions)  # l^D(E, E), l^D(G, G), ...
        total += sum(pair(image_heads[caption_image[c]], text_heads[c]) for c in captions)  # l^D(V, E), ...
    for lang_a in sorted(set(langs)):  # l^D(G, E) for every pair of languages, G the later one
        for lang_b in sorted(set(langs)):
            if lang_b <= lang_a:
                continue
            for c_b in (c for c in range(len(langs)) if langs[c] == lang_b):
                for c_a in (c for c in range(len(langs)) if langs[c] == lang_a):
                    if caption_image[c_a] == caption_image[c_b]:
                        total += pair(text_heads[c_b], text_heads[c_a])
    return total


@pytest.mark.parametrize("hinge", ["below_margin", "as_printed"])
def test_diversity_loss_matches_the_loop(hinge: DiversityHinge) -> None:
    generator = torch.Generator().manual_seed(5)
    image_heads = torch.randn(3, 3, 6, dtype=torch.float64, generator=generator)
    text_heads = torch.randn(7, 3, 6, dtype=torch.float64, generator=generator)
    caption_image = [0, 0, 1, 1, 1, 2, 0]
    langs = [0, 1, 0, 1, 2, 2, 1]
    loss = diversity_loss(
        image_heads, text_heads, torch.tensor(caption_image), torch.tensor(langs), margin=0.1, hinge=hinge
    )
    expected = reference_diversity(image_heads, text_heads, caption_image, langs, 0.1, hinge)
    assert expected > 0
    # 1e-6, not exact: the model's l2norm adds 1e-8 to each norm.
    assert loss.item() == pytest.approx(expected, abs=1e-6)


def test_diversity_loss_by_hand_and_weighted() -> None:
    # One image and two captions of it, English (lang 0) and German (lang 1), K = 2 heads in 2-D.
    image = torch.tensor([[[1.0, 0.0], [1.0, 1.0]]])  # s(v1, v2) = 1/sqrt(2)
    english = [[0.0, 1.0], [1.0, 0.0]]  # s(e1, e2) = 0
    german = [[0.0, 1.0], [0.0, 1.0]]  # s(g1, g2) = 1
    captions = torch.tensor([english, german])
    root = 1 / math.sqrt(2)
    expected = (
        2 * (root - 0.1)  # (V,V): (1,2) and (2,1)
        + 0.0  # (E,E)
        + 2 * (1 - 0.1)  # (G,G)
        + (1 - 0.1)
        + (root - 0.1)  # (V,E): s(v1, e2) = 1, s(v2, e1) = 1/sqrt(2)
        + 0.0
        + (root - 0.1)  # (V,G): s(v1, g2) = 0, s(v2, g1) = 1/sqrt(2)
        + (1 - 0.1)
        + 0.0  # (G,E): s(g1, e2) = 0, s(g2, e1) = 1
    )
    assert expected == pytest.approx(4 * root + 3.2)
    model = make_multihead(diversity_weight=0.5)
    context = BatchContext(caption_image=torch.tensor([0, 0]), langs=torch.tensor([0, 1]), progress=0.0)
    losses = model.extra_losses(
        Embedded(image.flatten(1), extras={HEADS: image}),
        Embedded(captions.flatten(1), extras={HEADS: captions}),
        context,
    )
    assert set(losses) == {"diversity"}
    assert losses["diversity"].item() == pytest.approx(0.5 * expected, abs=1e-6)


def test_diversity_weight_zero_adds_nothing() -> None:
    model = make_multihead(diversity_weight=0.0)
    context = BatchContext(caption_image=torch.tensor([0]), langs=torch.tensor([0]), progress=0.0)
    assert model.extra_losses(Embedded(torch.zeros(1, 4)), Embedded(torch.zeros(1, 4)), context) == {}
