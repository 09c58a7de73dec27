"""Retrieval training throughput: steps/s of SAN and SCAN with the trainer's own step, and the implied epoch time.

What: SAN in the paper's configuration (``SANConfig()``: word_dim 300, hidden 512, Bi-LSTM, linear region
encoder; Huang et al. 2020, Eq. 7) and SCAN in its default one (``SCANConfig()``: t2i LogSumExp, Bi-GRU, 512-d
joint space), freshly initialised, trained on batches of 128 captions (the paper's batch). Data: ``--images``
images of 36 random 2048-d float16 regions held in RAM (``benchkit.RandomRegions``; reading a FeatureStore
batch from the page cache costs a few ms, bench/retrieval_memory.py) and 5 random captions per image of 8-20
tokens from a 10,000-word vocabulary (Flickr30K captions average about 12 words).
How: ``retrieval.train._ranking_step``, the call ``fit`` makes per batch, with the batch source ``fit`` uses
(on a GPU the captions and regions held on the device and each batch gathered there, ``DeviceBatches``; on the
CPU read from the regions and padded on the host, ``HostBatches``): both encoders, the similarity matrix and the
model's own ranking loss, ``RankingLoss("auto").for_model``: harder negatives for SAN, max-violation for SCAN,
under the pipeline's autocast from ``common.runtime``; backward, clipping at 2, one Adam step, on batches from
the trainer's ``BalancedSampler``. ``--warmup`` untimed steps, then ``--steps`` timed ones, the device
synchronised before and after. As in ``fit``, the losses and gradient norms are read back every
``DEVICE_CHECK_EVERY`` steps on a GPU (every step on the CPU), so steps queue up on the device as they would in
training; ``--sections`` adds a run with the device synchronised around each part of the step (ms per step).
Epoch: ceil(145,000 / 128) = 1,133 steps (Multi30K/Flickr30K: 29,000 images x 5 captions); the implied epoch
time is 1,133 / steps/s, validation left out. Goals on one H100: < 2 minutes, i.e. >= 9.44 steps/s; and for SAN at
batch 128, >= 60 steps/s (a step bound by the GPU, not by the host).

    python bench/retrieval_train.py --small                            # CPU: 1,000 images, 2 warm-up + 10 steps
    python bench/retrieval_train.py --device cuda --precision bf16     # 4,000 images, 10 warm-up + 100 steps
    python bench/retrieval_train.py --device cuda --models san --batch 256
    torchrun --nproc-per-node 2 bench/retrieval_train.py --small --threads 1   # data-parallel: the same global batch

Under torchrun each process encodes its share of every batch and the loss runs on the gathered embeddings
(common/distributed.py), so steps/s are those of the whole job; rank 0 prints.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import math
import os
import sys
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import torch
from benchkit import (
    VOCABULARY,
    WORDS,
    RandomRegions,
    add_runtime_arguments,
    emit_json,
    header,
    memory_line,
    peak_memory,
    random_captions,
    reset_peak_memory,
    runtime_from,
    synchronize,
    timed,
)
from step_profile import Profile, wrap_training_step

from common import distributed
from common.runtime import Runtime
from retrieval.data import BalancedSampler, CaptionSet, DeviceBatches, HostBatches
from retrieval.losses import RankingLoss
from retrieval.train import DEVICE_CHECK_EVERY, FiniteWatch, TrainConfig, _ranking_step, read_losses
from retrieval.zoo.registry import build_model, make_config

EPOCH_CAPTIONS = 145_000  # Multi30K / Flickr30K training captions: 29,000 images x 5
GOAL_EPOCH_S = 120.0
GOAL_SAN_STEPS_PER_S = 60.0  # at batch 128 on one H100/H200: the step bound by the GPU, not the host


def batch_stream(train: CaptionSet, batch_size: int) -> Iterator[np.ndarray]:
    """Batches as ``fit`` draws them, epoch after epoch."""
    sampler = BalancedSampler(train.synthetic, batch_size, TrainConfig().synthetic_fraction, seed=0)
    return itertools.chain.from_iterable(sampler.batches(epoch) for epoch in itertools.count())


def bench_model(
    name: str,
    train: CaptionSet,
    regions: RandomRegions,
    runtime: Runtime,
    *,
    batch: int,
    warmup: int,
    steps: int,
    model_config: Mapping[str, Any] | None = None,
    sections: bool = False,
) -> dict[str, Any]:
    """Steps/s of ``name`` over ``steps`` timed steps after ``warmup`` untimed ones, and its peak memory.
    ``model_config``: the model's settings (``retrieval.configs.<name>`` of params.yaml); missing ones keep defaults.
    ``sections``: also time each part of the step with the device synchronised around it (``sections_ms``: ms per
    step); those waits slow the step, so take steps/s from a run without them."""
    device, autocast = runtime.torch_device(), runtime.autocast()
    torch.manual_seed(0)
    model = build_model(
        name, make_config(name, model_config or {}), vocab_size=VOCABULARY, languages=1, region_dim=2048
    )
    model.to(device).train()
    config = TrainConfig(batch_size=batch)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    loss = RankingLoss("auto").for_model(name, model.default_loss)
    weights = torch.tensor(loss.type_weights(train.type_names), device=device)
    batches = batch_stream(train, batch)
    source = DeviceBatches(train, regions, device) if device.type != "cpu" else HostBatches(train, regions, device)
    watch = FiniteWatch(1 if device.type == "cpu" else DEVICE_CHECK_EVERY)
    values: list[torch.Tensor] = []

    def step(number: int) -> None:
        arguments = (model, source, next(batches), optimizer, loss, weights, config, device, autocast, 0.0)
        values.append(_ranking_step(*arguments, where=f"bench step {number}", watch=watch))

    profile = Profile(sync=lambda: synchronize(device))
    if sections:
        wrap_training_step(profile, type(model))
    reset_peak_memory(device)
    for number in range(warmup):
        step(number)

    def timed_steps() -> None:
        profile.counting = True
        for n in range(steps):
            step(warmup + n)
        watch.check()  # the last steps' reads, as fit makes them at the end of an epoch
        profile.counting = False

    _, seconds = timed(timed_steps, device)
    profile.restore()
    losses = read_losses(values)
    steps_per_s = steps / seconds
    epoch_steps = math.ceil(EPOCH_CAPTIONS / batch)
    result: dict[str, Any] = {
        "parameters": sum(p.numel() for p in model.parameters()),
        "steps_per_s": steps_per_s,
        "ms_per_step": 1000 / steps_per_s,
        "epoch_steps": epoch_steps,
        "epoch_s": epoch_steps / steps_per_s,
        **peak_memory(device),
    }
    if sections:
        parts_ms = {part: 1000 * value / steps for part, value in profile.seconds.items()}
        parts_ms["other"] = max(0.0, 1000 * seconds / steps - sum(parts_ms.values()))
        result["sections_ms"] = parts_ms
        parts = ", ".join(f"{part} {ms:.2f}" for part, ms in parts_ms.items())
        print(f"  {name} step, ms per part (device synchronised around each): {parts}")
    print(
        f"RESULT {name.upper()} training, batch {batch}: {steps_per_s:.3f} steps/s ({1000 / steps_per_s:.0f} ms/step, "
        f"{steps} steps after {warmup} warm-up, loss {losses[0]:.3f} -> {losses[-1]:.3f}); implied epoch of "
        f"{EPOCH_CAPTIONS:,} captions ({epoch_steps:,} steps): {result['epoch_s'] / 60:.1f} min"
    )
    print(f"  {name}: {result['parameters'] / 1e6:.2f} M parameters, loss {loss.kind}; {memory_line(result)}")
    if device.type == "cuda":
        verdict = "met" if result["epoch_s"] < GOAL_EPOCH_S else "missed"
        print(f"  goal: an epoch in < {GOAL_EPOCH_S / 60:g} min on one GPU: {verdict}")
        if name == "san" and batch == 128:
            verdict = "met" if steps_per_s >= GOAL_SAN_STEPS_PER_S else "missed"
            print(f"  goal: >= {GOAL_SAN_STEPS_PER_S:g} SAN steps/s at batch 128 on one GPU: {verdict}")
    return result


def parse_args() -> tuple[argparse.Namespace, argparse.ArgumentParser]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_runtime_arguments(parser)
    parser.add_argument("--models", nargs="+", choices=("san", "scan"), default=["san", "scan"])
    parser.add_argument("--batch", type=int, default=128, help="captions per batch (the paper: 128)")
    parser.add_argument("--images", type=int, help="images in RAM, 5 captions each (default 4000; --small: 1000)")
    parser.add_argument("--steps", type=int, help="timed steps per model (default 100; --small: 10)")
    parser.add_argument("--warmup", type=int, help="untimed steps per model (default 10; --small: 2)")
    parser.add_argument("--sections", action="store_true", help="also time each part of a step (a separate run)")
    args = parser.parse_args()
    args.images = args.images or (1000 if args.small else 4000)
    args.steps = args.steps or (10 if args.small else 100)
    args.warmup = args.warmup if args.warmup is not None else (2 if args.small else 10)
    return args, parser


def main() -> None:
    args, parser = parse_args()
    runtime = runtime_from(args, parser)
    joint: contextlib.AbstractContextManager[object] = contextlib.nullcontext()
    if distributed.under_torchrun():  # `torchrun --nproc-per-node N bench/retrieval_train.py`: the data-parallel step
        runtime = Runtime(distributed.start(runtime.device), runtime.precision)
        joint = distributed.together()
        if not distributed.is_rank_zero():
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - rank 0 reports; the others stay quiet until exit
    with joint:
        run(args, runtime)
    distributed.stop()


def run(args: argparse.Namespace, runtime: Runtime) -> None:
    regions, train = RandomRegions(args.images), random_captions(args.images)
    print(header(runtime))
    print(
        f"{args.images:,} images x 36 x 2048 float16 in RAM, {len(train):,} captions of {WORDS[0]}-{WORDS[1]} tokens, "
        f"vocabulary {VOCABULARY:,}, batch {args.batch} (over {distributed.world_size()} data-parallel processes)"
    )
    results = {
        name: bench_model(name, train, regions, runtime, batch=args.batch, warmup=args.warmup, steps=args.steps)
        for name in args.models
    }
    for name in args.models if args.sections else []:
        profiled = bench_model(
            name, train, regions, runtime, batch=args.batch, warmup=args.warmup, steps=args.steps, sections=True
        )
        results[name]["sections_ms"] = profiled["sections_ms"]
    sizes = {
        "batch": args.batch,
        "images": args.images,
        "steps": args.steps,
        "warmup": args.warmup,
        "processes": distributed.world_size(),
    }
    emit_json("retrieval_train", runtime, sizes, results)


if __name__ == "__main__":
    main()
