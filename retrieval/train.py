"""Training a retrieval model: the paper's schedule, the multilingual ranking loss, best validation rsum kept.

Huang et al. 2020, section 4.2: Adam 5e-4, 5e-5 after the 15th epoch, batches of 128, 24 epochs, the model
with the best validation performance (rsum summed over the validation languages) kept. Batches mix original
and synthesized captions in equal portions (section 3.3). Options:
- c2c (Kádár et al. 2018): with probability ``c2c_probability`` a step is instead a caption-caption ranking
  step on pairs of captions of the same image in two languages, the anchor in the earlier of the run's
  training languages (VSE++ max-violation; one pair per image, so the negatives are the other pairs'
  captions), for models with one vector per caption.
- a model's cross-lingual text ranking term (Huang et al. 2019, Eq. 4; :mod:`retrieval.joint`) joins the loss of
  every step when its weight is above 0.
- a model's own pre-training (MULE) runs first, on text-only batches of same-image captions across languages.
Deterministic on the CPU for a given seed and thread count.

Epochs are counted from 1 in everything written for people: each epoch's log line (:mod:`common.epoch_log`), the
history, ``best_epoch`` and the checkpoint. Only the training loop and ``lr_decay_epoch`` count from 0.

Under torchrun (common/distributed.py) each rank encodes its share of every batch, the loss sees the gathered
embeddings of the whole batch, and gradients are averaged: the same steps as one process on the same batch.

Resumable (common/train_state.py): given a :class:`~common.train_state.ResumePoint`, the fit writes its state after
the pre-training and after every epoch, and a rerun continues from there with the steps the uninterrupted run takes
(the batch order is seeded per epoch, so the epoch number is the sampler's position).
"""

from __future__ import annotations

import contextlib
import copy
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from common.checks import check_fraction, check_positive, check_range
from common.distributed import broadcast_parameters, is_writer, reduce_gradients, share
from common.epoch_log import EpochLine, format_epoch, seconds_left
from common.train_state import ResumePoint, restore_rng_state, rng_state
from retrieval.data import (
    BalancedSampler,
    BatchSource,
    CaptionSet,
    DeviceBatches,
    HostBatches,
    RegionLookup,
    images_of,
    text_batch,
)
from retrieval.evaluation import Metrics
from retrieval.inference import AutocastFactory, evaluate
from retrieval.joint import JointTextRanking
from retrieval.language_groups import LanguageGroupSampler
from retrieval.losses import RankingLoss, harder_negative_loss
from retrieval.model import BatchContext, RetrievalModel
from retrieval.setups import Sampler

logger = logging.getLogger(__name__)

# Steps between two reads of the losses and gradient norms on an accelerator. A read waits for the device to finish
# every queued kernel, which costs more than a small model's step; on the CPU a read is free, so it is every step.
DEVICE_CHECK_EVERY = 50


