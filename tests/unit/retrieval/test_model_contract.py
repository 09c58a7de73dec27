"""The retrieval model contract (:mod:`retrieval.model`), checked on every row of :data:`retrieval.zoo.registry.MODELS`.

Training, evaluation and search only call ``encode_images``, ``encode_texts``, ``similarity`` and
``extra_losses``; whatever a model does inside, these tests hold it to what those callers assume: scores of the
right shape, padding and masked regions that change nothing, a gradient for every parameter, reproducible
initialisation, and a ``gallery_cacheable`` flag that search can trust. Each model is built tiny from
:data:`TINY`, which must have a row for every registered model, so a new model cannot skip the contract.

Comparisons that should be exact up to float32 rounding run the model in eval mode: dropout (MULE,
PARALLEL-EmbN, and DAN when configured) would otherwise draw a new mask per call, and MULE's and
PARALLEL-EmbN's BatchNorm would normalise with the statistics of whatever batch it sees, so an image alone
would legitimately score differently from the same image in a batch. Only the gradient test trains.
"""

from __future__ import annotations

import re
from typing import Any, get_args

import pytest
import torch
from torch import Tensor

from retrieval.losses import RankingLoss
from retrieval.model import BatchContext, Embedded, ImageBatch, LossKind, RetrievalModel, TextBatch
from retrieval.zoo.registry import MODELS, build_model, make_config

VOCAB = 40
REGION_DIM = 12
LANGUAGES = 3
# float32 throughout; padding and batching only reorder or regroup the same sums
ATOL = RTOL = 1e-5

# Registry name -> settings that make the model small enough for a unit test. Chunks of SCAN smaller than the
# test batches, so its block-wise scoring is exercised; MULE/PARALLEL-EmbN's top-K below the batch's negatives.
TINY: dict[str, dict[str, Any]] = {
    "san": {"word_dim": 8, "hidden": 16},
    "dan": {"word_dim": 8, "hidden": 16, "steps": 2},
    "scan": {"word_dim": 8, "hidden": 16, "image_chunk": 2, "caption_chunk": 3},
    "mule": {"word_dim": 8, "mule_dim": 12, "hidden": 16, "embed_dim": 10, "image_hidden": 16, "topk": 3},
    "parallel_embn": {"word_dim": 8, "hidden": 16, "embed_dim": 10, "image_hidden": 16, "topk": 3},
    "vsepp": {"word_dim": 8, "hidden": 16},
    "multihead": {"word_dim": 8, "hidden": 16, "heads": 3, "attention_dim": 12, "context_dim": 10},
    "scan_fusion": {"word_dim": 8, "hidden": 16, "image_chunk": 2, "caption_chunk": 3},
}

# Parameters that a normal training step leaves without a gradient, by registry name (regexes over parameter
# names); the gradient test checks that each of them really gets none, so the lists cannot go stale.
NO_GRADIENT: dict[str, tuple[str, ...]] = {
    # SentenceBranch reuses TextEncoder's recurrent part through encode_embedded, which skips the encoder's own
    # (one-row, padding-only) word table: the caption's words come from the model-level word_embedding.
    "mule": (r"sentence_branches\.\d+\.encoder\.embedding\.weight",),
    "parallel_embn": (r"branches\.\d+\.encoder\.embedding\.weight",),
}
# Parameters whose gradient is zero in exact arithmetic (what arrives is rounding noise): they shift every input
# of an operation that ignores shifts.
ZERO_GRADIENT: dict[str, tuple[str, ...]] = {
    # the bias of w_vh / w_uh adds one constant to every attention score, and a softmax ignores constants
    "dan": (r"(visual|textual)_steps\.\d+\.score\.bias",),
    # the image branch's first Linear feeds BatchNorm, whose train-mode batch mean removes its bias again
    "mule": (r"image_branch\.layers\.0\.bias",),
    "parallel_embn": (r"image_branch\.layers\.0\.bias",),
}
# Largest |gradient| accepted as rounding noise for ZERO_GRADIENT (seen: at most 3e-8).
NOISE = 1e-6

REGISTERED = pytest.mark.parametrize("name", sorted(MODELS))

# Three images; image 1 has a hole in its mask (slot 1 is padding between real regions), and every padded
# slot holds random values, so only the mask can keep them out.
IMAGE_MASKS = [
    [True, True, True, True, False],
    [True, False, True, False, False],
    [True, True, True, True, True],
]
# Seven captions of 1-6 tokens in the three languages; caption j describes image CAPTION_IMAGE[j], and every
# image has captions in at least two languages (MULE's cross-lingual constraints, multihead's (G, E) pairs).
LENGTHS = [3, 6, 1, 4, 2, 5, 3]
LANGS = [0, 1, 2, 0, 1, 2, 1]
CAPTION_IMAGE = [0, 0, 1, 1, 2, 2, 0]


