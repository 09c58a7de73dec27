"""Training of :class:`~mmt.model.RegionalMMT` by maximum likelihood (Eq. 6) with early stopping.

One function, :func:`fit`, serves both phases of section 4.2: text-only pre-training (``regions=None``) and
fine-tuning with region features (``regions`` = a FeatureStore or anything with its ``batch`` method).
Conventions (nmtpytorch TRAIN_DEFAULTS): Adam 4e-4, gradient-norm clipping at 5, batches of 32 sentences,
validation at every epoch end (or every ``eval_every`` batches), early stopping after ``patience``
validations without improvement, best weights restored at the end. Each validation logs one line
(:mod:`common.epoch_log`); epochs are counted from 1 in it, in the history and in the checkpoint.

Under torchrun (common/distributed.py) each rank computes the loss of its share of every batch over the whole
batch's token count, gradients are summed, and validation decodes a share per rank: the same steps as one process.

With a :class:`~common.train_state.ResumePoint`, :func:`fit` saves its state after every finished epoch and, run
again with the same fingerprint, continues after the last saved epoch; the rest of the run takes the steps the
uninterrupted run takes (on the CPU: the same weights, bit for bit).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch
import torch.nn.functional as F

from common.checks import check, check_fraction, check_positive, check_range
from common.distributed import broadcast_parameters, is_writer, reduce_gradients, share, sum_of, world_size
from common.epoch_log import EpochLine, format_epoch, seconds_left
from common.stopping import check as check_stop
from common.train_state import ResumePoint, restore_rng_state, rng_state
from features.store import RegionLookup
from mmt.beam import evaluating
from mmt.checkpoint import VISUAL_PREFIXES, read_checkpoint, save_mmt
from mmt.model import MMTShape, RegionalMMT, SourceBatch, pad_ids, source_batch

logger = logging.getLogger(__name__)

AutocastFactory = Callable[[], contextlib.AbstractContextManager[object]]
ValidationCallback = Callable[[EpochLine], None]  # called with each validation's line (progress reports)


@dataclass(frozen=True)
class Example:
    """One training pair.

    Attributes:
        src_ids: Source token ids (no BOS/EOS).
        tgt_ids: Target token ids, ending with EOS.
        image_row: Row of the image in the region store; None for text-only data.
    """

    src_ids: tuple[int, ...]
    tgt_ids: tuple[int, ...]
    image_row: int | None = None


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation settings (defaults: nmtpytorch TRAIN_DEFAULTS).

    Attributes:
        epochs: Most passes over the training data.
        batch_size: Sentences per batch; with ``batch_tokens``, the batches' size on average, which sets how many
            sentences are sorted together (``sort_chunk`` times it).
        batch_tokens: If above 0, batches are cut by tokens instead: each holds as many length-sorted pairs as keep
            its padded target (pairs x longest target) within this many tokens, so that short sentences come in
            larger batches and a batch's cost does not swing with its lengths (JoeyNMT's ``batch_type: token``).
        lr: Adam learning rate.
        clip: Largest gradient L2 norm (clip_grad_norm_).
        patience: Validations without improvement before training stops.
        eval_every: Validate every this many batches; 0 = at the end of every epoch.
        sort_chunk: Batches per length-sorted chunk (sentences of similar length share a batch; the chunks and
            the batch order are shuffled, deterministically from the seed of :func:`fit`).
        visual_lr_scale: ``lr`` times this for the parameters that read the regions (``VISUAL_PREFIXES``), which
            fine-tuning starts afresh beside pre-trained ones; 1 trains every parameter alike.
        mixed_pairs: Text-only pairs (the ``mixed`` examples of :func:`fit`: the pre-training corpus) drawn afresh
            each epoch and trained in batches of their own between the batches of the training data: mixed
            fine-tuning (Chu et al. 2017), which keeps what pre-training taught about words the fine-tuning data
            never says; 0 trains on the training data alone.
        max_steps: Stop after this many steps (mixed batches count), validating once there, if set: a fixed
            amount of work whatever the corpus size (cost measurements, smoke runs).
        label_smoothing: Label smoothing of the cross-entropy (0: none; 0.1 is the usual choice for small corpora).
        lr_decay: Multiply every learning rate by this after ``lr_decay_patience`` validations in a row without
            a new best score (and again after each further run of them); 1 keeps the rate (nmtpytorch's
            ``lr_decay: plateau``). The rates live in Adam's state, so a resumed run continues at the decayed rate.
        lr_decay_patience: Validations without improvement before each decay.
    """

    epochs: int = 100
    batch_size: int = 32
    batch_tokens: int = 0
    lr: float = 4e-4
    clip: float = 5.0
    patience: int = 20
    eval_every: int = 0
    sort_chunk: int = 20
    visual_lr_scale: float = 1.0
    mixed_pairs: int = 0
    max_steps: int | None = None
    label_smoothing: float = 0.0
    lr_decay: float = 1.0
    lr_decay_patience: int = 1

    def __post_init__(self) -> None:
        check_range("epochs", self.epochs, 1, 10_000)
        check_range("batch_size", self.batch_size, 1, 65_536)
        check_range("batch_tokens", self.batch_tokens, 0, 10_000_000)
        check_positive("lr", self.lr, below=1.0)
        check_positive("clip", self.clip)
        check_range("patience", self.patience, 1, 1000)
        check_range("eval_every", self.eval_every, 0, 10_000_000)
        check_range("sort_chunk", self.sort_chunk, 1, 10_000)
        check_positive("visual_lr_scale", self.visual_lr_scale, below=1000.0)
        check_range("mixed_pairs", self.mixed_pairs, 0, 100_000_000)
        if self.max_steps is not None:
            check_range("max_steps", self.max_steps, 1, 100_000_000)
        check_fraction("label_smoothing", self.label_smoothing, below_one=True)
        check(0 < self.lr_decay <= 1, "lr_decay", self.lr_decay, "0 < lr_decay <= 1 (1: no decay)")
        check_range("lr_decay_patience", self.lr_decay_patience, 1, 1000)


