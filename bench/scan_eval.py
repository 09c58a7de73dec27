"""Benchmark of SCAN evaluation, 1K images x 5K captions, on the CPU or CUDA (not a test; prints numbers).

(a) Scoring a 1K test set (1,000 images x 5,000 captions, 5 per image) with the batched ``SCAN.similarity``
    against two per-caption loops of the reference algorithm (``shard_xattn_*``: image shards of 128; for every
    caption, the caption repeated once per image of the shard and one ``func_attention`` call):
    - "reference loop": the tensor operations of the reference's ``func_attention``/``xattn_score_*``/
      ``cosine_similarity`` in their order, with its copies (``repeat``, ``contiguous`` after transposes, the
      attended vectors computed as contextᵀ·attnᵀ, a norm as pow-sum-sqrt);
    - "lean loop": the same per-caption algorithm without those copies, a stronger baseline.
    Inputs are random joint-space features of the real shapes: 36 unit region vectors of 512 dimensions per
    image, captions of 8-20 unit word vectors, each word a noisy copy of one of its image's regions (so recall
    is neither 0 nor 100%). The loops are too slow to run in full on a few cores: the three implementations are
    timed on the same first ``--loop-captions`` captions against all images, alternately, best of
    ``--repeats`` (other processes make single timings noisy); the speedups come from these matched timings,
    and the loops' full-set times are extrapolated linearly (every caption costs the same number of
    ``func_attention`` calls). The vectorised similarity is also timed on the full set. Separately, everything
    is computed in full on the first ``--check-images`` images and their captions, in float32 and float64 (the
    reference evaluates in float64), and R@1/5/10 of both directions must be identical (asserted in float64,
    where the implementations differ by ~1e-16; float32 differs by ~1e-7, where a near-tie could in principle
    move a rank, so it is reported, not asserted).
(b) Evaluation of the same test set size with SAN (default config) against SCAN (default config), on the
    evaluation path of training and testing (``retrieval.inference``: what ``evaluate`` calls in one process):
    ``encode_images`` of 36 x 2048 raw float16 region features (``benchkit.RandomRegions``), ``encode_texts``
    of random captions of 8-20 tokens, ``similarity_matrix`` of every pair and ``rank_metrics``; the total is
    the evaluation time. Goal for SCAN on one H100: < 30 s.

Device and precision: everything runs on ``--device``. The full-set vectorised scoring of (a) and all of (b)
run under the pipeline's autocast (``common.runtime``; bf16 by default on CUDA); with bf16, (a) also scores
the full set in fp32 and compares R@K. The loops' matched timings and the identity check compare algorithms,
so they run without autocast (fp32, and float64 for the check).

Thread pools stall when another process holds a core: on a shared machine pass ``--threads 1``.

    python bench/scan_eval.py [--threads 2] [--images 1000] [--captions 5000] [--loop-captions 128]
        [--check-images 100] [--direction t2i] [--skip-inference]
    python bench/scan_eval.py --small --threads 2                # CPU: 500 x 2,500, loops on 64 captions
    python bench/scan_eval.py --device cuda --precision bf16     # 1,000 x 5,000
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

import torch
import torch.nn.functional as F
from benchkit import (
    RandomRegions,
    add_runtime_arguments,
    emit_json,
    header,
    memory_line,
    peak_memory,
    random_captions,
    reset_peak_memory,
    runtime_from,
)
from benchkit import timed as device_timed
from torch import Tensor

from common.runtime import Runtime
from retrieval.data import images_of
from retrieval.encoders import l2norm
from retrieval.evaluation import rank_metrics
from retrieval.inference import encode_images, encode_texts, similarity_matrix
from retrieval.model import Embedded
from retrieval.zoo.san import SAN, SANConfig
from retrieval.zoo.scan import SCAN, SCANConfig

EPS = 1e-8
SHARD = 128  # the reference's shard size in both axes
GOAL_SCAN_S = 30.0  # seconds for SCAN's 1K x 5K evaluation on one H100
T = TypeVar("T")
Scorer = Callable[[Tensor, Tensor, list[int], SCANConfig], Tensor]


def reference_attention(query: Tensor, context: Tensor, config: SCANConfig) -> Tensor:
    """(B, Lq, d) query, (B, Ls, d) context -> (B, Lq, d) attended context, with the reference's operations."""
    batch, sources, queries = context.shape[0], context.shape[1], query.shape[1]
    attn = torch.bmm(context, torch.transpose(query, 1, 2))  # (B, Ls, Lq)
    norm = config.raw_feature_norm
    if norm == "softmax":
        attn = torch.softmax(attn.view(batch * sources, queries), dim=1).view(batch, sources, queries)
    if norm in ("clipped_l2norm", "clipped"):
        attn = F.leaky_relu(attn, 0.1)
    if norm in ("clipped_l2norm", "l2norm"):
        attn = torch.div(attn, torch.pow(attn, 2).sum(dim=2, keepdim=True).sqrt() + EPS)
    attn = torch.transpose(attn, 1, 2).contiguous().view(batch * queries, sources)
    attn = torch.softmax(attn * config.lambda_softmax, dim=1).view(batch, queries, sources)
    attn_t = torch.transpose(attn, 1, 2).contiguous()
    attended = torch.bmm(torch.transpose(context, 1, 2), attn_t)  # (B, d, Lq)
    return torch.transpose(attended, 1, 2)


