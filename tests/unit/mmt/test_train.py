"""Training (fit), batching, checkpoints and loading pre-trained weights for fine-tuning."""

from __future__ import annotations

import contextlib
import copy
import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from common.epoch_log import EpochLine, format_epoch
from common.errors import InputError
from mmt.beam import beam_search, greedy_decode
from mmt.checkpoint import load_mmt, load_pretrained_into, save_mmt
from mmt.model import MMTConfig, MMTShape, RegionalMMT, source_batch
from mmt.train import Example, TrainConfig, adam, check_examples, collate, fit, length_batches, parameter_groups
from tests.unit.mmt.test_model import random_regions, random_sentences

CPU = torch.device("cpu")
CONFIG = MMTConfig(emb_dim=16, hidden=32, dropout=0.0)
SHAPE = MMTShape(src_vocab=30, tgt_vocab=30, region_dim=8)
EOS = SHAPE.eos_id


def no_autocast() -> contextlib.AbstractContextManager[object]:
    return contextlib.nullcontext()


class ArrayRegions:
    """A RegionLookup over in-memory arrays (the FeatureStore's ``batch`` contract)."""

    def __init__(self, features: np.ndarray, mask: np.ndarray) -> None:
        self.features, self.mask = features, mask

    def batch(self, rows: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        wanted = np.asarray(rows)
        boxes = np.zeros((*self.mask[wanted].shape, 4), dtype=np.float32)
        return self.features[wanted].astype(np.float16), self.mask[wanted], boxes


def new_model(config: MMTConfig = CONFIG, seed: int = 0, shape: MMTShape = SHAPE) -> RegionalMMT:
    torch.manual_seed(seed)
    return RegionalMMT(config, shape)


def toy_pairs() -> list[Example]:
    """8 pairs: the target is the source mapped token by token (id -> id + 5), reversed, then EOS."""
    sources = random_sentences(8, vocab=24, seed=0, lengths=(2, 6))
    return [Example(tuple(ids), (*[token + 5 for token in reversed(ids)], EOS)) for ids in sources]


def exact_matches(examples: Sequence[Example], regions: ArrayRegions | None = None) -> Callable[[RegionalMMT], float]:
    """Share of examples whose greedy translation is the target (the test's stand-in for validation BLEU)."""

    def score(model: RegionalMMT) -> float:
        features = mask = None
        if regions is not None:
            features, mask, _ = regions.batch(np.array([example.image_row for example in examples]))
        batch = source_batch(
            [example.src_ids for example in examples], pad_id=0, device=CPU, regions=features, region_mask=mask
        )
        found = greedy_decode(model, batch, max_len=12)
        return float(np.mean([list(example.tgt_ids[:-1]) == ids for example, ids in zip(examples, found, strict=True)]))

    return score


def test_a_tiny_model_overfits_eight_pairs(tmp_path: Path) -> None:
    train = toy_pairs()
    model = new_model()
    losses: list[float] = []
    config = TrainConfig(epochs=150, batch_size=4, lr=1e-2, patience=1000, eval_every=0)
    result = fit(
        model,
        train,
        regions=None,
        evaluate=exact_matches(train),
        config=config,
        seed=1,
        device=CPU,
        autocast=no_autocast,
        checkpoint_path=tmp_path / "mmt",
        progress=lambda report: losses.append(report["loss"]),
    )
    assert losses[0] > 2.5 and min(losses[-10:]) < 0.05
    assert result.best_score == 1.0
    found = greedy_decode(model, source_batch([e.src_ids for e in train], pad_id=0, device=CPU), max_len=12)
    assert found == [list(example.tgt_ids[:-1]) for example in train]


@pytest.mark.parametrize(("region_context", "word_grounding"), [(False, False), (True, False), (True, True)])
def test_regions_decide_the_translation_when_the_source_does_not(
    tmp_path: Path, region_context: bool, word_grounding: bool
) -> None:
    """Same source sentence, 4 images: only the visual threads (and the region context) can tell which target word
    is meant."""
    generator = np.random.default_rng(0)
    features = generator.normal(size=(4, 3, SHAPE.region_dim)).astype(np.float32)
    regions = ArrayRegions(
        features, np.array([[True, True, True], [True, True, False], [True] * 3, [True, False, False]])
    )
    train = [Example((7, 8, 9), (10 + row, 20, EOS), image_row=row) for row in range(4)]
    model = new_model(replace(CONFIG, region_context=region_context, word_grounding=word_grounding))
    result = fit(
        model,
        train,
        regions=regions,
        evaluate=exact_matches(train, regions),
        config=TrainConfig(epochs=120, batch_size=4, lr=1e-2, patience=1000),
        seed=0,
        device=CPU,
        autocast=no_autocast,
        checkpoint_path=tmp_path / "mmt",
        progress=None,
    )
    assert result.best_score == 1.0


def test_two_fits_with_the_same_seed_give_identical_weights(tmp_path: Path) -> None:
    train = [
        Example(example.src_ids, example.tgt_ids, image_row=row % 3) for row, example in enumerate(toy_pairs() * 2)
    ]
    features, mask = random_regions([3, 1, 2], max_regions=3, dim=SHAPE.region_dim, seed=1)
    regions = ArrayRegions(features.numpy(), mask.numpy())
    config = TrainConfig(epochs=3, batch_size=3, sort_chunk=2, eval_every=4)
    dropout = replace(CONFIG, dropout=0.3)
    weights = []
    for run, seed in enumerate((7, 7, 8)):
        model = new_model(dropout)
        torch.manual_seed(100 + run)  # fit must seed dropout itself
        fit(
            model,
            train,
            regions=regions,
            evaluate=lambda model: 0.0,
            config=config,
            seed=seed,
            device=CPU,
            autocast=no_autocast,
            checkpoint_path=tmp_path / f"run{run}",
            progress=None,
        )
        weights.append(model.state_dict())
    assert all(torch.equal(weights[0][name], weights[1][name]) for name in weights[0])
    assert not all(torch.equal(weights[0][name], weights[2][name]) for name in weights[0])


def test_early_stopping_after_patience_and_the_best_weights_are_restored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    scores = iter([1.0, 3.0, 2.0, 2.5, 9.0, 9.0])
    snapshots: list[dict[str, torch.Tensor]] = []

    def evaluate(model: RegionalMMT) -> float:
        assert not model.training
        snapshots.append(copy.deepcopy(model.state_dict()))
        return next(scores)

    reports: list[dict[str, float]] = []
    lines: list[EpochLine] = []
    model = new_model()
    with caplog.at_level(logging.INFO, logger="mmt.train"):
        result = fit(
            model,
            toy_pairs(),
            regions=None,
            evaluate=evaluate,
            config=TrainConfig(epochs=50, batch_size=2, patience=2, eval_every=1),
            seed=0,
            device=CPU,
            autocast=no_autocast,
            checkpoint_path=tmp_path / "best",
            progress=reports.append,
            name="toy finetune",
            on_validation=lines.append,
        )
    # one line per validation (4 steps an epoch, one validation each: all in epoch 1), the same as the log's
    assert [(line.epoch, line.step, line.scores[""], line.best) for line in lines] == [
        (1, 1, 1.0, 1.0),
        (1, 2, 3.0, 3.0),
        (1, 3, 2.0, 3.0),
        (1, 4, 2.5, 3.0),
    ]
    logged = [record.getMessage() for record in caplog.records if record.name == "mmt.train"]
    assert logged == [format_epoch(line) for line in lines]
    assert logged[2].startswith("toy finetune · epoch 1/50 · step 3 · loss ")
    assert "val BLEU 2.00 (best 3.00)" in logged[2]
    assert "at most ~" in logged[2]  # 49.25 epochs to go, unless early stopping ends it sooner (as it does)
    assert len(snapshots) == 4  # 1 (best), 3 (best), 2 and 2.5 (two without improvement): stop
    assert (result.best_score, result.best_step) == (3.0, 2)
    assert [record["score"] for record in result.history] == [1.0, 3.0, 2.0, 2.5]
    assert [report.get("score") for report in reports] == [1.0, 3.0, 2.0, 2.5] and reports[-1]["step"] == 4
    state = model.state_dict()
    assert all(torch.equal(state[name], snapshots[1][name]) for name in state)
    assert not all(torch.equal(state[name], snapshots[3][name]) for name in state)
    assert load_mmt(tmp_path / "best", device=CPU)[1]["score"] == 3.0


def test_training_that_ends_between_two_validations_is_validated_once_more(tmp_path: Path) -> None:
    steps: list[float] = []
    result = fit(
        new_model(),
        toy_pairs(),
        regions=None,
        evaluate=lambda model: float(len(steps)),
        config=TrainConfig(epochs=1, batch_size=2, eval_every=3),
        seed=0,
        device=CPU,
        autocast=no_autocast,
        checkpoint_path=tmp_path / "best",
        progress=lambda report: steps.append(report["step"]),
    )
    assert [record["step"] for record in result.history] == [3, 4]  # 8 pairs in batches of 2: 4 steps
    assert steps == [1, 2, 3, 4, 4] and result.best_step == 4


def test_max_steps_stops_mid_epoch_and_validates_there(tmp_path: Path) -> None:
    """8 pairs in batches of 2 are 4 steps an epoch: a cap of 6 stops in epoch 2, validated once at its step."""
    reports: list[dict[str, float]] = []
    result = fit(
        new_model(),
        toy_pairs(),
        regions=None,
        evaluate=lambda model: 1.0,
        config=TrainConfig(epochs=50, batch_size=2, max_steps=6),
        seed=0,
        device=CPU,
        autocast=no_autocast,
        checkpoint_path=tmp_path / "best",
        progress=reports.append,
    )
    assert [(record["epoch"], record["step"]) for record in result.history] == [(1, 4), (2, 6)]
    assert [report["step"] for report in reports] == [1, 2, 3, 4, 5, 6, 6]


def _fit_with_mixing(tmp_path: Path, mixed_pairs: int, mixed: Sequence[Example], progress=None) -> RegionalMMT:
    """Multimodal training on pairs whose tokens are 1-12 (target 13-24), with ``mixed`` text-only pairs beside."""
    features, mask = random_regions([2, 3], max_regions=3, dim=SHAPE.region_dim, seed=2)
    regions = ArrayRegions(features.numpy(), mask.numpy())
    train = [Example((1 + i, 2 + i), (13 + i, 14 + i, EOS), image_row=i % 2) for i in range(11)]
    model = new_model()
    validations = iter(range(1000))  # each validation beats the one before: the last weights are kept
    fit(
        model,
        train,
        regions=regions,
        evaluate=lambda model: float(next(validations)),
        config=TrainConfig(epochs=120, batch_size=4, lr=1e-2, patience=1000, mixed_pairs=mixed_pairs),
        seed=0,
        device=CPU,
        autocast=no_autocast,
        checkpoint_path=tmp_path / "mixed",
        progress=progress,
        mixed=mixed,
    )
    return model


def test_mixed_fine_tuning_keeps_what_only_the_mixed_text_only_pairs_teach(tmp_path: Path) -> None:
    """Mixed fine-tuning (Chu et al. 2017): text-only pairs drawn each epoch and trained in their own batches
    teach the model pairs the multimodal training data never shows; without them it cannot translate those."""
    unseen = [Example((25 + i, 26 + i), (29 - i, EOS)) for i in range(3)]  # tokens no training pair has
    mixed = _fit_with_mixing(tmp_path / "with", mixed_pairs=3, mixed=unseen)
    assert exact_matches(unseen)(mixed) == 1.0
    assert exact_matches(unseen)(_fit_with_mixing(tmp_path / "without", mixed_pairs=0, mixed=unseen)) == 0.0


def test_each_epoch_draws_mixed_pairs_and_trains_them_in_batches_of_their_own(tmp_path: Path) -> None:
    """11 training pairs in batches of 4 (3 batches) and 6 of 20 text-only pairs (2 batches): 5 steps an epoch."""
    pool = [Example((25, 26 + i % 4), (27, EOS)) for i in range(20)]
    epochs: list[float] = []
    _fit_with_mixing(tmp_path, mixed_pairs=6, mixed=pool, progress=lambda report: epochs.append(report["epoch"]))
    assert epochs.count(1) == 5 and len(epochs) == 5 * 120


def test_mixing_without_text_only_pairs_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="mixed_pairs is 3, but there are no text-only pairs"):
        _fit_with_mixing(tmp_path, mixed_pairs=3, mixed=[])
    with pytest.raises(ValueError, match="training example 0: an empty source sentence"):
        _fit_with_mixing(tmp_path, mixed_pairs=3, mixed=[Example((), (27, EOS))])