@dataclass(frozen=True)
class TrainConfig:
    """Attributes (defaults: Huang et al. 2020, section 4.2):
    epochs: Passes over the original training captions.
    batch_size: Captions per batch.
    lr: Adam learning rate.
    lr_decay_epoch: Epochs trained at the full rate: from epoch ``lr_decay_epoch + 1`` on, as the logs count epochs,
        the rate is ``lr * lr_decay`` (15: from the 16th, the paper's "after the 15th epoch").
    lr_decay: Factor of the step decay.
    clip: Largest gradient L2 norm (VSE++/SCAN: 2), of each of the model's clip groups (an ensemble's members
        each); 0 = no clipping.
    synthetic_fraction: Share of synthesized captions in a batch when a variant has them (section 3.3: 0.5).
    patience: Stop after this many epochs without a better validation rsum; 0 = run every epoch.
    c2c_probability: Chance that a step is a caption-caption step (Kádár et al.: 0.5; 0 = off).
    warmup_epochs: Epochs trained with the sum of hinges (Eq. 8) before the configured loss (VSE∞'s warm-up:
        hardest negatives from the first step can collapse every score to one value, VSE++ issue #27).
    max_steps: Stop after this many steps, validating the epoch they end in, if set: a fixed amount of work
        whatever the corpus size (cost measurements, smoke runs).
    weight_decay: Adam's L2 penalty, added to every gradient (Huang et al. 2019: 1e-6; 0 = none).
    language_group_batches: 0: off; n: MULE's batches (:mod:`retrieval.language_groups`), images drawn equally from
        each language group, each with up to n captions per language (Kim et al. 2020: 2), in place of
        ``synthetic_fraction``'s batches.
    """

    epochs: int = 24
    batch_size: int = 128
    lr: float = 5e-4
    lr_decay_epoch: int = 15
    lr_decay: float = 0.1
    clip: float = 2.0
    synthetic_fraction: float = 0.5
    patience: int = 0
    c2c_probability: float = 0.0
    warmup_epochs: int = 0
    max_steps: int | None = None
    weight_decay: float = 0.0
    language_group_batches: int = 0

    def __post_init__(self) -> None:
        check_range("epochs", self.epochs, 1, 10_000)
        check_range("batch_size", self.batch_size, 2, 65_536)
        check_positive("lr", self.lr, below=1.0)
        check_range("lr_decay_epoch", self.lr_decay_epoch, 0, 10_000)
        check_fraction("lr_decay", self.lr_decay)
        check_range("clip", self.clip, 0.0, 1e6)
        check_fraction("synthetic_fraction", self.synthetic_fraction)
        check_range("patience", self.patience, 0, 10_000)
        check_fraction("c2c_probability", self.c2c_probability)
        check_range("warmup_epochs", self.warmup_epochs, 0, 10_000)
        check_range("weight_decay", self.weight_decay, 0.0, 1.0)
        if self.max_steps is not None:
            check_range("max_steps", self.max_steps, 1, 100_000_000)
        check_range("language_group_batches", self.language_group_batches, 0, 16)


@dataclass
class FitResult:
    """Attributes:
    best_epoch: Epoch of the kept weights, counted from 1 (0: none yet).
    best_rsum: Validation rsum (summed over languages) of the kept weights.
    history: One entry per epoch: epoch (counted from 1), learning rate, losses, validation metrics, throughput.
    """

    best_epoch: int
    best_rsum: float
    history: list[dict[str, object]] = field(default_factory=list)


def learning_rate(config: TrainConfig, epoch: int) -> float:
    """The rate of epoch ``epoch``, counted from 0."""
    return config.lr * (config.lr_decay if epoch >= config.lr_decay_epoch else 1.0)


def adam(model: torch.nn.Module, config: TrainConfig) -> torch.optim.Adam:
    """Adam at ``config.lr``; ``config.weight_decay`` is Adam's own L2 penalty (decay * weight added to each gradient
    before the moments), the optimiser and "weight decay" the paper names, not AdamW's decoupled decay."""
    return torch.optim.Adam(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)