def reference_cosine(x1: Tensor, x2: Tensor) -> Tensor:
    """(B, L, d) x2 -> (B, L), norm product clamped at 1e-8."""
    return torch.sum(x1 * x2, 2) / (torch.norm(x1, 2, 2) * torch.norm(x2, 2, 2)).clamp(min=EPS)


def lean_attention(query: Tensor, context: Tensor, config: SCANConfig) -> Tensor:
    """The same attention without the reference's copies."""
    scores = torch.bmm(context, query.transpose(1, 2))  # (B, Ls, Lq)
    norm = config.raw_feature_norm
    if norm in ("clipped_l2norm", "clipped"):
        scores = F.leaky_relu(scores, 0.1)
    if norm in ("clipped_l2norm", "l2norm"):
        scores = scores / (scores.norm(dim=2, keepdim=True) + EPS)
    elif norm == "softmax":
        scores = torch.softmax(scores, dim=2)
    weights = torch.softmax(scores.transpose(1, 2) * config.lambda_softmax, dim=2)  # (B, Lq, Ls)
    return torch.bmm(weights, context)


def lean_cosine(x1: Tensor, x2: Tensor) -> Tensor:
    return (x1 * x2).sum(2) / (x1.norm(dim=2) * x2.norm(dim=2)).clamp(min=EPS)


def per_caption_loop(
    attention: Callable[[Tensor, Tensor, SCANConfig], Tensor], cosine: Callable[[Tensor, Tensor], Tensor]
) -> Scorer:
    """A scorer of (n_img, K, d) regions (all real) and (n_cap, L, d) words -> (n_img, n_cap), one caption and
    one shard of images at a time."""

    def scores(images: Tensor, captions: Tensor, lengths: list[int], config: SCANConfig) -> Tensor:
        sims = images.new_zeros(images.shape[0], captions.shape[0])
        for first in range(0, images.shape[0], SHARD):
            shard = images[first : first + SHARD]
            for index, length in enumerate(lengths):
                words = captions[index, :length].unsqueeze(0).contiguous().repeat(shard.shape[0], 1, 1)
                if config.direction == "t2i":
                    relevance = cosine(words, attention(words, shard, config).contiguous())  # (shard, length)
                else:
                    relevance = cosine(shard, attention(shard, words, config).contiguous())  # (shard, K)
                if config.aggregation == "lse":
                    score = torch.log(relevance.mul_(config.lambda_lse).exp_().sum(1)) / config.lambda_lse
                else:
                    score = relevance.mean(1)
                sims[first : first + SHARD, index] = score
        return sims

    return scores