def test_length_batches_cover_every_example_once_deterministically() -> None:
    examples = [Example(tuple(range(4, 4 + n % 7 + 1)), (5, EOS)) for n in range(50)]
    first = length_batches(examples, batch_size=4, sort_chunk=3, rng=np.random.default_rng(0))
    again = length_batches(examples, batch_size=4, sort_chunk=3, rng=np.random.default_rng(0))
    assert first == again
    assert sorted(i for batch in first for i in batch) == list(range(50))
    lengths = [[len(examples[i].src_ids) for i in batch] for batch in first]
    assert all(batch == sorted(batch) for batch in lengths)
    assert first != length_batches(examples, batch_size=4, sort_chunk=3, rng=np.random.default_rng(1))


def test_token_batches_keep_their_padded_targets_within_the_budget() -> None:
    rng = np.random.default_rng(3)
    examples = [Example((4,) * int(n), (5,) * int(m) + (EOS,)) for n, m in rng.integers(1, 30, (300, 2))]
    batches = length_batches(examples, batch_size=16, sort_chunk=4, rng=np.random.default_rng(0), batch_tokens=120)
    assert sorted(i for batch in batches for i in batch) == list(range(300))
    for batch in batches:
        padded = len(batch) * max(len(examples[i].tgt_ids) for i in batch)
        assert padded <= 120 or len(batch) == 1
    sizes = [len(batch) for batch in batches]
    assert min(sizes) < max(sizes)  # short pairs come in larger batches
    again = length_batches(examples, batch_size=16, sort_chunk=4, rng=np.random.default_rng(0), batch_tokens=120)
    assert batches == again