def fit(
    model: RetrievalModel,
    train: CaptionSet,
    validation: Mapping[str, CaptionSet],
    regions: RegionLookup,
    *,
    loss: RankingLoss,
    type_weights: Tensor,
    config: TrainConfig,
    seed: int,
    device: torch.device,
    autocast: AutocastFactory = contextlib.nullcontext,
    eval_batch_size: int = 256,
    name: str = "retrieval",
    on_epoch: Callable[[EpochLine], None] | None = None,
    resume: ResumePoint | None = None,
    sampler: Sampler | None = None,
    resident: bool | None = None,
) -> FitResult:
    """Train ``model`` in place; at the end it holds the weights of the best validation epoch.

    Args:
        train: Training captions (``synthetic`` marks the synthesized ones).
        validation: Validation captions per language (human captions); their rsums are summed.
        regions: Region features by row (the FeatureStore memory map).
        loss: The objective, of a resolved kind (not ``auto``).
        type_weights: beta_l per entry of ``train.type_names`` (Eq. 9).
        seed: Seeds the batch order, the c2c draws and torch's generator (initialisation, dropout).
        eval_batch_size: Items per encoding batch in validation.
        name: What trains (``san-mmt_f-all seed 0``): the start of each epoch's log line.
        on_epoch: Called with each epoch's log line (progress reporting), after the epoch's state is saved.
        resume: Where the state is saved after the pre-training and after every epoch, and resumed from when it
            holds one of this run (a finished one returns its result and kept weights at once).
        sampler: The ranking steps' batch order (default: :class:`~retrieval.data.BalancedSampler`'s).
        resident: Hold the training captions and their images' regions on ``device`` for the whole fit
            (:class:`~retrieval.data.DeviceBatches`) instead of reading each batch from ``regions``; default: on any
            device but the CPU, where the store's reads cost no copy and memory stays flat.
    """
    torch.manual_seed(seed)
    model.to(device)
    broadcast_parameters(model)  # data-parallel ranks start from rank 0's weights
    rng = np.random.default_rng([seed, 1])
    state = resume.load() if resume is not None else None
    if resume is not None and state is not None:
        if state["finished"]:
            model.load_state_dict(state["model"])
            logger.info(
                "%s: trained before (stopped after epoch %d of %d); its kept weights and result from %s",
                name,
                state["epoch"],
                config.epochs,
                resume.path,
            )
            return FitResult(**state["result"])
        after = f"epoch {state['epoch']}" if state["epoch"] else "pre-training"
        logger.info("%s: resuming after %s of %d from %s", name, after, config.epochs, resume.path)
        model.load_state_dict(state["model"])
        restore_rng_state(state["rng"], rng)
    else:
        pretrain(model, train, config=config, device=device, autocast=autocast, rng=rng, name=name)
        if model.pretrain_epochs() > 0:  # a kill in the epochs after it does not redo it
            _save(resume, {"epoch": 0, "finished": False, "model": model.state_dict(), "rng": rng_state(rng)})
    optimizer = adam(model, config)
    joint = JointTextRanking.for_fit(model, train, loss.margin, rng)
    if sampler is None and config.language_group_batches:
        sampler = LanguageGroupSampler(
            train.image_rows, train.langs, config.batch_size, config.language_group_batches, seed
        )
    if sampler is None:
        sampler = BalancedSampler(train.synthetic, config.batch_size, config.synthetic_fraction, seed)
    weights = type_weights.to(device)
    on_device = device.type != "cpu" if resident is None else resident
    source = DeviceBatches(train, regions, device) if on_device else HostBatches(train, regions, device)
    watch = FiniteWatch(1 if device.type == "cpu" else DEVICE_CHECK_EVERY)
    c2c_pairs = _cross_lingual_pairs(train) if config.c2c_probability > 0 else None
    result = FitResult(best_epoch=0, best_rsum=float("-inf"))
    best_state: dict[str, Tensor] | None = None
    start = 0
    if state is not None and state["epoch"] > 0:  # after the pre-training state, the epochs start afresh
        start = state["epoch"]
        optimizer.load_state_dict(state["optimizer"])
        result = FitResult(**state["result"])
        best_state = state["best_state"]
    per_epoch = len(sampler.batches(0))  # the same count every epoch
    steps_total, step = max(1, config.epochs * per_epoch), start * per_epoch
    fit_started = time.perf_counter()
    for epoch in range(start, config.epochs):  # counted from 0 here; from 1 (``number``) in what it writes
        number = epoch + 1
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(config, epoch)
        model.train()
        started = time.perf_counter()
        ranking_values: list[Tensor] = []
        c2c_values: list[Tensor] = []
        batches = sampler.batches(epoch)
        epoch_loss = RankingLoss("sum", loss.margin) if epoch < config.warmup_epochs and loss.kind != "topk" else loss
        for indices in batches:
            progress = step / steps_total
            if c2c_pairs is not None and rng.random() < config.c2c_probability:
                value = _c2c_step(
                    model,
                    train,
                    c2c_pairs,
                    optimizer,
                    config,
                    device,
                    autocast,
                    rng,
                    loss.margin,
                    where=f"epoch {number}, step {step}",
                    watch=watch,
                )
                c2c_values.append(value)
            else:
                value = _ranking_step(
                    model,
                    source,
                    indices,
                    optimizer,
                    epoch_loss,
                    weights,
                    config,
                    device,
                    autocast,
                    progress,
                    where=f"epoch {number}, step {step}",
                    joint=joint,
                    watch=watch,
                )
                ranking_values.append(value)
            step += 1
            if step == config.max_steps:
                break
        watch.check()
        losses, c2c_losses = read_losses(ranking_values), read_losses(c2c_values)  # one read per epoch
        seconds = time.perf_counter() - started
        metrics = {
            lang: evaluate(model, captions, regions, device=device, batch_size=eval_batch_size, autocast=autocast)
            for lang, captions in validation.items()
        }
        rsum = float(sum(m["rsum"] for m in metrics.values()))
        entry: dict[str, object] = {
            "epoch": number,
            "lr": learning_rate(config, epoch),
            "loss": float(np.mean(losses)) if losses else None,
            "c2c_loss": float(np.mean(c2c_losses)) if c2c_losses else None,
            "steps_per_s": len(batches) / seconds if seconds > 0 else None,
            "val_rsum": rsum,
            "val": {lang: _summary(m) for lang, m in metrics.items()},
        }
        result.history.append(entry)
        improved = rsum > result.best_rsum
        if improved:
            result.best_epoch, result.best_rsum = number, rsum
            best_state = copy.deepcopy(model.state_dict())
        stopped = not improved and config.patience > 0 and number - result.best_epoch >= config.patience
        finished = stopped or number == config.epochs or step == config.max_steps  # None: no cap
        if finished and best_state is not None:
            model.load_state_dict(best_state)
        _save(resume, _epoch_state(number, finished, model, optimizer, rng, result, best_state))
        elapsed, ran = time.perf_counter() - fit_started, number - start
        line = EpochLine(
            run=name,
            epoch=number,
            epochs=config.epochs,
            loss=float(np.mean(losses)) if losses else None,
            score_name="val rsum",
            scores={lang: float(m["rsum"]) for lang, m in metrics.items()},
            best=result.best_rsum,
            decimals=1,
            seconds_per_epoch=elapsed / ran,
            seconds_left=seconds_left(elapsed, ran, config.epochs - start),
            may_stop_early=config.patience > 0,
        )
        logger.info("%s", format_epoch(line))
        if on_epoch is not None:
            on_epoch(line)
        if finished:
            break
    return result