@dataclass(frozen=True)
class FitResult:
    """Outcome of :func:`fit`.

    Attributes:
        best_score: Best validation score (the weights now in the model and in the checkpoint).
        best_step: Batch count at which it was reached.
        history: One record per validation: step, epoch (counted from 1), loss (mean training loss since the
            previous validation) and score.
    """

    best_score: float
    best_step: int
    history: list[dict[str, float]] = field(default_factory=list)


def check_examples(examples: Sequence[Example], shape: MMTShape, *, with_regions: bool) -> None:
    """Reject examples the model cannot train on; the message names the first bad example's index.

    Raises:
        ValueError: no examples, a target not ending with EOS, a sentence over ``shape.max_len`` tokens, an
            id outside its vocabulary, an empty text-only source, or a missing image row when regions are used.
    """
    if not examples:
        raise ValueError("no training examples")
    for index, example in enumerate(examples):
        src, tgt = example.src_ids, example.tgt_ids
        problem = None
        if not tgt or tgt[-1] != shape.eos_id:
            problem = f"the target must end with EOS ({shape.eos_id})"
        elif max(len(src), len(tgt)) > shape.max_len:
            problem = f"longer than max_len={shape.max_len} tokens"
        elif any(not 0 <= i < shape.src_vocab for i in src) or any(not 0 <= i < shape.tgt_vocab for i in tgt):
            problem = "a token id outside the vocabulary"
        elif with_regions and example.image_row is None:
            problem = "no image_row, but training uses regions"
        elif not with_regions and not src:
            problem = "an empty source sentence (text-only)"
        if problem:
            raise ValueError(f"training example {index}: {problem}: {example}")


@runtime_checkable
class KnownLengths(Protocol):
    """Examples that give their lengths without being built (:class:`mmt.encoded.EncodedPairs`)."""

    def lengths(self) -> tuple[np.ndarray, np.ndarray]: ...


