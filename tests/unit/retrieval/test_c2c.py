"""Kádár et al.'s caption-caption (c2c) step by its values: one step on a hand-built batch against the loss and
gradient worked out by hand, and a real text encoder's gradient reaching both languages' words."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch
from torch import nn

from retrieval.data import Caption, CaptionSet, encode_captions
from retrieval.encoders import WordEmbedding
from retrieval.model import Embedded, ImageBatch, RetrievalModel, TextBatch
from retrieval.train import TrainConfig, _c2c_step, _cross_lingual_pairs
from retrieval.vocab import Vocabulary
from retrieval.zoo.registry import build_model, make_config

CPU = torch.device("cpu")
MARGIN = 0.2
# One English and one German caption per image, one word each; each word's embedding is set by hand.
ENGLISH = {"circle": (1.0, 0.0), "square": (0.0, 1.0), "star": (0.6, 0.8)}  # a0, a1, a2
GERMAN = {"kreis": (0.9, 0.1), "quadrat": (0.1, 0.9), "stern": (0.4, 0.6)}  # b0, b1, b2


class WordLookup(RetrievalModel):
    """A caption is the vector of its first word (hand-set): scores are plain dot products."""

    name = "lookup"

    def __init__(self, vectors: torch.Tensor) -> None:
        super().__init__()
        self.table = nn.Embedding.from_pretrained(vectors, freeze=False)

    def encode_images(self, images: ImageBatch) -> Embedded:
        raise AssertionError("a caption-caption step encodes no image")

    def encode_texts(self, texts: TextBatch) -> Embedded:
        return Embedded(self.table(texts.tokens[:, 0]))


def caption_set(english: list[str], german: list[str]) -> tuple[CaptionSet, Vocabulary]:
    captions = [Caption(f"i{n}#en", f"i{n}", "en", word, "human") for n, word in enumerate(english)]
    captions += [Caption(f"i{n}#de", f"i{n}", "de", word, "human") for n, word in enumerate(german)]
    vocab = Vocabulary.build(((c.lang, c.text) for c in captions), ["en", "de"], min_count=1)
    rows = {f"i{n}": n for n in range(len(english))}
    return encode_captions(captions, vocab, rows, max_len=8, source="hand-built"), vocab


def hand_model() -> tuple[WordLookup, CaptionSet, Vocabulary]:
    train, vocab = caption_set(list(ENGLISH), list(GERMAN))
    vectors = torch.zeros(len(vocab), 2)
    for lang, words in (("en", ENGLISH), ("de", GERMAN)):
        for word, vector in words.items():
            vectors[vocab.words_of(lang)[word]] = torch.tensor(vector)
    return WordLookup(vectors), train, vocab


def one_step(model: RetrievalModel, train: CaptionSet, seed: int, *, margin: float = MARGIN) -> float:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # the gradient is read, the weights stay
    config = TrainConfig(batch_size=8, clip=0.0)  # no clipping: the gradient is the loss's own
    rng = np.random.default_rng(seed)
    pairs = _cross_lingual_pairs(train)
    return _c2c_step(model, train, pairs, optimizer, config, CPU, contextlib.nullcontext, rng, margin, where="test")


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_c2c_loss_and_gradient_of_a_hand_built_batch(seed: int) -> None:
    """Positives: the two captions of one image (English anchor a_i, German partner b_i). Negatives, as in the
    paper's max-of-hinges: per pair, the hardest caption of the other language among the batch's other images,
    in both directions. S[i, j] = a_i . b_j:

            b0    b1    b2
        a0  0.90  0.10  0.40
        a1  0.10  0.90  0.60
        a2  0.62  0.78  0.72

    partner b_j vs the hardest other anchor: b0 [0.2 - 0.90 + 0.62]+ = 0;    b1 [0.2 - 0.90 + 0.78]+ = 0.08;
                                             b2 [0.2 - 0.72 + 0.60]+ = 0.08
    anchor a_i vs the hardest other partner: a0 [0.2 - 0.90 + 0.40]+ = 0;    a1 [0.2 - 0.90 + 0.60]+ = 0;
                                             a2 [0.2 - 0.72 + 0.78]+ = 0.26
    loss = 0.42. Same-language captions are never compared (a0 . a2 = 0.6 would be a violation). Every seed
    draws the pairs in another order and gives the same loss: the anchor is always the English caption.

    The three active hinges are 0.2 - a1.b1 + a2.b1, 0.2 - a2.b2 + a1.b2 and 0.2 - a2.b2 + a2.b1, so
    d/da1 = b2 - b1, d/da2 = 2 (b1 - b2), d/db1 = 2 a2 - a1, d/db2 = a1 - 2 a2, and a0, b0 get none.
    """
    model, train, vocab = hand_model()
    assert one_step(model, train, seed) == pytest.approx(0.42, abs=1e-6)
    gradient = model.table.weight.grad
    assert gradient is not None
    a = {word: torch.tensor(vector) for word, vector in ENGLISH.items()}
    b = {word: torch.tensor(vector) for word, vector in GERMAN.items()}
    expected = {
        ("en", "circle"): torch.zeros(2),
        ("en", "square"): b["stern"] - b["quadrat"],
        ("en", "star"): 2 * (b["quadrat"] - b["stern"]),
        ("de", "kreis"): torch.zeros(2),
        ("de", "quadrat"): 2 * a["star"] - a["square"],
        ("de", "stern"): a["square"] - 2 * a["star"],
    }
    for (lang, word), value in expected.items():
        found = gradient[vocab.words_of(lang)[word]]
        torch.testing.assert_close(found, value, atol=1e-6, rtol=0, msg=f"gradient of {lang}:{word}")


def test_the_margin_enters_each_active_hinge() -> None:
    model, train, _ = hand_model()
    # margin 0.5: b0 0.22, b1 0.38, b2 0.38; a0 0, a1 0.2, a2 0.56
    assert one_step(model, train, 0, margin=0.5) == pytest.approx(0.22 + 0.38 + 0.38 + 0.2 + 0.56, abs=1e-6)


def test_a_c2c_step_trains_both_languages_text_encoder() -> None:
    """VSE++ (the model closest to Kádár et al.'s): the word vectors of both languages and the shared GRU move."""
    english = ["a red circle", "a blue square", "a green star", "a white ring"]
    german = ["ein roter kreis", "ein blaues quadrat", "ein grüner stern", "ein weißer ring"]
    train, vocab = caption_set(english, german)
    torch.manual_seed(0)
    model = build_model(
        "vsepp", make_config("vsepp", {"word_dim": 8, "hidden": 8}), vocab_size=len(vocab), languages=2, region_dim=4
    )
    assert one_step(model, train, 0, margin=1.0) > 0
    (table,) = [module for module in model.modules() if isinstance(module, WordEmbedding)]
    assert table.weight.grad is not None
    for lang in ("en", "de"):
        rows = list(vocab.words_of(lang).values())
        assert bool(table.weight.grad[rows].abs().sum(dim=1).gt(0).all()), f"every {lang} word gets a gradient"
    recurrent = [p for name, p in model.named_parameters() if name.startswith("text_encoder.rnn.")]
    assert recurrent and all(p.grad is not None and p.grad.abs().sum() > 0 for p in recurrent)
    assert all(p.grad is None for name, p in model.named_parameters() if name.startswith("image_projection."))