def _epoch_state(
    number: int,
    finished: bool,
    model: RetrievalModel,
    optimizer: torch.optim.Optimizer,
    rng: np.random.Generator,
    result: FitResult,
    best_state: dict[str, Tensor] | None,
) -> dict[str, object]:
    """What the epochs after ``number`` depend on; once ``finished``, the kept weights and the result only."""
    state: dict[str, object] = {
        "epoch": number,
        "finished": finished,
        "model": model.state_dict(),
        "result": {"best_epoch": result.best_epoch, "best_rsum": result.best_rsum, "history": result.history},
    }
    if not finished:
        state |= {"optimizer": optimizer.state_dict(), "rng": rng_state(rng), "best_state": best_state}
    return state


def _save(resume: ResumePoint | None, state: dict[str, object]) -> None:
    if resume is not None and is_writer():  # the other data-parallel ranks hold the same state
        resume.save(state)


def _ranking_step(
    model: RetrievalModel,
    source: BatchSource,
    indices: np.ndarray,
    optimizer: torch.optim.Optimizer,
    loss: RankingLoss,
    type_weights: Tensor,
    config: TrainConfig,
    device: torch.device,
    autocast: AutocastFactory,
    progress: float,
    *,
    where: str,
    joint: JointTextRanking | None = None,
    watch: FiniteWatch | None = None,
) -> Tensor:
    """One ranking step on the batch of captions ``indices``; returns its loss, detached, on the device."""
    # data-parallel: each rank encodes its share of the images and captions; the loss sees the whole batch
    batch = source.batch(indices)
    with autocast():
        image_embedded = model.encode_images(batch.images).gathered()
        text_embedded = model.encode_texts(batch.texts).gathered()
        scored = model.ranking_similarities(image_embedded, text_embedded)
        total = loss(scored[0].float(), batch.caption_image, batch.types, type_weights)
        for sims in scored[1:]:  # an ensemble's other members, each ranked on its own scores
            total = total + loss(sims.float(), batch.caption_image, batch.types, type_weights)
        context = BatchContext(batch.caption_image, batch.langs, progress)
        for extra in model.extra_losses(image_embedded, text_embedded, context).values():
            total = total + extra.float()
        if joint is not None:
            total = total + joint.loss(model, indices, text_embedded, device).float()
    return _apply(model, optimizer, total, config.clip, watch, where=where)