LOOPS: dict[str, Scorer] = {
    "reference loop": per_caption_loop(reference_attention, reference_cosine),
    "lean loop": per_caption_loop(lean_attention, lean_cosine),
}


def joint_features(
    n_img: int, n_cap: int, *, regions: int, dim: int, words: tuple[int, int], noise: float
) -> tuple[Embedded, Embedded]:
    """Unit region vectors and captions whose words are noisy copies of their image's regions."""
    generator = torch.Generator().manual_seed(0)
    images = l2norm(torch.randn(n_img, regions, dim, generator=generator))
    lengths = torch.randint(words[0], words[1] + 1, (n_cap,), generator=generator)
    longest = int(lengths.max())
    owner = torch.arange(n_cap) // (n_cap // n_img)
    picked = torch.randint(0, regions, (n_cap, longest), generator=generator)
    copies = images[owner.unsqueeze(1), picked]  # (n_cap, longest, dim)
    vectors = l2norm(copies + noise * torch.randn(copies.shape, generator=generator) / dim**0.5)
    mask = torch.arange(longest).unsqueeze(0) < lengths.unsqueeze(1)
    return Embedded(images, torch.ones(n_img, regions, dtype=torch.bool)), Embedded(vectors * mask[..., None], mask)


def timed(function: Callable[[], T], device: torch.device) -> tuple[T, float]:
    """``function()`` without autograd, and the seconds it took (the device synchronised around it)."""
    with torch.no_grad():
        return device_timed(function, device)


