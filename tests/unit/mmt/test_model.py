"""RegionalMMT (section 3.1): shapes, masks, the factorized attention, and a loop-by-loop reference of the equations."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from common.checks import SettingError
from mmt.model import MMTConfig, MMTShape, RegionalMMT, SourceBatch, source_batch

CPU = torch.device("cpu")


TINY = MMTConfig(emb_dim=16, hidden=24, dropout=0.0)
SHAPE = MMTShape(src_vocab=40, tgt_vocab=50, region_dim=12)


def tiny_model(config: MMTConfig = TINY, *, seed: int = 0) -> RegionalMMT:
    torch.manual_seed(seed)
    return RegionalMMT(config, SHAPE).eval()


def random_sentences(count: int, *, vocab: int, seed: int, lengths: tuple[int, int] = (2, 9)) -> list[list[int]]:
    """Sentences of random lengths over the non-special ids 4..vocab-1."""
    generator = torch.Generator().manual_seed(seed)
    sizes = torch.randint(lengths[0], lengths[1] + 1, (count,), generator=generator).tolist()
    return [torch.randint(4, vocab, (size,), generator=generator).tolist() for size in sizes]


def random_regions(valid: list[int], *, max_regions: int, dim: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, K, D) features and (B, K) mask with ``valid[b]`` valid regions; padded slots hold garbage, not zeros."""
    generator = torch.Generator().manual_seed(seed)
    features = torch.randn(len(valid), max_regions, dim, generator=generator).abs()
    mask = torch.arange(max_regions)[None] < torch.tensor(valid)[:, None]
    return features, mask


def reference_logits(
    model: RegionalMMT, src: list[int], tgt_in: list[int], regions: torch.Tensor | None = None
) -> torch.Tensor:
    """Section 3.1 for ONE unpadded sentence, thread by thread, straight from the equations (no masks, no packing).

    Text-only is one thread [x_1..x_N]; with (K, D) regions thread k is [v_k, x_1..x_N]. Returns (M, V) logits.
    """
    hidden, layers = model.config.hidden, model.config.layers
    words = model.src_embedding(torch.tensor(src))  # (N, E)
    if regions is None:
        threads = [words]
    else:
        z = [model.region_proj(F.normalize(v, dim=0)) for v in regions]
        if model.config.word_grounding:  # x~_j = e_j + W_w sum_k softmax_k(e_j^T W_u z_k) z_k, word by word
            grounded = []
            for e in words:
                weights = torch.softmax(torch.stack([model.region_ground(e) @ zk for zk in z]), dim=0)
                grounded.append(e + model.region_ground_out(sum(w * zk for w, zk in zip(weights, z, strict=True))))
            words = torch.stack(grounded)
        threads = [torch.cat([zk[None], words]) for zk in z]
    states = [model.encoder(thread[None])[0][0] for thread in threads]  # K x (T, 2H)
    projected = [thread[0] for thread in threads] if regions is not None else []  # z_k, the visual tokens
    last = torch.stack([torch.cat([s[-1, :hidden], s[0, hidden:]]) for s in states]).mean(dim=0)  # (2H,)
    h = list(torch.tanh(model.init_proj(last)).view(layers, hidden))
    c = [torch.zeros(hidden) for _ in range(layers)]
    feed = torch.zeros(hidden)
    logits = []
    for token in tgt_in:
        x = torch.cat([model.tgt_embedding(torch.tensor(token)), feed])
        for layer, cell in enumerate(model.decoder):
            new_h, new_c = cell(x[None], (h[layer][None], c[layer][None]))
            h[layer], c[layer] = new_h[0], new_c[0]
            x = h[layer]
        query = h[-1]
        a_k = torch.softmax(torch.stack([query @ model.thread_att(s.mean(dim=0)) for s in states]), dim=0)  # Eq. 3
        context = sum(a_k[k] * (torch.softmax(model.token_att(s) @ query, dim=0) @ s) for k, s in enumerate(states))
        combined = model.combine(torch.cat([context, query]))
        if model.config.region_context and projected:  # r_i = sum_k b_ik z_k, b_ik = softmax_k [c_i; h_i]^T W_g z_k
            asked = torch.cat([context, query])  # [c_i; h_i]
            b_k = torch.softmax(torch.stack([asked @ model.region_att(z) for z in projected]), dim=0)
            combined = combined + model.region_combine(sum(b_k[k] * z for k, z in enumerate(projected)))
        feed = torch.tanh(combined)  # Eq. 1
        logits.append(model.output(feed))  # Eq. 5
    return torch.stack(logits)