def tiny_model(name: str, *, seed: int = 0) -> RetrievalModel:
    """Registry model ``name`` with its :data:`TINY` settings, initialised under ``seed``, in eval mode."""
    torch.manual_seed(seed)
    config = make_config(name, TINY[name])
    model = build_model(name, config, vocab_size=VOCAB, languages=LANGUAGES, region_dim=REGION_DIM)
    return model.eval()


def make_texts(lengths: list[int], langs: list[int], *, width: int | None = None, seed: int = 0) -> TextBatch:
    """Random captions of the given lengths, zero-padded (the contract's padding id) to ``width``."""
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.zeros(len(lengths), width or max(lengths), dtype=torch.long)
    for row, length in enumerate(lengths):
        tokens[row, :length] = torch.randint(1, VOCAB, (length,), generator=generator)
    return TextBatch(tokens, torch.tensor(lengths), torch.tensor(langs))


def make_images(masks: list[list[bool]], *, seed: int = 0) -> ImageBatch:
    """Random regions in every slot, real where ``masks`` says so."""
    generator = torch.Generator().manual_seed(seed)
    mask = torch.tensor(masks)
    return ImageBatch(torch.randn(*mask.shape, REGION_DIM, generator=generator), mask)


def widen(images: ImageBatch, extra: int, *, seed: int = 1) -> ImageBatch:
    """The same images with ``extra`` more masked slots of random (non-zero) values."""
    generator = torch.Generator().manual_seed(seed)
    batch, _, dim = images.regions.shape
    noise = 5 * torch.randn(batch, extra, dim, generator=generator)
    mask = torch.cat([images.mask, torch.zeros(batch, extra, dtype=torch.bool)], dim=1)
    return ImageBatch(torch.cat([images.regions, noise], dim=1), mask)


def scores(model: RetrievalModel, images: ImageBatch, texts: TextBatch) -> Tensor:
    return model.similarity(model.encode_images(images), model.encode_texts(texts))


def assert_same_scores(found: Tensor, expected: Tensor, what: str) -> None:
    torch.testing.assert_close(found, expected, atol=ATOL, rtol=RTOL, msg=lambda detail: f"{what}: {detail}")


def caption(texts: TextBatch, row: int) -> TextBatch:
    """Caption ``row`` alone, cut to its length: no padding at all."""
    length = int(texts.lengths[row])
    return TextBatch(texts.tokens[row : row + 1, :length], texts.lengths[row : row + 1], texts.langs[row : row + 1])


def image(images: ImageBatch, row: int) -> ImageBatch:
    """Image ``row`` alone with only its real regions (in their order), no masked slot."""
    real = images.mask[row]
    regions = images.regions[row][real].unsqueeze(0)
    return ImageBatch(regions, torch.ones(regions.shape[:2], dtype=torch.bool))


def test_every_registered_model_has_tiny_settings() -> None:
    missing = sorted(set(MODELS) - set(TINY))
    stale = sorted(set(TINY) - set(MODELS))
    assert not missing, f"add tiny settings for {missing} to TINY so the model contract covers them"
    assert not stale, f"TINY names models the registry no longer has: {stale}"
    for table in (NO_GRADIENT, ZERO_GRADIENT):
        assert set(table) <= set(MODELS), f"unknown models in a gradient exemption: {sorted(set(table) - set(MODELS))}"


@REGISTERED
def test_registry_row_builds_its_model(name: str) -> None:
    """The row's config type and class belong together, the class carries the row's name (checkpoints store
    ``model.name`` and load by it), and its default loss is one the trainer knows."""
    entry = MODELS[name]
    config = make_config(name, TINY[name])
    assert isinstance(config, entry.config_type)
    model = tiny_model(name)
    assert type(model) is entry.model_type
    assert model.name == name
    assert model.default_loss in get_args(LossKind)
    assert any(parameter.requires_grad for parameter in model.parameters())