def test_token_cuts_by_hand() -> None:
    from mmt.train import _token_cuts

    # within 8 tokens: [2, 2] (4; with the 3 it pads to 9), [3] (with the 5 it pads to 10), [5], and [9] alone
    # (over the budget by itself)
    assert _token_cuts(np.array([2, 2, 3, 5, 9]), 8) == [(0, 2), (2, 3), (3, 4), (4, 5)]
    assert _token_cuts(np.array([1, 1, 1, 1]), 4) == [(0, 4)]
    assert _token_cuts(np.array([], dtype=np.int64), 4) == []


def test_adam_is_fused_on_the_cpu_and_steps_as_the_loop_does() -> None:
    torch.manual_seed(0)
    loop_model = torch.nn.Linear(6, 3)
    fused_model = copy.deepcopy(loop_model)
    loop = torch.optim.Adam(loop_model.parameters(), lr=0.01, foreach=False)
    fused = adam([{"params": list(fused_model.parameters())}], lr=0.01, device=torch.device("cpu"))
    assert fused.defaults["fused"] is True
    for _ in range(5):
        x = torch.randn(4, 6)
        for model, optimizer in ((loop_model, loop), (fused_model, fused)):
            optimizer.zero_grad()
            model(x).pow(2).sum().backward()
            optimizer.step()
    for a, b in zip(loop_model.parameters(), fused_model.parameters(), strict=True):
        torch.testing.assert_close(a, b)