def length_batches(
    examples: Sequence[Example],
    *,
    batch_size: int,
    sort_chunk: int,
    rng: np.random.Generator,
    batch_tokens: int = 0,
) -> list[list[int]]:
    """One epoch of batches (example indices): shuffle, sort chunks of ``sort_chunk * batch_size`` examples by length
    (source, then target; a stable sort, so ties keep the shuffled order), cut each into ``batch_size`` examples, or
    with ``batch_tokens`` into runs whose padded targets stay within that many tokens (a longer pair alone)."""
    if isinstance(examples, KnownLengths):
        src_lengths, tgt_lengths = examples.lengths()
    else:
        src_lengths = np.fromiter((len(example.src_ids) for example in examples), dtype=np.int64, count=len(examples))
        tgt_lengths = np.fromiter((len(example.tgt_ids) for example in examples), dtype=np.int64, count=len(examples))
    order = rng.permutation(len(examples))
    chunk = batch_size * sort_chunk
    batches: list[list[int]] = []
    for start in range(0, len(order), chunk):
        part = order[start : start + chunk]
        part = part[np.lexsort((tgt_lengths[part], src_lengths[part]))]
        if batch_tokens:
            batches += [part[first:last].tolist() for first, last in _token_cuts(tgt_lengths[part], batch_tokens)]
        else:
            batches += [part[first : first + batch_size].tolist() for first in range(0, len(part), batch_size)]
    return [batches[i] for i in rng.permutation(len(batches))]


def _token_cuts(lengths: np.ndarray, budget: int) -> list[tuple[int, int]]:
    """Consecutive [first, last) runs of ``lengths`` whose count times their longest stays within ``budget`` (at
    least one item each)."""
    cuts, first, longest = [], 0, 0
    for position, length in enumerate(lengths.tolist()):
        longest_with = max(longest, length)
        if position > first and longest_with * (position - first + 1) > budget:
            cuts.append((first, position))
            first, longest_with = position, length
        longest = longest_with
    if len(lengths):
        cuts.append((first, len(lengths)))
    return cuts


def collate(
    examples: Sequence[Example],
    indices: Sequence[int],
    *,
    regions: RegionLookup | None,
    shape: MMTShape,
    device: torch.device,
) -> tuple[SourceBatch, torch.Tensor, torch.Tensor]:
    """A teacher-forcing batch.

    Returns:
        batch: Sources (B, N) and, with ``regions``, their (B, K, D) features and (B, K) mask.
        tgt_in: (B, M) decoder inputs, BOS + target without its final EOS, PAD-padded.
        tgt_out: (B, M) the targets y_1..y_M (EOS last), PAD-padded.
    """
    chosen = [examples[i] for i in indices]
    features = mask = None
    if regions is not None:
        features, mask, _ = regions.batch(np.array([example.image_row for example in chosen], dtype=np.int64))
    batch = source_batch(
        [example.src_ids for example in chosen], pad_id=shape.pad_id, device=device, regions=features, region_mask=mask
    )
    tgt_in = pad_ids([(shape.bos_id, *example.tgt_ids[:-1]) for example in chosen], pad_id=shape.pad_id, device=device)
    tgt_out = pad_ids([example.tgt_ids for example in chosen], pad_id=shape.pad_id, device=device)
    return batch, tgt_in, tgt_out


def mmt_loss(
    model: RegionalMMT,
    batch: SourceBatch,
    tgt_in: torch.Tensor,
    tgt_out: torch.Tensor,
    *,
    tokens: int | None = None,
    label_smoothing: float = 0.0,
) -> torch.Tensor:
    """Eq. 6 per target token: cross-entropy of the teacher-forced predictions (optionally label-smoothed), PAD
    positions ignored; the mean over the batch's target tokens, or their sum divided by ``tokens`` (a share of a
    larger batch)."""
    logits = model(batch, tgt_in)  # (B, M, V)
    flat_logits, flat_targets = logits.float().flatten(0, 1), tgt_out.flatten()
    pad = model.shape.pad_id
    if tokens is None:
        return F.cross_entropy(flat_logits, flat_targets, ignore_index=pad, label_smoothing=label_smoothing)
    summed = F.cross_entropy(
        flat_logits, flat_targets, ignore_index=pad, reduction="sum", label_smoothing=label_smoothing
    )
    return summed / tokens