def teacher_inputs(count: int, *, seed: int) -> list[list[int]]:
    return [[SHAPE.bos_id, *ids] for ids in random_sentences(count, vocab=SHAPE.tgt_vocab, seed=seed, lengths=(1, 6))]


def padded_targets(targets: list[list[int]]) -> torch.Tensor:
    width = max(map(len, targets))
    return torch.tensor([ids + [SHAPE.pad_id] * (width - len(ids)) for ids in targets])


def test_shapes_of_encoder_attention_and_logits() -> None:
    model = tiny_model()
    src = random_sentences(3, vocab=SHAPE.src_vocab, seed=1)
    features, mask = random_regions([5, 2, 7], max_regions=7, dim=SHAPE.region_dim, seed=2)
    width = max(map(len, src))
    regional = model.encode(source_batch(src, pad_id=0, device=CPU, regions=features, region_mask=mask))
    assert regional.states.shape == (3, 7, width + 1, 2 * TINY.hidden)
    assert regional.token_keys.shape == (3, 7, width + 1, TINY.hidden)
    assert regional.thread_keys.shape == (3, 7, TINY.hidden)
    assert regional.init.shape == (1, 3, TINY.hidden)
    context, weights = model.attend(regional, torch.randn(3, 4, TINY.hidden))
    assert context.shape == (3, 4, 2 * TINY.hidden) and weights.shape == (3, 4, 7, width + 1)
    text_only = model.encode(source_batch(src, pad_id=0, device=CPU))
    assert text_only.states.shape == (3, 1, width, 2 * TINY.hidden)
    tgt_in = padded_targets(teacher_inputs(3, seed=3))
    logits = model(source_batch(src, pad_id=0, device=CPU), tgt_in)
    assert logits.shape == (*tgt_in.shape, SHAPE.tgt_vocab)


def with_live_region_context(model: RegionalMMT) -> RegionalMMT:
    """W_v and W_w start at zero (the region context and the word grounding then add nothing): give them weights so
    that tests can see them."""
    with torch.no_grad():
        for name in ("region_combine", "region_ground_out"):
            if hasattr(model, name):
                weight = getattr(model, name).weight
                weight.copy_(torch.randn(weight.shape) * 0.5)
    return model