def test_collate_builds_teacher_forcing_inputs() -> None:
    examples = [Example((5, 6, 7), (8, 9, EOS), image_row=1), Example((5,), (8, EOS), image_row=0)]
    features, mask = random_regions([2, 1], max_regions=2, dim=SHAPE.region_dim, seed=0)
    batch, tgt_in, tgt_out = collate(
        examples, [0, 1], regions=ArrayRegions(features.numpy(), mask.numpy()), shape=SHAPE, device=CPU
    )
    assert batch.src.tolist() == [[5, 6, 7], [5, 0, 0]]
    assert tgt_in.tolist() == [[2, 8, 9], [2, 8, 0]] and tgt_out.tolist() == [[8, 9, EOS], [8, EOS, 0]]
    assert batch.region_mask is not None and batch.region_mask.tolist() == [[True, False], [True, True]]


@pytest.mark.parametrize(
    ("example", "message"),
    [
        (Example((5,), (6,)), "must end with EOS"),
        (Example((5,) * 101, (6, EOS)), "longer than max_len"),
        (Example((5,), (99, EOS)), "outside the vocabulary"),
        (Example((), (6, EOS)), "empty source"),
    ],
)
def test_bad_examples_are_named(example: Example, message: str) -> None:
    with pytest.raises(ValueError, match=f"training example 1: .*{message}"):
        check_examples([Example((5,), (6, EOS)), example], SHAPE, with_regions=False)
    with pytest.raises(ValueError, match="no image_row"):
        check_examples([Example((5,), (6, EOS))], SHAPE, with_regions=True)