def share_loss(
    model: RegionalMMT,
    examples: Sequence[Example],
    indices: Sequence[int],
    *,
    regions: RegionLookup | None,
    device: torch.device,
    label_smoothing: float = 0.0,
) -> torch.Tensor:
    """This data-parallel rank's part of the loss of the batch ``indices``: the summed cross-entropy of its share
    (:func:`common.distributed.share`) over the whole batch's target tokens, so that the parts, and their
    gradients, sum to the mean loss of one process on the whole batch (which it is, in one process)."""
    if world_size() == 1:
        batch, tgt_in, tgt_out = collate(examples, indices, regions=regions, shape=model.shape, device=device)
        return mmt_loss(model, batch, tgt_in, tgt_out, label_smoothing=label_smoothing)
    mine = list(indices)[share(len(indices))]
    tokens = sum(len(examples[i].tgt_ids) for i in indices)  # every target token, EOS included, is scored
    batch, tgt_in, tgt_out = collate(examples, mine, regions=regions, shape=model.shape, device=device)
    return mmt_loss(model, batch, tgt_in, tgt_out, tokens=tokens, label_smoothing=label_smoothing)


class _Selection:
    """Validation bookkeeping: early stopping, the best weights in the checkpoint, the history, one log line each."""

    def __init__(
        self,
        config: TrainConfig,
        seed: int,
        checkpoint_path: str | os.PathLike[str],
        *,
        name: str,
        on_validation: ValidationCallback | None,
        keep_best: bool,
    ) -> None:
        self.config, self.seed, self.path = config, seed, checkpoint_path
        self.name, self.on_validation = name, on_validation
        self.best_score, self.best_step, self.bad = -math.inf, 0, 0
        self.history: list[dict[str, float]] = []
        # the best weights in memory: on data-parallel ranks that do not write, and for the resume state (the
        # checkpoint file may be gone when the run resumes)
        self.keep_best = keep_best or not is_writer()
        self.best_state: dict[str, torch.Tensor] | None = None
        self.best_extra: dict[str, Any] = {}  # the checkpoint's extra fields of the best weights
        self.started = time.perf_counter()
        self.resumed_after = 0  # epochs trained before this process started (the log's time estimates skip them)

    def validate(
        self,
        model: RegionalMMT,
        evaluate: Callable[[RegionalMMT], float],
        step: int,
        epoch: int,
        loss: float,
        *,
        done: float,
    ) -> float:
        """Score the model; save it when it beats the best score (a NaN score never does); log the validation's
        line (``done``: epochs trained so far, a fraction when the validation falls inside an epoch)."""
        with evaluating(model), torch.no_grad():
            score = float(evaluate(model))
        if score > self.best_score:
            self.best_score, self.best_step, self.bad = score, step, 0
            extra = {
                "step": step,
                "epoch": epoch,
                "score": score,
                "train_config": asdict(self.config),
                "seed": self.seed,
            }
            self.best_extra = extra
            if is_writer():
                save_mmt(self.path, model, extra=extra)
            if self.keep_best:
                self.best_state = {key: value.detach().clone() for key, value in model.state_dict().items()}
        else:
            self.bad += 1
        self.history.append({"step": step, "epoch": epoch, "loss": loss, "score": score})
        elapsed, here = time.perf_counter() - self.started, done - self.resumed_after
        line = EpochLine(
            run=self.name,
            epoch=epoch,
            epochs=self.config.epochs,
            loss=loss,
            score_name="val BLEU",
            scores={"": score},
            best=self.best_score,
            step=step,
            seconds_per_epoch=elapsed / here if here > 0 else None,
            seconds_left=seconds_left(elapsed, here, self.config.epochs - self.resumed_after),
            may_stop_early=True,  # patience is always on
        )
        logger.info("%s", format_epoch(line))
        if self.on_validation is not None:
            self.on_validation(line)
        return score

    @property
    def exhausted(self) -> bool:
        return self.bad >= self.config.patience

    def state(self) -> dict[str, Any]:
        """What the resume state keeps of the bookkeeping, the best weights included."""
        return {
            "best_score": self.best_score,
            "best_step": self.best_step,
            "bad": self.bad,
            "history": self.history,
            "best_state": self.best_state,
            "best_extra": self.best_extra,
        }

    def restore(self, state: dict[str, Any], model: RegionalMMT, epoch: int) -> None:
        """Take back :meth:`state` after ``epoch`` finished epochs and write the best weights to the checkpoint
        again (the rerun's checkpoint folder may be a new one); ``model``'s own weights are left as they are."""
        self.best_score, self.best_step, self.bad = state["best_score"], state["best_step"], state["bad"]
        self.history, self.best_state, self.best_extra = state["history"], state["best_state"], state["best_extra"]
        self.resumed_after = epoch
        if is_writer() and self.best_state is not None:
            save_mmt(self.path, model, extra=self.best_extra, state_dict=self.best_state)