class FiniteWatch:
    """Losses and gradient norms of the steps since the last check, read together every ``every`` steps.

    A non-finite one stops training, naming its step (a model trained on through NaN would be published at chance).
    With ``every`` 1 the check comes before each step's update, so no update follows a non-finite loss; with more,
    the updates of the steps since the last check have been made, and the error still names the first bad step.
    """

    def __init__(self, every: int) -> None:
        self.every = every
        self._pending: list[tuple[str, Tensor, Tensor]] = []

    def note(self, where: str, loss: Tensor, norms: Tensor) -> None:
        """Keep a step's loss () and its clip groups' gradient norms (G,), then check if one is due."""
        self._pending.append((where, loss, norms))
        if len(self._pending) >= self.every:
            self.check()

    def check(self) -> None:
        """Read what is pending (one host sync).

        Raises:
            FloatingPointError: a loss or gradient norm is NaN or infinite; the message names the first step's
                ``where`` and the value.
        """
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        losses = torch.stack([loss.float() for _, loss, _ in pending]).tolist()
        norms = torch.stack([norm.float() for _, _, norm in pending]).tolist()
        for (where, _, _), value, step_norms in zip(pending, losses, norms, strict=True):
            if not math.isfinite(value):
                raise FloatingPointError(
                    f"retrieval training diverged at {where}: the loss is {value} (try a lower "
                    f"retrieval.train.lr, or gradient clipping with retrieval.train.clip)"
                )
            for norm in step_norms:
                if not math.isfinite(norm):
                    raise FloatingPointError(f"retrieval training diverged at {where}: the gradient norm is {norm}")


def read_losses(values: list[Tensor]) -> list[float]:
    """Steps' losses as floats, read from the device at once."""
    return torch.stack(values).tolist() if values else []


def _apply(
    model: RetrievalModel,
    optimizer: torch.optim.Optimizer,
    total: Tensor,
    clip: float,
    watch: FiniteWatch | None,
    *,
    where: str,
) -> Tensor:
    """Backward, clip, one optimiser step; ``watch`` checks the loss and the gradient norms (see
    :class:`FiniteWatch`). Returns the loss, detached, without reading it from the device.

    Raises:
        FloatingPointError: from ``watch`` (default: one that checks this step), when a check is due and finds a
            non-finite value.
    """
    value = total.detach()
    optimizer.zero_grad(set_to_none=True)
    total.backward()  # type: ignore[no-untyped-call]
    reduce_gradients(model.parameters(), mean=True)  # every rank computed the same loss on the gathered batch
    norms = [torch.nn.utils.clip_grad_norm_(group, clip if clip > 0 else math.inf) for group in model.clip_groups()]
    watch = FiniteWatch(1) if watch is None else watch  # none given: check at once, as a lone step should
    watch.note(where, value, torch.stack(norms) if norms else value.new_zeros(0))
    optimizer.step()
    return value


def _cross_lingual_pairs(train: CaptionSet) -> dict[int, dict[int, np.ndarray]]:
    """Image row -> language -> indices of its captions, for images with captions in two or more languages."""
    by_image: dict[int, dict[int, list[int]]] = {}
    for index, (row, lang) in enumerate(zip(train.image_rows.tolist(), train.langs.tolist(), strict=True)):
        by_image.setdefault(row, {}).setdefault(lang, []).append(index)
    pairs = {row: {lang: np.array(ids) for lang, ids in langs.items()} for row, langs in by_image.items()}
    pairs = {row: langs for row, langs in pairs.items() if len(langs) >= 2}
    if not pairs:
        raise ValueError("c2c ranking needs images with captions in two or more languages; the training set has none")
    return pairs