def test_checkpoint_round_trip_gives_identical_outputs(tmp_path: Path) -> None:
    model = new_model(replace(CONFIG, layers=2, dropout=0.1)).eval()
    save_mmt(tmp_path / "m", model, extra={"step": 12, "note": "x"})
    loaded, extra = load_mmt(tmp_path / "m", device=CPU)
    assert extra == {"step": 12, "note": "x"} and loaded.config == model.config and not loaded.training
    assert loaded.shape == model.shape
    src = random_sentences(3, vocab=24, seed=3)
    features, mask = random_regions([2, 3, 1], max_regions=3, dim=SHAPE.region_dim, seed=4)
    batch = source_batch(src, pad_id=0, device=CPU, regions=features, region_mask=mask)
    tgt_in = torch.tensor([[2, 5, 6]] * 3)
    with torch.no_grad():
        assert torch.equal(loaded(batch, tgt_in), model(batch, tgt_in))
    assert beam_search(loaded, batch, beam=3, max_len=6) == beam_search(model, batch, beam=3, max_len=6)
    assert not list(tmp_path.glob(".*tmp"))  # written atomically, nothing left behind


def test_load_pretrained_copies_all_but_the_visual_projection(tmp_path: Path) -> None:
    pretrained = new_model(seed=1, shape=replace(SHAPE, region_dim=4))  # text-only: any region_dim
    save_mmt(tmp_path / "pretrain", pretrained, extra={})
    model = new_model(seed=2)
    fresh = copy.deepcopy(model.state_dict())
    skipped = load_pretrained_into(model, tmp_path / "pretrain")
    assert skipped == ["region_proj.bias", "region_proj.weight"]
    state, source = model.state_dict(), pretrained.state_dict()
    for name, tensor in state.items():
        if name not in skipped:
            assert torch.equal(tensor, source[name]), name
    # the fresh projection keeps its direction, rescaled to speak as loud as the pre-trained word embeddings
    scale = state["region_proj.weight"].norm() / fresh["region_proj.weight"].norm()
    assert torch.allclose(state["region_proj.weight"], fresh["region_proj.weight"] * scale)
    assert not state["region_proj.bias"].any()
    units = torch.nn.functional.normalize(
        torch.randn(2000, SHAPE.region_dim, generator=torch.Generator().manual_seed(0))
    )
    projected = (units @ state["region_proj.weight"].T).norm(dim=1).pow(2).mean().sqrt()
    embedding = source["src_embedding.weight"].norm(dim=1).mean()
    assert projected == pytest.approx(float(embedding), rel=0.1)


