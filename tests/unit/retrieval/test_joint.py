"""Huang et al. 2019's joint objective (Eq. 4: gamma * l(G, E) beside the image-text terms) and Adam's weight decay:
values against hand computations, the term in a training step, gradients into both languages' text heads."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from retrieval.data import BalancedSampler, CaptionSet, encode_captions, image_batch, images_of, text_batch
from retrieval.joint import CaptionPartners, JointTextRanking, text_ranking_loss
from retrieval.losses import RankingLoss
from retrieval.model import BatchContext, Embedded, ImageBatch, RetrievalModel, TextBatch
from retrieval.train import TrainConfig, adam, fit
from retrieval.vocab import Vocabulary
from retrieval.zoo.multihead import MultiHeadConfig, MultiHeadDiversity
from tests.unit.retrieval.test_data_train import toy_data

EN, DE = 0, 1


class Lookup(RetrievalModel):
    """Caption i (its one token) is row i of a fixed table: the scores are the table's dot products."""

    name = "lookup"

    def __init__(self, table: list[list[float]]) -> None:
        super().__init__()
        self.table = nn.Embedding.from_pretrained(torch.tensor(table), freeze=False)

    def encode_images(self, images: ImageBatch) -> Embedded:
        raise NotImplementedError

    def encode_texts(self, texts: TextBatch) -> Embedded:
        return Embedded(self.table(texts.tokens[:, 0]))


def hand_built_captions(images: list[int], langs: list[int]) -> CaptionSet:
    """Caption i shows image ``images[i]`` in language ``langs[i]``; its one token is i."""
    count = len(images)
    return CaptionSet(
        caption_ids=tuple(f"c{i}" for i in range(count)),
        image_ids=tuple(f"i{row}" for row in images),
        tokens=tuple(np.array([i]) for i in range(count)),
        image_rows=np.array(images),
        langs=np.array(langs),
        types=np.array(langs),
        type_names=("en-human", "de-human"),
        synthetic=np.zeros(count, dtype=bool),
    )


def test_text_ranking_loss_is_eq3_with_captions_on_both_sides() -> None:
    # s(g_p, e_q): rows the G side, columns the E side; pairs 0 and 1 show image 7, pair 2 image 8
    sims = torch.tensor([[0.8, 0.9, 0.3], [0.1, 0.5, 0.6], [0.4, 0.2, 0.7]])
    images = torch.tensor([7, 7, 8])
    # pair 0: its hardest other-image E is 0.3, its hardest G for e_0 is 0.4 (0.9 and 0.1 are the same image)
    rows = [max(0.0, 0.2 - 0.8 + 0.3), max(0.0, 0.2 - 0.5 + 0.6), max(0.0, 0.2 - 0.7 + 0.4)]
    columns = [max(0.0, 0.2 - 0.8 + 0.4), max(0.0, 0.2 - 0.5 + 0.2), max(0.0, 0.2 - 0.7 + 0.6)]
    assert float(text_ranking_loss(sims, images, 0.2)) == pytest.approx(sum(rows) + sum(columns))
    assert float(text_ranking_loss(sims[:2, :2], images[:2], 0.2)) == 0.0  # one image: no negative at all