def recalls(sims: Tensor, per_image: int) -> dict[str, float]:
    """R@1/5/10 of both directions (bf16 scores ranked as float32; float64 kept)."""
    scores = sims.float() if sims.dtype in (torch.float16, torch.bfloat16) else sims
    metrics = rank_metrics(scores.cpu(), torch.arange(sims.shape[1]) // per_image)
    return {f"{name}_{key}": metrics[name][key] for name in ("i2t", "t2i") for key in ("r1", "r5", "r10")}


def check_identity(model: SCAN, images: Embedded, texts: Embedded, per_image: int) -> None:
    """Everything in full on a subset, float32 and float64: the same R@K?"""
    assert texts.mask is not None
    device = images.vectors.device
    lengths = texts.mask.sum(1).tolist()
    print(f"identity check on {len(images)} images x {len(texts)} captions (all computed in full):")
    for dtype in (torch.float32, torch.float64):
        regions, words = images.vectors.to(dtype), texts.vectors.to(dtype)
        pair = Embedded(regions, images.mask), Embedded(words, texts.mask)
        vectorised, _ = timed(partial(model.similarity, *pair), device)
        found = recalls(vectorised, per_image)
        print(f"  {dtype} vectorised: " + "  ".join(f"{key} {value:.1f}" for key, value in found.items()))
        for name, loop in LOOPS.items():
            expected, _ = timed(partial(loop, regions, words, lengths, model.config), device)
            difference = float((vectorised - expected).abs().max())
            same = found == recalls(expected, per_image)
            print(f"    vs {name}: max |difference| {difference:.1e}; R@K identical: {same}")
            if dtype == torch.float64:
                assert same, f"R@K of the vectorised similarity and the {name} differ"


def matched_timings(model: SCAN, images: Embedded, texts: Embedded, repeats: int) -> dict[str, float]:
    """Best-of-``repeats`` seconds of the vectorised similarity and each loop on the same pairs, alternating."""
    assert texts.mask is not None
    lengths = texts.mask.sum(1).tolist()
    scorers: dict[str, Callable[[], Tensor]] = {"vectorised": partial(model.similarity, images, texts)}
    for name, loop in LOOPS.items():
        scorers[name] = partial(loop, images.vectors, texts.vectors, lengths, model.config)
    best = dict.fromkeys(scorers, float("inf"))
    for _ in range(repeats):
        for name, scorer in scorers.items():
            best[name] = min(best[name], timed(scorer, images.vectors.device)[1])
    return best


def scoring_benchmark(args: argparse.Namespace, runtime: Runtime) -> dict[str, float]:
    """(a): the vectorised similarity on the full set (under autocast), matched loop timings, the identity check."""
    device, autocast = runtime.torch_device(), runtime.autocast()
    per_image = args.captions // args.images
    model = SCAN(SCANConfig(hidden=args.dim, direction=args.direction), vocab_size=10, languages=1, region_dim=1)
    model.to(device)
    images, texts = joint_features(
        args.images, args.captions, regions=args.regions, dim=args.dim, words=(8, 20), noise=args.noise
    )
    images, texts = images.detached(device), texts.detached(device)
    print(f"(a) SCAN {args.direction} LSE scoring of {args.images} images x {args.captions} captions")

    def full() -> Tensor:
        with autocast():
            return model.similarity(images, texts)

    sims, full_s = timed(full, device)
    results = {"scoring_s": full_s}
    if runtime.precision != "fp32":
        reference, fp32_s = timed(lambda: model.similarity(images, texts), device)
        low, exact = recalls(sims, per_image), recalls(reference, per_image)
        shift = max(abs(low[key] - exact[key]) for key in exact)
        print(
            f"  vectorised, full set: {runtime.precision} {full_s:.2f} s, fp32 {fp32_s:.2f} s; rsum "
            f"{sum(low.values()):.1f} vs {sum(exact.values()):.1f}, largest R@K change {shift:.1f} points"
        )
        results.update({"scoring_fp32_s": fp32_s, "rsum": sum(low.values()), "rsum_fp32": sum(exact.values())})
    subset = min(args.loop_captions, args.captions)
    matched = matched_timings(model, images, texts.slice(0, subset), args.repeats)
    scale = args.captions / subset
    print(f"  {'':16} {'first ' + str(subset) + ' captions':>22} {'all ' + str(args.captions) + ' captions':>22}")
    print(f"  {'vectorised':16} {matched['vectorised']:20.2f} s {full_s:20.1f} s  ({runtime.precision})")
    for name in LOOPS:
        speedup = matched[name] / matched["vectorised"]
        print(f"  {name:16} {matched[name]:20.2f} s {matched[name] * scale:20.1f} s (extrapolated)  {speedup:.1f}x")
        results[f"{name.split()[0]}_loop_extrapolated_s"] = matched[name] * scale
    print(f"RESULT SCAN {args.direction} scoring, {args.images} x {args.captions}: {full_s:.2f} s (vectorised)")
    check = min(args.check_images, args.images)
    check_identity(model, images.slice(0, check), texts.slice(0, check * per_image), per_image)
    return results


def inference_benchmark(args: argparse.Namespace, runtime: Runtime) -> dict[str, Any]:
    """(b): SAN against SCAN on the evaluation path, encoding from raw region features and token ids included."""
    device, autocast = runtime.torch_device(), runtime.autocast()
    per_image = args.captions // args.images
    regions = RandomRegions(args.images, args.regions, args.region_dim, seed=1)
    captions = random_captions(args.images, per_image=per_image, vocabulary=args.vocab, seed=1)
    rows, caption_image = images_of(captions.image_rows)
    sizes = {"vocab_size": args.vocab, "languages": 1, "region_dim": args.region_dim}
    print(f"(b) evaluation of {args.images} images ({args.regions} x {args.region_dim}) x {args.captions} captions")
    results: dict[str, Any] = {}
    for model in (SAN(SANConfig(), **sizes), SCAN(SCANConfig(), **sizes)):
        model.to(device)
        reset_peak_memory(device)
        encoded_images, images_s = timed(
            partial(encode_images, model, regions, rows, device=device, batch_size=args.batch, autocast=autocast),
            device,
        )
        encoded_texts, texts_s = timed(
            partial(encode_texts, model, captions, device=device, batch_size=args.batch, autocast=autocast), device
        )
        sims, score_s = timed(
            partial(similarity_matrix, model, encoded_images, encoded_texts, device=device, autocast=autocast), device
        )
        assert sims.shape == (args.images, args.captions)
        _, rank_s = timed(partial(rank_metrics, sims, torch.from_numpy(caption_image)), device)
        total = images_s + texts_s + score_s + rank_s
        memory = peak_memory(device)
        results[model.name] = {
            "encode_images_s": images_s,
            "encode_texts_s": texts_s,
            "score_s": score_s,
            "rank_s": rank_s,
            "total_s": total,
            **memory,
        }
        print(
            f"  {model.name:5} encode images {images_s:6.2f} s + captions {texts_s:6.2f} s + score {score_s:6.2f} s "
            f"+ rank {rank_s:5.2f} s = {total:7.2f} s; {memory_line(memory)}"
        )
        print(f"RESULT {model.name.upper()} evaluation, {args.images} x {args.captions}: {total:.2f} s")
    print(f"  SCAN / SAN time: {results['scan']['total_s'] / results['san']['total_s']:.0f}x")
    if device.type == "cuda":
        verdict = "met" if results["scan"]["total_s"] < GOAL_SCAN_S else "missed"
        print(f"  goal: SCAN evaluation of 1K x 5K in < {GOAL_SCAN_S:g} s on one GPU: {verdict}")
    return results


def parse_args() -> tuple[argparse.Namespace, argparse.ArgumentParser]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_runtime_arguments(parser, threads=os.cpu_count() or 1)
    parser.add_argument("--images", type=int, help="test images (default 1000; --small: 500)")
    parser.add_argument("--captions", type=int, help="a multiple of --images (default 5 per image)")
    parser.add_argument("--regions", type=int, default=36)
    parser.add_argument("--dim", type=int, default=512, help="joint-space size for (a)")
    parser.add_argument("--region-dim", type=int, default=2048, help="raw region feature size for (b)")
    parser.add_argument("--vocab", type=int, default=10000)
    parser.add_argument("--batch", type=int, default=256, help="encoding batch size for (b) (evaluation's 256)")
    parser.add_argument("--direction", choices=["t2i", "i2t"], default="t2i")
    parser.add_argument("--noise", type=float, default=12.0, help="norm of the noise added to each word's region")
    parser.add_argument("--loop-captions", type=int, help="captions the loops are timed on (128; --small: 64)")
    parser.add_argument("--repeats", type=int, default=2, help="matched timings: best of this many")
    parser.add_argument("--check-images", type=int, help="images of the full identity check (100; --small: 50)")
    parser.add_argument("--skip-inference", action="store_true", help="run (a) only")
    args = parser.parse_args()
    small = args.small
    args.images = args.images or (500 if small else 1000)
    args.captions = args.captions or 5 * args.images
    args.loop_captions = args.loop_captions or (64 if small else 128)
    args.check_images = args.check_images or (50 if small else 100)
    if args.captions % args.images:
        parser.error("--captions must be a multiple of --images")
    return args, parser


def main() -> None:
    args, parser = parse_args()
    runtime = runtime_from(args, parser)
    print(header(runtime))
    results: dict[str, Any] = {"scoring": scoring_benchmark(args, runtime)}
    if not args.skip_inference:
        results["evaluation"] = inference_benchmark(args, runtime)
    sizes = {
        "images": args.images,
        "captions": args.captions,
        "regions": args.regions,
        "dim": args.dim,
        "region_dim": args.region_dim,
        "direction": args.direction,
        "loop_captions": args.loop_captions,
        "check_images": args.check_images,
        "batch": args.batch,
    }
    emit_json("scan_eval", runtime, sizes, results)


if __name__ == "__main__":
    main()