def test_load_pretrained_starts_the_region_context_and_the_word_grounding_afresh(tmp_path: Path) -> None:
    """A text-only pre-trained model (either config) goes into a model with the region context and the word
    grounding: their attentions and their zero W_v and W_w stay as initialised, so the fine-tuning starts from the
    pre-trained outputs."""
    pretrained = new_model(seed=1)
    save_mmt(tmp_path / "pretrain", pretrained, extra={})
    torch.manual_seed(2)
    model = RegionalMMT(replace(CONFIG, region_context=True, word_grounding=True), SHAPE)
    fresh = copy.deepcopy(model.state_dict())
    skipped = load_pretrained_into(model, tmp_path / "pretrain")
    assert skipped == [
        "region_att.weight",
        "region_combine.weight",
        "region_ground.weight",
        "region_ground_out.weight",
        "region_proj.bias",
        "region_proj.weight",
    ]
    assert torch.equal(model.region_att.weight, fresh["region_att.weight"])
    assert torch.equal(model.region_ground.weight, fresh["region_ground.weight"])
    assert not model.region_combine.weight.any() and not model.region_ground_out.weight.any()
    text = source_batch([[5, 6, 7]], pad_id=SHAPE.pad_id, device=CPU)
    with torch.no_grad():
        torch.testing.assert_close(
            model.eval()(text, torch.tensor([[2, 9]])), pretrained.eval()(text, torch.tensor([[2, 9]]))
        )


def test_parameter_groups_give_the_visual_parts_their_own_learning_rate() -> None:
    model = RegionalMMT(replace(CONFIG, region_context=True, word_grounding=True), SHAPE)
    names = {id(param): name for name, param in model.named_parameters()}
    plain = parameter_groups(model, TrainConfig(lr=1e-3))
    assert len(plain) == 1 and len(plain[0]["params"]) == len(names)  # type: ignore[arg-type]
    others, visual = parameter_groups(model, TrainConfig(lr=1e-3, visual_lr_scale=10))
    assert sorted(names[id(param)] for param in visual["params"]) == [  # type: ignore[attr-defined]
        "region_att.weight",
        "region_combine.weight",
        "region_ground.weight",
        "region_ground_out.weight",
        "region_proj.bias",
        "region_proj.weight",
    ]
    assert visual["lr"] == pytest.approx(1e-2) and "lr" not in others
    assert len(others["params"]) + 6 == len(names)  # type: ignore[arg-type]
    optimizer = torch.optim.Adam(parameter_groups(model, TrainConfig(lr=1e-3, visual_lr_scale=10)), lr=1e-3)
    assert [group["lr"] for group in optimizer.param_groups] == pytest.approx([1e-3, 1e-2])