def fit(
    model: RegionalMMT,
    train: Sequence[Example],
    *,
    regions: RegionLookup | None,
    evaluate: Callable[[RegionalMMT], float],
    config: TrainConfig,
    seed: int,
    device: torch.device,
    autocast: AutocastFactory,
    checkpoint_path: str | os.PathLike[str],
    progress: Callable[[dict[str, float]], None] | None = None,
    mixed: Sequence[Example] = (),
    name: str = "MMT",
    on_validation: ValidationCallback | None = None,
    resume: ResumePoint | None = None,
    stop: threading.Event | None = None,
) -> FitResult:
    """Train ``model`` with teacher forcing until ``config.epochs`` or early stopping; keep the best weights.

    Args:
        model: The model, moved to ``device`` and trained in place.
        train: Training pairs.
        regions: Region features by ``Example.image_row``; None trains text-only (one thread per sentence).
        evaluate: Validation score of the model, higher is better (the caller's validation BLEU); called in
            eval mode under ``torch.no_grad``.
        config: Optimisation settings.
        seed: Seeds the batch order and torch's global generator (dropout).
        device: Where to train.
        autocast: Returns a fresh autocast context for each forward pass (fp16 also turns on loss scaling).
        checkpoint_path: The checkpoint (stem path) the best weights go to (``save_mmt``); loaded back at the end.
        progress: Called after every batch with its step, epoch and loss, and the score when a validation
            followed it (a validation after the last batch, when ``eval_every`` does not divide the step count,
            is reported on its own with the mean loss since the previous one).
        mixed: Text-only pairs, ``config.mixed_pairs`` of them drawn each epoch (all of them when there are fewer);
            their batches count as steps like the others.
        name: What trains, with its phase (``mmt-en-de finetune``): the start of each validation's log line.
        on_validation: Called with each validation's line (:class:`~common.epoch_log.EpochLine`; epochs counted
            from 1, as everywhere here).
        resume: Where the state goes after every finished epoch (written by the writer rank, read by every rank);
            a state found there with the same fingerprint is continued after its epoch, and a finished one returns
            its result without training. None: no state is kept.
        stop: Checked before each batch: once set, the fit is given up (:class:`common.stopping.Cancelled`); the
            resume state of the last finished epoch stays.

    Returns:
        The best score, its step and the validation history.
    """
    check_examples(train, model.shape, with_regions=regions is not None)
    if config.mixed_pairs:
        if not mixed:
            raise ValueError(f"mixed_pairs is {config.mixed_pairs}, but there are no text-only pairs to mix in")
        check_examples(mixed, model.shape, with_regions=False)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model.to(device).train()
    selection = _Selection(
        config, seed, checkpoint_path, name=name, on_validation=on_validation, keep_best=resume is not None
    )
    state = resume.load() if resume is not None else None
    if state is not None:
        assert resume is not None
        if state["finished"]:
            logger.info("%s: finished before, after epoch %d; its result from %s", name, state["epoch"], resume.path)
            return _finished(model, selection, state, rng)
        logger.info("%s: resuming after epoch %d of %d from %s", name, state["epoch"], config.epochs, resume.path)
        model.load_state_dict(state["model"])
    broadcast_parameters(model)  # data-parallel ranks start from rank 0's weights
    optimizer = adam(parameter_groups(model, config), lr=config.lr, device=device)
    scaler = torch.amp.GradScaler(device.type, enabled=_autocasts_to_fp16(device, autocast))
    step, losses, epoch, done, start = 0, [], 0, 0.0, 1
    if state is not None:
        optimizer.load_state_dict(state["optimizer"])
        scaler.load_state_dict(state["scaler"])
        selection.restore(state["selection"], model, state["epoch"])
        restore_rng_state(state["rng"], rng)
        step, losses, epoch, done = state["step"], state["losses"], state["epoch"], state["done"]
        start = epoch + 1
    for epoch in range(start, config.epochs + 1):
        batches = _epoch_batches(train, mixed, config, rng)
        for position, (text_only, indices) in enumerate(batches, start=1):
            check_stop(stop, f"{name} epoch {epoch}")
            step += 1
            done = epoch - 1 + position / len(batches)
            with autocast():
                smoothing = config.label_smoothing
                if text_only:
                    loss = share_loss(model, mixed, indices, regions=None, device=device, label_smoothing=smoothing)
                else:
                    loss = share_loss(model, train, indices, regions=regions, device=device, label_smoothing=smoothing)
            losses.append(_update(model, optimizer, scaler, loss, clip=config.clip, step=step, epoch=epoch))
            report: dict[str, float] = {"step": step, "epoch": epoch, "loss": losses[-1]}
            epoch_end = position == len(batches)
            if (step % config.eval_every == 0) if config.eval_every else epoch_end:
                report["score"] = selection.validate(model, evaluate, step, epoch, float(np.mean(losses)), done=done)
                losses = []
                decay_on_plateau(optimizer, selection.bad, config)
            if progress is not None:
                progress(report)
            if selection.exhausted or step == config.max_steps:
                break
        if selection.exhausted or step == config.max_steps:
            break
        if resume is not None and is_writer():
            resume.save(
                {
                    "finished": False,
                    "step": step,
                    "epoch": epoch,
                    "done": done,
                    "losses": losses,
                    "model": model.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "scaler": scaler.state_dict(),
                    "rng": rng_state(rng),
                    "selection": selection.state(),
                }
            )
    if losses:  # training ended between two validations
        score = selection.validate(model, evaluate, step, epoch, float(np.mean(losses)), done=done)
        if progress is not None:
            progress({"step": step, "epoch": epoch, "loss": selection.history[-1]["loss"], "score": score})
    if resume is not None and is_writer():  # what a rerun returns at once (a later phase may be what was killed)
        resume.save({"finished": True, "epoch": epoch, "rng": rng_state(rng), "selection": selection.state()})
    best = (
        selection.best_state
        if selection.best_state is not None
        else read_checkpoint(checkpoint_path, device=device)["state_dict"]
    )
    model.load_state_dict(best)
    return FitResult(selection.best_score, selection.best_step, selection.history)


