"""MMT training throughput: target tokens/s and steps/s of RegionalMMT fine-tuning with K=36 x 2048 regions.

What: a randomly initialised RegionalMMT of realistic size (emb 256, hidden 512, dropout 0.3, 8,000-token source
and target vocabularies: nmtpytorch-like, as bench/mmt_decode.py) trained on random sentence pairs of 12-20
tokens (the target ends with EOS) whose images have 36 random 2048-d regions held in RAM.
How: the training step of ``mmt.train.fit``, replicated one call at a time (``fit`` itself also validates and
writes checkpoints): batches from ``length_batches`` (shuffled, sorted by length in chunks of 20 batches, as
in training, so padding is realistic), ``collate`` (regions read, ids padded, moved to the device), the loss
``mmt_loss`` under the pipeline's autocast (``common.runtime``), and ``_update``: backward, gradient-norm
clipping at 5 and one Adam step (GradScaler exactly as ``fit`` builds it). ``--warmup`` untimed steps, then
``--steps`` timed ones, the device synchronised before and after (``_update`` reads the loss value every step,
as in training, so steps do not queue up). Target tokens = non-PAD target positions (EOS included), the
tokens the loss is the mean over. ``--regions 0`` times text-only pre-training instead.

    python bench/mmt_train.py --small                          # CPU: batch 32, 1 warm-up + 5 steps
    python bench/mmt_train.py --device cuda --precision bf16   # batch 32, 5 warm-up + 50 steps
    python bench/mmt_train.py --device cuda --batch 128 --regions 0
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import numpy as np
import torch
from benchkit import (
    RandomRegions,
    add_runtime_arguments,
    emit_json,
    header,
    memory_line,
    peak_memory,
    reset_peak_memory,
    runtime_from,
    timed,
)

from common.runtime import Runtime
from mmt.model import MMTConfig, MMTShape, RegionalMMT
from mmt.train import (
    Example,
    TrainConfig,
    _autocasts_to_fp16,
    _update,
    adam,
    check_examples,
    collate,
    length_batches,
    mmt_loss,
    parameter_groups,
)

MULTI30K_PAIRS = 29_000  # sentence pairs of one fine-tuning epoch on Multi30K (the implied epoch time)


def random_examples(count: int, shape: MMTShape, *, lengths: tuple[int, int], with_regions: bool) -> list[Example]:
    """``count`` pairs of random ids, each with its own image row; targets end with EOS, as ``fit`` requires."""
    rng = np.random.default_rng(0)
    first = shape.eos_id + 1  # ids below are PAD/UNK/BOS/EOS

    def sentence(vocab: int) -> tuple[int, ...]:
        return tuple(rng.integers(first, vocab, size=int(rng.integers(lengths[0], lengths[1] + 1))).tolist())

    return [
        Example(sentence(shape.src_vocab), (*sentence(shape.tgt_vocab), shape.eos_id), row if with_regions else None)
        for row in range(count)
    ]


def batch_stream(examples: list[Example], config: TrainConfig) -> Iterator[list[int]]:
    """Batches as ``fit`` draws them, epoch after epoch."""
    rng = np.random.default_rng(0)
    while True:
        yield from length_batches(examples, batch_size=config.batch_size, sort_chunk=config.sort_chunk, rng=rng)


def train_steps(
    model: RegionalMMT,
    examples: list[Example],
    regions: RandomRegions | None,
    config: TrainConfig,
    runtime: Runtime,
    *,
    warmup: int,
    steps: int,
) -> tuple[float, int, list[float]]:
    """Seconds of ``steps`` timed training steps after ``warmup`` untimed ones, their target tokens, the losses."""
    device, autocast = runtime.torch_device(), runtime.autocast()
    model.to(device).train()
    optimizer = adam(parameter_groups(model, config), lr=config.lr, device=device)
    scaler = torch.amp.GradScaler(device.type, enabled=_autocasts_to_fp16(device, autocast))
    batches = batch_stream(examples, config)
    losses: list[float] = []

    def step(number: int) -> int:
        indices = next(batches)
        batch, tgt_in, tgt_out = collate(examples, indices, regions=regions, shape=model.shape, device=device)
        with autocast():
            loss = mmt_loss(model, batch, tgt_in, tgt_out)
        losses.append(_update(model, optimizer, scaler, loss, clip=config.clip, step=number, epoch=1))
        return sum(len(examples[i].tgt_ids) for i in indices)  # = (tgt_out != PAD).sum(), without a sync

    for number in range(1, warmup + 1):
        step(number)
    tokens, seconds = timed(lambda: sum(step(warmup + n) for n in range(1, steps + 1)), device)
    return seconds, tokens, losses


def parse_args() -> tuple[argparse.Namespace, argparse.ArgumentParser]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_runtime_arguments(parser)
    parser.add_argument("--batch", type=int, default=32, help="sentences per batch (fit's default: 32)")
    parser.add_argument("--steps", type=int, help="timed steps (default 50; --small: 5)")
    parser.add_argument("--warmup", type=int, help="untimed steps first (default 5; --small: 1)")
    parser.add_argument("--regions", type=int, default=36, help="K regions per image; 0 = text-only")
    parser.add_argument("--region-dim", type=int, default=2048)
    parser.add_argument("--vocab", type=int, default=8000, help="source and target vocabulary size")
    parser.add_argument("--emb", type=int, default=256)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--min-len", type=int, default=12, help="shortest sentence in tokens (target: + EOS)")
    parser.add_argument("--max-len", type=int, default=20, help="longest sentence in tokens (target: + EOS)")
    args = parser.parse_args()
    args.steps = args.steps or (5 if args.small else 50)
    args.warmup = args.warmup if args.warmup is not None else (1 if args.small else 5)
    return args, parser


def main() -> None:
    args, parser = parse_args()
    runtime = runtime_from(args, parser)
    device = runtime.torch_device()
    with_regions = args.regions > 0
    shape = MMTShape(src_vocab=args.vocab, tgt_vocab=args.vocab, region_dim=args.region_dim)
    model = RegionalMMT(MMTConfig(emb_dim=args.emb, hidden=args.hidden), shape)
    config = TrainConfig(batch_size=args.batch)
    # enough pairs for length-sorted chunks of sort_chunk batches, every step a distinct batch
    count = args.batch * max(config.sort_chunk, args.warmup + args.steps)
    examples = random_examples(count, shape, lengths=(args.min_len, args.max_len), with_regions=with_regions)
    check_examples(examples, shape, with_regions=with_regions)
    regions = RandomRegions(count, args.regions, args.region_dim) if with_regions else None
    params = sum(p.numel() for p in model.parameters())
    print(header(runtime))
    print(
        f"RegionalMMT emb {args.emb} / hidden {args.hidden} / vocab {args.vocab}: {params / 1e6:.2f} M parameters; "
        f"batch {args.batch}, {args.min_len}-{args.max_len} tokens, "
        + (f"K={args.regions} x {args.region_dim} regions" if with_regions else "text-only")
    )
    reset_peak_memory(device)
    seconds, tokens, losses = train_steps(
        model, examples, regions, config, runtime, warmup=args.warmup, steps=args.steps
    )
    steps_per_s, tokens_per_s = args.steps / seconds, tokens / seconds
    epoch_min = MULTI30K_PAIRS / args.batch / steps_per_s / 60
    print(
        f"RESULT MMT training: {tokens_per_s:,.0f} target tokens/s, {steps_per_s:.3f} steps/s, "
        f"{steps_per_s * args.batch:.1f} sentences/s ({args.steps} steps in {seconds:.1f} s after {args.warmup} "
        f"warm-up; loss {losses[0]:.2f} -> {losses[-1]:.2f})"
    )
    print(f"implied epoch of {MULTI30K_PAIRS:,} pairs (Multi30K): {epoch_min:.1f} min")
    memory = peak_memory(device)
    print(memory_line(memory))
    sizes = {
        "batch": args.batch,
        "steps": args.steps,
        "warmup": args.warmup,
        "regions": args.regions,
        "region_dim": args.region_dim,
        "vocab": args.vocab,
        "emb": args.emb,
        "hidden": args.hidden,
        "lengths": [args.min_len, args.max_len],
        "parameters": params,
    }
    results = {
        "target_tokens_per_s": tokens_per_s,
        "steps_per_s": steps_per_s,
        "sentences_per_s": steps_per_s * args.batch,
        "multi30k_epoch_min": epoch_min,
        **memory,
    }
    emit_json("mmt_train", runtime, sizes, results)


if __name__ == "__main__":
    main()