def test_load_pretrained_lists_what_does_not_fit(tmp_path: Path) -> None:
    other = new_model(replace(CONFIG, hidden=24), shape=replace(SHAPE, tgt_vocab=40))
    save_mmt(tmp_path / "other", other, extra={})
    with pytest.raises(InputError) as error:
        load_pretrained_into(new_model(), tmp_path / "other")
    message = str(error.value)
    assert (
        "config tgt_vocab: checkpoint 40, model 30" in message and "config hidden: checkpoint 24, model 32" in message
    )
    assert "output.weight: checkpoint (40, 24), model (30, 32)" in message
    assert "encoder.weight_hh_l0: checkpoint (96, 24), model (128, 32)" in message
    deeper = new_model(replace(CONFIG, layers=2))
    save_mmt(tmp_path / "deeper", deeper, extra={})
    with pytest.raises(InputError, match=r"not in the model: decoder\.1\.weight_hh"):
        load_pretrained_into(new_model(), tmp_path / "deeper")


def test_loading_something_else_fails_clearly(tmp_path: Path) -> None:
    (tmp_path / "junk.pt").write_bytes(b"junk")
    with pytest.raises(InputError, match=r"junk\.pt: not a readable MMT checkpoint"):
        load_mmt(tmp_path / "junk.pt", device=CPU)
    torch.save({"weights": torch.zeros(1)}, tmp_path / "other.pt")
    with pytest.raises(InputError, match="not an MMT checkpoint"):
        load_mmt(tmp_path / "other.pt", device=CPU)
    with pytest.raises(InputError, match="not found"):
        load_mmt(tmp_path / "missing.pt", device=CPU)