@REGISTERED
def test_similarity_is_images_by_captions_and_finite(name: str) -> None:
    model = tiny_model(name)
    # I != T, so a transposed matrix cannot pass
    images = make_images(IMAGE_MASKS)
    texts = make_texts(LENGTHS, LANGS)
    with torch.no_grad():
        image_embedded, text_embedded = model.encode_images(images), model.encode_texts(texts)
        sims = model.similarity(image_embedded, text_embedded)
    assert len(image_embedded) == 3 and len(text_embedded) == 7
    assert sims.shape == (3, 7)
    assert sims.dtype == torch.float32
    assert torch.isfinite(sims).all()
    # Not a constant: the scores depend on the pair (a model that ignored one side would give equal rows or columns)
    assert sims.std(dim=0).min() > 0 and sims.std(dim=1).min() > 0


@REGISTERED
@pytest.mark.parametrize("autograd", [False, True], ids=["no_grad", "grad"])
def test_caption_padding_does_not_change_scores(name: str, autograd: bool) -> None:
    """Compared on scores, not embeddings: SCAN embeds a caption as a masked set of word vectors, whose padded
    positions need not match between a padded and an unpadded caption. Both autograd modes, since SCAN takes
    in-place shortcuts without autograd."""
    model = tiny_model(name)
    images = make_images(IMAGE_MASKS)
    # two columns wider than the longest caption: some positions are padding in every row
    texts = make_texts(LENGTHS, LANGS, width=max(LENGTHS) + 2)
    with torch.set_grad_enabled(autograd):
        image_embedded = model.encode_images(images)
        together = model.similarity(image_embedded, model.encode_texts(texts))
        for row in range(len(LENGTHS)):
            alone = model.similarity(image_embedded, model.encode_texts(caption(texts, row)))
            assert_same_scores(alone[:, 0], together[:, row], f"caption {row} alone vs. in the padded batch")


@REGISTERED
@pytest.mark.parametrize("autograd", [False, True], ids=["no_grad", "grad"])
def test_masked_regions_do_not_change_scores(name: str, autograd: bool) -> None:
    model = tiny_model(name)
    images = make_images(IMAGE_MASKS)
    texts = make_texts(LENGTHS, LANGS)
    with torch.set_grad_enabled(autograd):
        text_embedded = model.encode_texts(texts)
        reference = model.similarity(model.encode_images(images), text_embedded)
        widened = model.similarity(model.encode_images(widen(images, 4)), text_embedded)
        assert_same_scores(widened, reference, "with 4 more masked slots")
        for row in range(len(IMAGE_MASKS)):
            alone = model.similarity(model.encode_images(image(images, row)), text_embedded)
            assert_same_scores(alone[0], reference[row], f"image {row} alone with its real regions vs. in the batch")


def listed(table: dict[str, tuple[str, ...]], name: str, parameter: str) -> bool:
    return any(re.fullmatch(pattern, parameter) for pattern in table.get(name, ()))


@REGISTERED
def test_every_parameter_gets_a_finite_gradient_from_a_training_step(name: str) -> None:
    """The trainer's objective (retrieval.train._ranking_step): the model's default ranking loss on the
    similarity plus every extra loss, in train mode (dropout and batch statistics as in training)."""
    model = tiny_model(name).train()
    images, texts = make_images(IMAGE_MASKS), make_texts(LENGTHS, LANGS)
    caption_image, langs = torch.tensor(CAPTION_IMAGE), texts.langs
    image_embedded, text_embedded = model.encode_images(images), model.encode_texts(texts)
    sims = model.similarity(image_embedded, text_embedded).float()
    # one language type: the batch's captions are all human ones
    total = RankingLoss(model.default_loss)(sims, caption_image, torch.zeros_like(langs), torch.ones(1))
    context = BatchContext(caption_image, langs, progress=0.5)
    for key, extra in model.extra_losses(image_embedded, text_embedded, context).items():
        assert extra.dim() == 0 and torch.isfinite(extra), f"extra loss {key} = {extra}"
        total = total + extra.float()
    assert torch.isfinite(total) and total > 0, f"the objective is {total}: no gradient to check"
    total.backward()  # type: ignore[no-untyped-call]
    for parameter_name, parameter in model.named_parameters():
        if not parameter.requires_grad:
            continue
        if listed(NO_GRADIENT, name, parameter_name):
            assert parameter.grad is None, f"{parameter_name} is in NO_GRADIENT but now gets a gradient"
            continue
        assert parameter.grad is not None, f"{parameter_name} gets no gradient"
        assert torch.isfinite(parameter.grad).all(), f"{parameter_name} has a non-finite gradient"
        largest = float(parameter.grad.abs().max())
        if listed(ZERO_GRADIENT, name, parameter_name):
            assert largest <= NOISE, f"{parameter_name} is in ZERO_GRADIENT but gets a gradient of {largest:g}"
        else:
            assert largest > 0, f"{parameter_name} has an all-zero gradient"