def _draw_pairs(
    pairs: dict[int, dict[int, np.ndarray]], count: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """``count`` distinct images; per image one caption in one language and one in a later one (Kádár et al.'s
    pairs are combinations in language order: with two languages every anchor is in the first, every partner in
    the second, so a caption's negatives are the other language's captions of the batch's other images)."""
    images = list(pairs)
    chosen = rng.choice(len(images), size=min(count, len(images)), replace=False)
    anchors, partners = [], []
    for position in chosen:
        langs = pairs[images[position]]
        first, second = np.sort(rng.choice(sorted(langs), size=2, replace=False))
        anchors.append(int(rng.choice(langs[int(first)])))
        partners.append(int(rng.choice(langs[int(second)])))
    return np.array(anchors), np.array(partners)


def _c2c_step(
    model: RetrievalModel,
    train: CaptionSet,
    pairs: dict[int, dict[int, np.ndarray]],
    optimizer: torch.optim.Optimizer,
    config: TrainConfig,
    device: torch.device,
    autocast: AutocastFactory,
    rng: np.random.Generator,
    margin: float,
    *,
    where: str,
    watch: FiniteWatch | None = None,
) -> Tensor:
    """Kádár et al.'s caption-caption step: anchors play the images' part; one anchor per image, so the
    diagonal holds the only positives."""
    anchors, partners = _draw_pairs(pairs, config.batch_size, rng)
    with autocast():
        queries = model.encode_texts(text_batch(train, anchors[share(len(anchors))]).to(device)).gathered()
        targets = model.encode_texts(text_batch(train, partners[share(len(partners))]).to(device)).gathered()
        sims = model.text_similarity(queries, targets).float()
        diagonal = torch.arange(len(anchors), device=device)
        positive = diagonal.unsqueeze(0) == diagonal.unsqueeze(1)
        zeros = torch.zeros_like(diagonal)
        total = harder_negative_loss(sims, positive, diagonal, zeros, sims.new_ones(1), margin)
    return _apply(model, optimizer, total, config.clip, watch, where=f"{where} (caption-caption)")


def pretrain(
    model: RetrievalModel,
    train: CaptionSet,
    *,
    config: TrainConfig,
    device: torch.device,
    autocast: AutocastFactory,
    rng: np.random.Generator,
    name: str = "retrieval",
) -> None:
    """The model's own text-only pre-training (MULE), on batches of same-image captions across languages; one log
    line per epoch (``name`` pre-training)."""
    epochs = model.pretrain_epochs()
    if epochs == 0:
        return
    pairs = _cross_lingual_pairs(train)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    images = list(pairs)
    per_batch = max(1, config.batch_size // 2)
    model.train()
    started = time.perf_counter()
    for epoch in range(epochs):
        order = rng.permutation(len(images))
        values: list[Tensor] = []
        watch = FiniteWatch(1 if device.type == "cpu" else DEVICE_CHECK_EVERY)
        for start in range(0, len(order), per_batch):
            indices, owner = [], []
            for position in order[start : start + per_batch]:
                for captions in pairs[images[position]].values():
                    indices.append(int(rng.choice(captions)))
                    owner.append(int(position))
            _, caption_image = images_of(np.array(owner))
            chosen = np.array(indices)
            texts = text_batch(train, chosen[share(len(chosen))]).to(device)
            langs = torch.from_numpy(train.langs[chosen]).to(device)
            with autocast():
                encoded = model.encode_texts(texts).gathered()
                context = BatchContext(torch.from_numpy(caption_image).to(device), langs, epoch / epochs)
                total = model.pretrain_loss(encoded, context)
            where = f"pre-training epoch {epoch + 1}"
            values.append(_apply(model, optimizer, total, config.clip, watch, where=where))
        watch.check()
        losses = read_losses(values)
        elapsed = time.perf_counter() - started
        line = EpochLine(
            run=f"{name} pre-training",
            epoch=epoch + 1,
            epochs=epochs,
            loss=float(np.mean(losses)),
            seconds_per_epoch=elapsed / (epoch + 1),
            seconds_left=seconds_left(elapsed, epoch + 1, epochs),
        )
        logger.info("%s", format_epoch(line))


def _summary(metrics: Metrics) -> dict[str, float]:
    return {"rsum": metrics["rsum"], "i2t_r1": metrics["i2t"]["r1"], "t2i_r1": metrics["t2i"]["r1"]}