def _finished(model: RegionalMMT, selection: _Selection, state: dict[str, Any], rng: np.random.Generator) -> FitResult:
    """The result of a fit that ended before: its best weights in ``model`` and the checkpoint, and the random
    generators as the fit left them (what follows draws what it would have drawn)."""
    selection.restore(state["selection"], model, state["epoch"])
    assert selection.best_state is not None, "a finished fit validated at least once"
    model.load_state_dict(selection.best_state)
    restore_rng_state(state["rng"], rng)
    return FitResult(selection.best_score, selection.best_step, selection.history)


def _epoch_batches(
    train: Sequence[Example], mixed: Sequence[Example], config: TrainConfig, rng: np.random.Generator
) -> list[tuple[bool, list[int]]]:
    """One epoch's batches as (text_only, indices): the training data's, and with ``config.mixed_pairs`` those of
    a fresh draw from ``mixed``, in one shuffled order (no draw at all without mixing, so that the batch order of
    unmixed training does not change)."""
    batches = [
        (False, indices)
        for indices in length_batches(
            train, batch_size=config.batch_size, sort_chunk=config.sort_chunk, rng=rng, batch_tokens=config.batch_tokens
        )
    ]
    if not config.mixed_pairs:
        return batches
    drawn = rng.choice(len(mixed), size=min(config.mixed_pairs, len(mixed)), replace=False)
    sample = [mixed[i] for i in drawn]
    text_only = length_batches(
        sample, batch_size=config.batch_size, sort_chunk=config.sort_chunk, rng=rng, batch_tokens=config.batch_tokens
    )
    batches += [(True, [int(drawn[i]) for i in indices]) for indices in text_only]
    return [batches[i] for i in rng.permutation(len(batches))]