@REGISTERED
def test_pre_training_hooks_agree(name: str) -> None:
    """pretrain_epochs() > 0 promises a pretrain_loss the trainer can back-propagate; 0 means it is never
    called and says so when it is."""
    model = tiny_model(name).train()
    texts = make_texts(LENGTHS, LANGS)
    context = BatchContext(torch.tensor(CAPTION_IMAGE), texts.langs, progress=0.0)
    epochs = model.pretrain_epochs()
    assert epochs >= 0
    if epochs == 0:
        with pytest.raises(TypeError, match="has no pre-training"):
            model.pretrain_loss(model.encode_texts(texts), context)
        return
    loss = model.pretrain_loss(model.encode_texts(texts), context)
    assert loss.dim() == 0 and torch.isfinite(loss)
    loss.backward()  # type: ignore[no-untyped-call]
    gradients = [p.grad for p in model.parameters() if p.grad is not None]
    assert gradients and all(torch.isfinite(g).all() for g in gradients)
    assert any(g.abs().sum() > 0 for g in gradients)


@REGISTERED
def test_same_seed_builds_the_same_model(name: str) -> None:
    images, texts = make_images(IMAGE_MASKS), make_texts(LENGTHS, LANGS)
    first, second, other = tiny_model(name, seed=3), tiny_model(name, seed=3), tiny_model(name, seed=4)
    with torch.no_grad():
        expected = scores(first, images, texts)
        assert torch.equal(scores(second, images, texts), expected)
        # the seed reaches the initialisation (otherwise the equality above says nothing)
        assert not torch.equal(scores(other, images, texts), expected)
    second_state = second.state_dict()
    assert all(torch.equal(tensor, second_state[key]) for key, tensor in first.state_dict().items())


@REGISTERED
def test_gallery_cacheable_is_honest(name: str) -> None:
    """Search keeps a cacheable model's gallery as the bare ``vectors`` of image batches encoded separately and
    concatenated (retrieval.search.gallery_embeddings, no mask, no extras): that must score like one batch."""
    model = tiny_model(name)
    if not model.gallery_cacheable:
        pytest.skip(f"{name} does not claim gallery_cacheable")
    # two batches of different widths (5 and 3 region slots)
    first = make_images(IMAGE_MASKS, seed=5)
    second = make_images([[True, True, False], [True, True, True]], seed=6)
    padded = widen(second, 2)
    one_batch = ImageBatch(torch.cat([first.regions, padded.regions]), torch.cat([first.mask, padded.mask]))
    texts = make_texts(LENGTHS, LANGS)
    with torch.no_grad():
        text_embedded = model.encode_texts(texts)
        parts = [model.encode_images(first), model.encode_images(second)]
        assert all(part.mask is None for part in parts), "a cacheable gallery is one vector per image (no mask)"
        cached = Embedded(torch.cat([part.vectors for part in parts]))
        expected = model.similarity(model.encode_images(one_batch), text_embedded)
        found = model.similarity(cached, text_embedded)
    assert_same_scores(found, expected, "gallery encoded in two batches vs. one")


def rows(texts: TextBatch, start: int, stop: int) -> TextBatch:
    """Captions ``start:stop``, cut to the longest of them (a chunk as evaluation's text_batch builds it)."""
    width = int(texts.lengths[start:stop].max())
    return TextBatch(texts.tokens[start:stop, :width], texts.lengths[start:stop], texts.langs[start:stop])


@REGISTERED
def test_chunked_encoding_scores_like_one_batch(name: str) -> None:
    """Evaluation encodes images and captions in chunks and joins them with Embedded.cat, which pads set
    embeddings (SCAN) to the longest chunk: every model, cacheable or not, must score the same that way."""
    model = tiny_model(name)
    images, texts = make_images(IMAGE_MASKS), make_texts(LENGTHS, LANGS)
    with torch.no_grad():
        expected = scores(model, images, texts)
        image_parts = [model.encode_images(image(images, row)) for row in range(len(IMAGE_MASKS))]
        # chunks of different widths (3, 6 and 5 tokens), the narrow one first so that cat must pad it
        text_parts = [model.encode_texts(rows(texts, start, stop)) for start, stop in ((0, 1), (1, 4), (4, 7))]
        found = model.similarity(Embedded.cat(image_parts), Embedded.cat(text_parts))
    assert_same_scores(found, expected, "chunked encoding vs. one batch")