def test_the_joint_term_on_a_hand_built_batch_is_gamma_times_the_hand_computed_hinges() -> None:
    # images 0, 1, 2 have an English and a German caption, image 3 an English one only
    captions = hand_built_captions([0, 0, 1, 1, 2, 2, 3], [EN, DE, EN, DE, EN, DE, EN])
    e0, d0, e1, d1, e2, d2 = [1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [0.6, 0.8], [0.6, 0.8], [0.0, 1.0]
    model = Lookup([e0, d0, e1, d1, e2, d2, [0.5, 0.5]])
    batch = np.array([0, 3, 4, 6])  # e0, d1 (a German anchor: partner e1), e2, and the partnerless English caption 6
    texts = model.encode_texts(text_batch(captions, batch))
    rng = np.random.default_rng(0)
    joint = JointTextRanking(0.6, 0.2, CaptionPartners.of(captions), captions, rng)
    kept, partners = joint.partners.draw(batch, captions, np.random.default_rng(0))
    assert kept.tolist() == [0, 1, 2] and partners.tolist() == [1, 2, 5]
    # s(e_p, d_q) = [[.8, .6, 0], [.6, .8, 1], [.96, 1, .8]]
    rows = [0.2 - 0.8 + 0.6, 0.2 - 0.8 + 1.0, 0.2 - 0.8 + 1.0]  # e_p against its hardest other German caption
    columns = [0.2 - 0.8 + 0.96, 0.2 - 0.8 + 1.0, 0.2 - 0.8 + 1.0]  # d_q against its hardest other English one
    expected = 0.6 * sum(max(0.0, value) for value in rows + columns)
    loss = joint.loss(model, batch, texts, torch.device("cpu"))
    assert float(loss.detach()) == pytest.approx(expected) and expected == pytest.approx(1.176)
    loss.backward()  # type: ignore[no-untyped-call]
    gradient = model.table.weight.grad
    assert gradient is not None
    # partners (rows 1, 2, 5) and batch captions of both languages (3, 4) in an active hinge; caption 6 has no pair
    assert all(bool(gradient[row].abs().sum() > 0) for row in range(1, 6)) and not bool(gradient[6].any())


def test_a_training_set_without_cross_lingual_captions_is_refused() -> None:
    with pytest.raises(ValueError, match="needs images with captions in two or more languages"):
        CaptionPartners.of(hand_built_captions([0, 1], [EN, EN]))


def test_gradients_of_the_term_reach_both_languages_text_heads() -> None:
    config = MultiHeadConfig(word_dim=8, hidden=8, attention_dim=8, context_dim=8, text_ranking_weight=0.6)
    model = MultiHeadDiversity(config, vocab_size=len(captions_vocab()), languages=2, region_dim=8)
    train = toy_captions()
    batch = np.arange(len(train))
    texts = model.encode_texts(text_batch(train, batch))
    joint = JointTextRanking.for_fit(model, train, 0.2, np.random.default_rng(0))
    assert joint is not None
    joint.loss(model, batch, texts, torch.device("cpu")).backward()  # type: ignore[no-untyped-call]
    for lang in (EN, DE):
        heads = model.text_attention[lang]
        assert all(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in heads.parameters()), lang
    assert all(p.grad is None for p in model.image_attention.parameters())


def captions_vocab() -> Vocabulary:
    captions, _ = toy_data()
    return Vocabulary.build(((c.lang, c.text) for c in captions), ["en", "de"], min_count=1)


def toy_captions() -> CaptionSet:
    captions, _ = toy_data()
    return encode_captions(captions, captions_vocab(), {f"i{i}": i for i in range(16)}, max_len=20, source="train")


def first_step_loss(gamma: float) -> tuple[float, float, float]:
    """The first step's loss of a fit of multihead at ``gamma``, and today's loss (image-text ranking + diversity) and
    gamma * l(G, E) of that batch, computed beside it from the same initial weights."""
    _, regions = toy_data()
    train = toy_captions()
    config = MultiHeadConfig(word_dim=8, hidden=8, attention_dim=8, context_dim=8, text_ranking_weight=gamma)
    torch.manual_seed(3)
    model = MultiHeadDiversity(config, vocab_size=len(captions_vocab()), languages=2, region_dim=8)
    initial = {key: value.clone() for key, value in model.state_dict().items()}
    loss, weights = RankingLoss("max_violation"), torch.full((len(train.type_names),), 0.5)
    schedule = TrainConfig(epochs=1, batch_size=12, lr=0.01, max_steps=1)
    validation = {"en": train.subset(np.flatnonzero(train.langs == EN))}
    result = fit(
        model,
        train,
        validation,
        regions,
        loss=loss,
        type_weights=weights,
        config=schedule,
        seed=0,
        device=torch.device("cpu"),
    )
    model.load_state_dict(initial)
    indices = BalancedSampler(train.synthetic, 12, 0.5, 0).batches(0)[0]
    rows, caption_image = images_of(train.image_rows[indices])
    images = model.encode_images(image_batch(regions, rows))
    texts = model.encode_texts(text_batch(train, indices))
    caption_index = torch.from_numpy(caption_image)
    today = loss(model.similarity(images, texts), caption_index, torch.from_numpy(train.types[indices]), weights)
    context = BatchContext(caption_index, torch.from_numpy(train.langs[indices]), 0.0)
    today = today + sum(model.extra_losses(images, texts, context).values())
    rng = np.random.default_rng([0, 1])  # the fit's generator: the partners are its first draws
    joint = JointTextRanking(gamma, loss.margin, CaptionPartners.of(train), train, rng)
    term = joint.loss(model, indices, texts, torch.device("cpu"))
    logged = result.history[0]["loss"]
    assert isinstance(logged, float)
    return logged, float(today), float(term)


def test_a_step_adds_gamma_times_the_text_term_and_at_weight_0_is_todays_loss() -> None:
    logged, today, _ = first_step_loss(0.0)
    assert logged == pytest.approx(today, rel=1e-6)
    logged, today, term = first_step_loss(0.6)
    assert term > 0 and logged == pytest.approx(today + term, rel=1e-6)


def test_weight_decay_is_adams_l2_penalty_step_by_step() -> None:
    """Two Adam steps on loss = c . w with decay 0.5, written out: g = c + 0.5 w, then the moments (not AdamW)."""
    model = nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[1.0, -2.0]]))
    optimizer = adam(model, TrainConfig(lr=0.1, weight_decay=0.5))
    c = torch.tensor([[0.5, 0.25]])
    w, m, v = model.weight.detach().clone(), torch.zeros(1, 2), torch.zeros(1, 2)
    for step in (1, 2):
        optimizer.zero_grad()
        (model.weight * c).sum().backward()  # type: ignore[no-untyped-call]
        optimizer.step()
        g = c + 0.5 * w
        m, v = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g * g
        w = w - 0.1 * (m / (1 - 0.9**step)) / ((v / (1 - 0.999**step)).sqrt() + 1e-8)
        assert torch.allclose(model.weight.detach(), w, atol=1e-7), step
    # the penalty turns the second weight's gradient (0.25 - 0.5 * 2): it climbs, by about lr a step
    assert torch.allclose(w, torch.tensor([[0.8, -1.8]]), atol=1e-3)