def decay_on_plateau(optimizer: torch.optim.Optimizer, bad: int, config: TrainConfig) -> None:
    """After a validation: scale every group's learning rate by ``config.lr_decay`` when ``bad`` (validations since
    the best score) has just reached a multiple of ``config.lr_decay_patience``."""
    if config.lr_decay == 1.0 or bad == 0 or bad % config.lr_decay_patience:
        return
    for group in optimizer.param_groups:
        group["lr"] *= config.lr_decay
    logger.info("learning rate decayed by %g to %s", config.lr_decay, [group["lr"] for group in optimizer.param_groups])


def adam(groups: list[dict[str, object]], *, lr: float, device: torch.device) -> torch.optim.Adam:
    """Adam over ``groups``, fused into one kernel per step where torch has one for ``device`` (CPU and CUDA): the
    per-parameter loop of the default implementation is a large share of a CPU training step."""
    return torch.optim.Adam(groups, lr=lr, fused=device.type in ("cpu", "cuda"))


def parameter_groups(model: RegionalMMT, config: TrainConfig) -> list[dict[str, object]]:
    """Adam's parameter groups: the visual parameters at ``lr * visual_lr_scale``, the others at ``lr`` (one group
    when the scale is 1). In text-only training the visual parameters get no gradient, and Adam leaves them be."""
    if config.visual_lr_scale == 1.0:
        return [{"params": list(model.parameters())}]
    visual = [param for name, param in model.named_parameters() if name.startswith(VISUAL_PREFIXES)]
    chosen = {id(param) for param in visual}
    others = [param for param in model.parameters() if id(param) not in chosen]
    return [{"params": others}, {"params": visual, "lr": config.lr * config.visual_lr_scale}]


def _update(
    model: RegionalMMT,
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler,
    loss: torch.Tensor,
    *,
    clip: float,
    step: int,
    epoch: int,
) -> float:
    """Backward, clip the gradient norm, one Adam step; returns the loss value.

    Raises:
        FloatingPointError: a non-finite loss or gradient norm (without fp16 loss scaling, which skips such steps
            itself), before the update, naming the epoch and step.
    """
    value = sum_of(float(loss.detach()), loss.device)  # the batch's loss: every rank's share
    where = f"MMT training diverged at epoch {epoch}, step {step}"
    if not math.isfinite(value) and not scaler.is_enabled():
        raise FloatingPointError(
            f"{where}: the loss is {value} (try a lower learning rate in mmt.pretrain or mmt.finetune)"
        )
    optimizer.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    reduce_gradients(model.parameters(), mean=False)  # the shares' gradients sum to the batch's
    scaler.unscale_(optimizer)  # clip the true gradients, not the scaled ones
    norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), clip))
    if not math.isfinite(norm) and not scaler.is_enabled():
        raise FloatingPointError(f"{where}: the gradient norm is {norm}")
    scaler.step(optimizer)
    scaler.update()
    return value


def _autocasts_to_fp16(device: torch.device, autocast: AutocastFactory) -> bool:
    """Whether ``autocast`` runs float16 on ``device`` (then gradients need loss scaling)."""
    with autocast():
        return torch.is_autocast_enabled(device.type) and torch.get_autocast_dtype(device.type) == torch.float16