def test_a_non_finite_loss_or_gradient_stops_training_before_the_update(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loss turns NaN at the third step: fit stops there naming epoch and step, and the checkpoint holds no
    weights of that step; an infinite gradient norm stops it too."""
    import mmt.train as train_module

    real, calls = train_module.mmt_loss, {"n": 0}

    def poisoned(*args: object, **kwargs: object) -> torch.Tensor:
        calls["n"] += 1
        loss = real(*args, **kwargs)  # type: ignore[arg-type]
        return loss * float("nan") if calls["n"] == 3 else loss

    monkeypatch.setattr(train_module, "mmt_loss", poisoned)
    config = TrainConfig(epochs=3, batch_size=4, lr=1e-2, patience=1000)
    common = {
        "regions": None,
        "evaluate": exact_matches(toy_pairs()),
        "config": config,
        "seed": 1,
        "device": CPU,
        "autocast": no_autocast,
        "checkpoint_path": tmp_path / "mmt",
    }
    with pytest.raises(FloatingPointError, match=r"^MMT training diverged at epoch 2, step 3: the loss is nan"):
        fit(new_model(), toy_pairs(), **common)  # type: ignore[arg-type]
    monkeypatch.setattr(train_module, "mmt_loss", real)
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", lambda params, clip: torch.tensor(float("inf")))
    with pytest.raises(
        FloatingPointError, match=r"^MMT training diverged at epoch 1, step 1: the gradient norm is inf"
    ):
        fit(new_model(), toy_pairs(), **common)  # type: ignore[arg-type]


def test_label_smoothing_mixes_the_uniform_distribution_into_the_target() -> None:
    """Smoothed cross-entropy per token: (1 - eps) * (-log p[y]) + eps * mean over the vocabulary of (-log p[v]),
    padding left out; computed by hand from the model's logits."""
    from mmt.train import mmt_loss

    model = new_model().eval()
    pairs = toy_pairs()[:3]
    batch, tgt_in, tgt_out = collate(pairs, [0, 1, 2], regions=None, shape=SHAPE, device=CPU)
    with torch.no_grad():
        log_probs = torch.log_softmax(model(batch, tgt_in).float(), dim=-1)
        smoothed = mmt_loss(model, batch, tgt_in, tgt_out, label_smoothing=0.1)
        plain = mmt_loss(model, batch, tgt_in, tgt_out)
    terms = []
    for row, targets in enumerate(tgt_out.tolist()):
        for position, target in enumerate(targets):
            if target == SHAPE.pad_id:
                continue
            scores = log_probs[row, position]
            terms.append(0.9 * -float(scores[target]) + 0.1 * -float(scores.mean()))
    assert float(smoothed) == pytest.approx(np.mean(terms), rel=1e-5)
    nll = [-float(log_probs[r, p, t]) for r, ts in enumerate(tgt_out.tolist()) for p, t in enumerate(ts) if t]
    assert float(plain) == pytest.approx(np.mean(nll), rel=1e-5)


def test_the_learning_rate_decays_after_each_run_of_validations_without_a_new_best() -> None:
    from mmt.train import decay_on_plateau

    weight = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.Adam(
        [{"params": [weight]}, {"params": [torch.nn.Parameter(torch.zeros(1))], "lr": 4.0}], lr=1.0
    )
    config = TrainConfig(lr=0.5, lr_decay=0.5, lr_decay_patience=2)  # the optimiser's own rates decay
    seen = []
    for bad in (0, 1, 2, 3, 4, 0, 1, 2):  # validations since the best score, one after the other
        decay_on_plateau(optimizer, bad, config)
        seen.append([group["lr"] for group in optimizer.param_groups])
    assert seen == [[1.0, 4.0], [1.0, 4.0], [0.5, 2.0], [0.5, 2.0], [0.25, 1.0], [0.25, 1.0], [0.25, 1.0], [0.125, 0.5]]
    kept = torch.optim.Adam([weight], lr=1.0)
    for bad in range(1, 5):
        decay_on_plateau(kept, bad, TrainConfig())  # lr_decay 1: the rate stays
    assert kept.param_groups[0]["lr"] == 1.0


def test_fit_trains_at_the_decayed_rate_and_a_resumed_fit_keeps_it(tmp_path: Path) -> None:
    """A validation score that never improves halves the rate after each epoch past the first; Adam's saved state
    carries the decayed rate into a fit resumed after a stop in epoch 3, which ends with the uninterrupted weights."""
    from common.train_state import ResumePoint

    config = TrainConfig(epochs=4, batch_size=4, lr=1e-2, patience=100, lr_decay=0.5, lr_decay_patience=1)
    optimizers: list[torch.optim.Optimizer] = []
    real_adam = torch.optim.Adam

    def recording_adam(*args: object, **kwargs: object) -> torch.optim.Optimizer:
        optimizers.append(real_adam(*args, **kwargs))  # type: ignore[arg-type]
        return optimizers[-1]

    rates: list[float] = []

    def spy(record: dict[str, float]) -> None:
        if "score" in record:
            rates.append(optimizers[-1].param_groups[0]["lr"])

    class Stop(Exception):
        pass

    def stop_in_epoch_3(record: dict[str, float]) -> None:
        if record["epoch"] == 3:
            raise Stop

    common = {"regions": None, "evaluate": lambda model: 0.0, "seed": 3, "device": CPU, "autocast": no_autocast}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch.optim, "Adam", recording_adam)
        whole = new_model()
        fit(whole, toy_pairs(), config=config, checkpoint_path=tmp_path / "a", progress=spy, **common)  # type: ignore[arg-type]
        assert rates == [1e-2, 5e-3, 2.5e-3, 1.25e-3]  # the first score is the best; no later one beats it
        resume = ResumePoint(tmp_path / "state.pt", fingerprint="f")
        with pytest.raises(Stop):
            fit(
                new_model(),
                toy_pairs(),
                config=config,
                checkpoint_path=tmp_path / "b",
                progress=stop_in_epoch_3,
                resume=resume,
                **common,
            )  # type: ignore[arg-type]
        resumed = new_model(seed=9)  # its own weights are replaced by the state's
        fit(resumed, toy_pairs(), config=config, checkpoint_path=tmp_path / "c", resume=resume, **common)  # type: ignore[arg-type]
    assert optimizers[-1].param_groups[0]["lr"] == pytest.approx(1.25e-3)
    for key, value in whole.state_dict().items():
        assert torch.equal(value, resumed.state_dict()[key]), key