@pytest.mark.parametrize(
    ("layers", "region_context", "word_grounding"),
    [(1, False, False), (2, False, False), (1, True, False), (2, True, False), (1, False, True), (2, True, True)],
)
@pytest.mark.parametrize("with_regions", [False, True])
def test_batched_model_matches_the_equations_written_thread_by_thread(
    layers: int, region_context: bool, word_grounding: bool, with_regions: bool
) -> None:
    """Text-only = ONE thread without visual token; regional = K threads [v_k, x]; padding of both is masked; the
    region context adds W_v sum_k b_ik z_k to Eq. 1 and the word grounding W_w g_j to each word (with regions only)."""
    config = MMTConfig(
        emb_dim=16, hidden=24, dropout=0.0, layers=layers, region_context=region_context, word_grounding=word_grounding
    )
    model = tiny_model(config, seed=4)
    with_live_region_context(model)
    src = random_sentences(4, vocab=SHAPE.src_vocab, seed=5)
    targets = teacher_inputs(4, seed=6)
    valid = [3, 1, 6, 4]
    features, mask = random_regions(valid, max_regions=6, dim=SHAPE.region_dim, seed=7)
    batch = (
        source_batch(src, pad_id=0, device=CPU, regions=features, region_mask=mask)
        if with_regions
        else source_batch(src, pad_id=0, device=CPU)
    )
    with torch.no_grad():
        logits = model(batch, padded_targets(targets))
        for row, (ids, tgt) in enumerate(zip(src, targets, strict=True)):
            regions = features[row, : valid[row]] if with_regions else None
            expected = reference_logits(model, ids, tgt, regions)
            torch.testing.assert_close(logits[row, : len(tgt)], expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("with_regions", [False, True])
def test_extra_token_padding_does_not_change_outputs(with_regions: bool) -> None:
    model = tiny_model()
    src = random_sentences(3, vocab=SHAPE.src_vocab, seed=8)
    features, mask = random_regions([4, 4, 2], max_regions=4, dim=SHAPE.region_dim, seed=9)
    extra = [ids + [SHAPE.pad_id] * 5 for ids in src]
    tgt_in = padded_targets(teacher_inputs(3, seed=10))

    def batch(sentences: list[list[int]]) -> SourceBatch:
        if with_regions:
            return source_batch(sentences, pad_id=0, device=CPU, regions=features, region_mask=mask)
        return source_batch(sentences, pad_id=0, device=CPU)

    with torch.no_grad():
        plain, padded = model(batch(src), tgt_in), model(batch(extra), tgt_in)
        alone = model(_row(batch(src), 0, len(src[0])), tgt_in[:1])  # the first sentence without any padding
    torch.testing.assert_close(padded, plain, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(alone, plain[:1], atol=1e-5, rtol=1e-5)


def _row(batch: SourceBatch, row: int, length: int) -> SourceBatch:
    """Sentence ``row`` alone, without any padding."""
    if batch.regions is None or batch.region_mask is None:
        return SourceBatch(batch.src[row : row + 1, :length])
    return SourceBatch(
        batch.src[row : row + 1, :length], batch.regions[row : row + 1], batch.region_mask[row : row + 1]
    )


@pytest.mark.parametrize(("region_context", "word_grounding"), [(False, False), (True, False), (False, True)])
def test_padded_regions_do_not_change_outputs(region_context: bool, word_grounding: bool) -> None:
    config = MMTConfig(emb_dim=16, hidden=24, dropout=0.0, region_context=region_context, word_grounding=word_grounding)
    model = with_live_region_context(tiny_model(config))
    src = random_sentences(2, vocab=SHAPE.src_vocab, seed=11)
    features, _ = random_regions([3, 3], max_regions=3, dim=SHAPE.region_dim, seed=12)
    tgt_in = padded_targets(teacher_inputs(2, seed=13))
    garbage = torch.randn(2, 5, SHAPE.region_dim) * 10  # padded slots with large non-zero values
    padded = torch.cat([features, garbage], dim=1)  # (2, 8, D): 3 valid regions, 5 padded
    padded_mask = torch.arange(8)[None].expand(2, -1) < 3
    with torch.no_grad():
        plain = model(
            source_batch(src, pad_id=0, device=CPU, regions=features, region_mask=torch.ones(2, 3).bool()), tgt_in
        )
        more = model(source_batch(src, pad_id=0, device=CPU, regions=padded, region_mask=padded_mask), tgt_in)
    torch.testing.assert_close(more, plain, atol=1e-5, rtol=1e-5)


def test_attention_sums_to_one_over_tokens_and_threads_and_is_zero_on_padding() -> None:
    model = tiny_model()
    src = [[5, 6, 7, 8, 9], [10, 11]]
    features, mask = random_regions([4, 2], max_regions=4, dim=SHAPE.region_dim, seed=14)
    encoded = model.encode(source_batch(src, pad_id=0, device=CPU, regions=features, region_mask=mask))
    _, weights = model.attend(encoded, torch.randn(2, 3, TINY.hidden))  # (B, R, K, T)
    torch.testing.assert_close(weights.sum(dim=(-1, -2)), torch.ones(2, 3))
    assert torch.all(weights[1, :, 2:] == 0)  # padded regions of image 2
    assert torch.all(weights[1, :, :, 3:] == 0)  # tokens past [v_k, x_1, x_2]
    assert torch.all(weights[0] > 0) and torch.all(weights[1, :, :2, :3] > 0)
    text_only = model.encode(source_batch(src, pad_id=0, device=CPU))
    _, weights = model.attend(text_only, torch.randn(2, 3, TINY.hidden))
    torch.testing.assert_close(weights.sum(dim=(-1, -2)), torch.ones(2, 3))
    assert weights.shape[2] == 1 and torch.all(weights[1, :, :, 2:] == 0)


def test_identical_regions_equal_a_single_region() -> None:
    """a_ik is uniform over identical threads and the mean of identical last states is one of them."""
    model = tiny_model()
    src = random_sentences(2, vocab=SHAPE.src_vocab, seed=15)
    features, _ = random_regions([1, 1], max_regions=1, dim=SHAPE.region_dim, seed=16)
    tgt_in = padded_targets(teacher_inputs(2, seed=17))
    with torch.no_grad():
        one = model(
            source_batch(src, pad_id=0, device=CPU, regions=features, region_mask=torch.ones(2, 1).bool()), tgt_in
        )
        many = features.expand(-1, 5, -1)
        five = model(source_batch(src, pad_id=0, device=CPU, regions=many, region_mask=torch.ones(2, 5).bool()), tgt_in)
    torch.testing.assert_close(five, one, atol=1e-5, rtol=1e-5)


def test_regions_matter_and_are_l2_normalised() -> None:
    model = tiny_model()
    src = random_sentences(2, vocab=SHAPE.src_vocab, seed=18)
    features, mask = random_regions([3, 2], max_regions=3, dim=SHAPE.region_dim, seed=19)
    other, _ = random_regions([3, 2], max_regions=3, dim=SHAPE.region_dim, seed=20)
    tgt_in = padded_targets(teacher_inputs(2, seed=21))
    with torch.no_grad():
        base = model(source_batch(src, pad_id=0, device=CPU, regions=features, region_mask=mask), tgt_in)
        scaled = model(source_batch(src, pad_id=0, device=CPU, regions=features * 7.0, region_mask=mask), tgt_in)
        changed = model(source_batch(src, pad_id=0, device=CPU, regions=other, region_mask=mask), tgt_in)
        text = model(source_batch(src, pad_id=0, device=CPU), tgt_in)
    torch.testing.assert_close(scaled, base, atol=1e-5, rtol=1e-5)
    assert (changed - base).abs().max() > 1e-3
    assert (text - base).abs().max() > 1e-3


def extended_from_printed(
    config: MMTConfig, *, seed: int
) -> tuple[RegionalMMT, SourceBatch, torch.Tensor, torch.Tensor]:
    """A model with an extension (``config``) holding a printed model's weights, after checking that it computes what
    the printed one does while the extension's output weights are at their initial zero; with a batch of two
    sentences (3 and 1 valid regions), its (B, K, D) features and (B, K) mask."""
    printed = tiny_model(seed=seed)
    extended = tiny_model(config, seed=seed)
    extended.load_state_dict(printed.state_dict(), strict=False)
    src = random_sentences(2, vocab=SHAPE.src_vocab, seed=seed + 1)
    features, mask = random_regions([3, 1], max_regions=3, dim=SHAPE.region_dim, seed=seed + 2)
    batch = source_batch(src, pad_id=0, device=CPU, regions=features, region_mask=mask)
    tgt_in = padded_targets(teacher_inputs(2, seed=seed + 3))
    with torch.no_grad():
        torch.testing.assert_close(extended(batch, tgt_in), printed(batch, tgt_in))
    return extended, batch, features, mask


def test_region_context_starts_as_the_printed_model_and_its_weights_sum_to_one() -> None:
    """With W_v at its initial zero the model computes Eq. 1 as printed (a fine-tuning starts from the pre-trained
    behaviour); b_ik sums to one over the valid regions and is zero on padded ones."""
    config = MMTConfig(emb_dim=16, hidden=24, dropout=0.0, region_context=True)
    extended, batch, _, _ = extended_from_printed(config, seed=30)
    assert not extended.region_combine.weight.any()
    with torch.no_grad():
        _, weights = extended.attend_regions(extended.encode(batch), torch.randn(2, 4, 3 * TINY.hidden))
    torch.testing.assert_close(weights.sum(dim=-1), torch.ones(2, 4))
    assert torch.all(weights[1, :, 1:] == 0) and torch.all(weights[0] > 0)
    text_only = SourceBatch(batch.src, None, None)
    assert extended.encode(text_only).regions is None  # text-only: no region context


def test_word_grounding_starts_as_the_model_without_it_and_reads_the_regions_its_words_point_at() -> None:
    """With W_w at its initial zero the encoder reads the plain embeddings; g_j is a convex mix of the valid z_k."""
    config = MMTConfig(emb_dim=16, hidden=24, dropout=0.0, word_grounding=True)
    grounded, batch, features, mask = extended_from_printed(config, seed=34)
    assert not grounded.region_ground_out.weight.any()
    with torch.no_grad():
        z = grounded.region_proj(F.normalize(features, dim=-1))  # (B, K, E)
        read = grounded.ground_words(grounded.src_embedding(batch.src), z, mask)  # (B, N, E)
    torch.testing.assert_close(read[1], z[1, 0].expand_as(read[1]))  # one valid region: every word reads it
    scores = grounded.region_ground(grounded.src_embedding(batch.src[0])) @ z[0].T  # (N, K)
    torch.testing.assert_close(read[0], torch.softmax(scores, dim=-1) @ z[0])


def test_float16_regions_are_accepted() -> None:
    model = tiny_model()
    features, mask = random_regions([2], max_regions=2, dim=SHAPE.region_dim, seed=22)
    batch = source_batch([[5, 6]], pad_id=0, device=CPU, regions=features.half().numpy(), region_mask=mask.numpy())
    assert model(batch, torch.tensor([[2, 7]])).dtype == torch.float32


def test_gradients_reach_the_visual_projection_only_with_regions() -> None:
    model = tiny_model()
    src = random_sentences(2, vocab=SHAPE.src_vocab, seed=23)
    features, mask = random_regions([2, 1], max_regions=2, dim=SHAPE.region_dim, seed=24)
    tgt_in = padded_targets(teacher_inputs(2, seed=25))
    model(source_batch(src, pad_id=0, device=CPU), tgt_in).sum().backward()
    assert model.region_proj.weight.grad is None
    model(source_batch(src, pad_id=0, device=CPU, regions=features, region_mask=mask), tgt_in).sum().backward()
    assert model.region_proj.weight.grad is not None and model.region_proj.weight.grad.abs().sum() > 0


def test_empty_image_and_empty_text_only_sentence_are_rejected() -> None:
    model = tiny_model()
    features, _ = random_regions([2, 2], max_regions=2, dim=SHAPE.region_dim, seed=26)
    mask = torch.tensor([[True, True], [False, False]])
    with pytest.raises(ValueError, match="at least one valid region"):
        model.encode(source_batch([[5], [6]], pad_id=0, device=CPU, regions=features, region_mask=mask))
    with pytest.raises(ValueError, match="empty source"):
        model.encode(source_batch([[5], []], pad_id=0, device=CPU))
    # With regions an empty sentence is the single visual token of each thread.
    encoded = model.encode(
        source_batch([[5], []], pad_id=0, device=CPU, regions=features, region_mask=torch.ones(2, 2).bool())
    )
    assert encoded.token_mask.tolist() == [[True, True], [True, False]]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"dropout": 1.0}, r"dropout: got 1\.0, allowed: 0 <= dropout < 1"),
        ({"layers": 0}, r"layers: got 0"),
        ({"hidden": 2}, r"hidden: got 2, allowed: 4 to"),
    ],
)
def test_invalid_configs_are_rejected(changes: dict[str, float], message: str) -> None:
    with pytest.raises(SettingError, match=message):
        MMTConfig(**changes)  # type: ignore[arg-type]


@pytest.mark.parametrize("changes", [{"src_vocab": 0}, {"bos_id": 0}, {"eos_id": 50}, {"max_len": 0}])
def test_invalid_shapes_are_rejected(changes: dict[str, int]) -> None:
    fields = {"src_vocab": 40, "tgt_vocab": 50, **changes}
    with pytest.raises(ValueError, match="MMTShape"):
        MMTShape(**fields)
