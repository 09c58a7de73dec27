"""Benchmark of SCAN evaluation on CPU (not a test; prints numbers).

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
(b) Inference on the same test set with SAN (default config) against SCAN (default config): encode the images
    (36 x 2048 raw region features) and captions, then score every pair (SAN: one matrix product; SCAN: cross
    attention).

Thread pools stall when another process holds a core: on a shared machine pass ``--threads 1``.

    python bench/scan_eval.py [--threads 2] [--images 1000] [--captions 5000] [--loop-captions 128]
        [--check-images 100] [--direction t2i] [--skip-inference]
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from functools import partial
from typing import TypeVar

import torch
import torch.nn.functional as F
from torch import Tensor

from retrieval.encoders import l2norm
from retrieval.evaluation import rank_metrics
from retrieval.model import Embedded, ImageBatch, RetrievalModel, TextBatch
from retrieval.san import SAN, SANConfig
from retrieval.scan import SCAN, SCANConfig

EPS = 1e-8
SHARD = 128  # the reference's shard size in both axes
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


def timed(function: Callable[[], T]) -> tuple[T, float]:
    """``function()`` without autograd, and the seconds it took."""
    started = time.perf_counter()
    with torch.no_grad():
        result = function()
    return result, time.perf_counter() - started


def recalls(sims: Tensor, per_image: int) -> dict[str, float]:
    """R@1/5/10 of both directions."""
    metrics = rank_metrics(sims, torch.arange(sims.shape[1]) // per_image)
    return {f"{name}_{key}": metrics[name][key] for name in ("i2t", "t2i") for key in ("r1", "r5", "r10")}


def check_identity(model: SCAN, images: Embedded, texts: Embedded, per_image: int) -> None:
    """Everything in full on a subset, float32 and float64: the same R@K?"""
    assert texts.mask is not None
    lengths = texts.mask.sum(1).tolist()
    print(f"identity check on {len(images)} images x {len(texts)} captions (all computed in full):")
    for dtype in (torch.float32, torch.float64):
        regions, words = images.vectors.to(dtype), texts.vectors.to(dtype)
        vectorised, _ = timed(partial(model.similarity, Embedded(regions, images.mask), Embedded(words, texts.mask)))
        found = recalls(vectorised, per_image)
        print(f"  {dtype} vectorised: " + "  ".join(f"{key} {value:.1f}" for key, value in found.items()))
        for name, loop in LOOPS.items():
            expected, _ = timed(partial(loop, regions, words, lengths, model.config))
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
            best[name] = min(best[name], timed(scorer)[1])
    return best


def scoring_benchmark(args: argparse.Namespace) -> None:
    per_image = args.captions // args.images
    model = SCAN(SCANConfig(hidden=args.dim, direction=args.direction), vocab_size=10, languages=1, region_dim=1)
    images, texts = joint_features(
        args.images, args.captions, regions=args.regions, dim=args.dim, words=(8, 20), noise=args.noise
    )
    print(f"(a) SCAN {args.direction} LSE scoring of {args.images} images x {args.captions} captions")
    _, full_s = timed(lambda: model.similarity(images, texts))
    subset = min(args.loop_captions, args.captions)
    matched = matched_timings(model, images, texts.slice(0, subset), args.repeats)
    scale = args.captions / subset
    print(f"  {'':16} {'first ' + str(subset) + ' captions':>22} {'all ' + str(args.captions) + ' captions':>22}")
    print(f"  {'vectorised':16} {matched['vectorised']:20.2f} s {full_s:20.1f} s")
    for name in LOOPS:
        speedup = matched[name] / matched["vectorised"]
        print(f"  {name:16} {matched[name]:20.2f} s {matched[name] * scale:20.1f} s (extrapolated)  {speedup:.1f}x")
    check = min(args.check_images, args.images)
    check_identity(model, images.slice(0, check), texts.slice(0, check * per_image), per_image)


def encode_all(model: RetrievalModel, images: ImageBatch, texts: TextBatch, batch: int) -> tuple[Embedded, Embedded]:
    """Encode images and captions in batches of ``batch``."""
    image_parts = [
        model.encode_images(ImageBatch(images.regions[i : i + batch], images.mask[i : i + batch]))
        for i in range(0, len(images.regions), batch)
    ]
    text_parts = [
        model.encode_texts(
            TextBatch(texts.tokens[i : i + batch], texts.lengths[i : i + batch], texts.langs[i : i + batch])
        )
        for i in range(0, len(texts.tokens), batch)
    ]
    return Embedded.cat(image_parts), Embedded.cat(text_parts)


def inference_benchmark(args: argparse.Namespace) -> None:
    """SAN against SCAN, encoding included, from raw region features and token ids."""
    generator = torch.Generator().manual_seed(1)
    regions = torch.rand(args.images, args.regions, args.region_dim, generator=generator)
    images = ImageBatch(regions, torch.ones(args.images, args.regions, dtype=torch.bool))
    lengths = torch.randint(8, 21, (args.captions,), generator=generator)
    tokens = torch.randint(4, args.vocab, (args.captions, 20), generator=generator)
    tokens = tokens * (torch.arange(20).unsqueeze(0) < lengths.unsqueeze(1))
    texts = TextBatch(tokens, lengths, torch.zeros(args.captions, dtype=torch.long))
    sizes = {"vocab_size": args.vocab, "languages": 1, "region_dim": args.region_dim}
    print(f"(b) inference on {args.images} images ({args.regions} x {args.region_dim}) x {args.captions} captions")
    totals = {}
    for model in (SAN(SANConfig(), **sizes).eval(), SCAN(SCANConfig(), **sizes).eval()):
        (encoded_images, encoded_texts), encode_s = timed(partial(encode_all, model, images, texts, args.batch))
        sims, score_s = timed(partial(model.similarity, encoded_images, encoded_texts))
        assert sims.shape == (args.images, args.captions)
        totals[model.name] = encode_s + score_s
        print(f"  {model.name:5} encode {encode_s:7.2f} s + score {score_s:7.2f} s = {totals[model.name]:7.2f} s")
    print(f"  SCAN / SAN time: {totals['scan'] / totals['san']:.0f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--captions", type=int, default=5000, help="a multiple of --images")
    parser.add_argument("--regions", type=int, default=36)
    parser.add_argument("--dim", type=int, default=512, help="joint-space size for (a)")
    parser.add_argument("--region-dim", type=int, default=2048, help="raw region feature size for (b)")
    parser.add_argument("--vocab", type=int, default=10000)
    parser.add_argument("--batch", type=int, default=128, help="encoding batch size for (b)")
    parser.add_argument("--direction", choices=["t2i", "i2t"], default="t2i")
    parser.add_argument("--noise", type=float, default=12.0, help="norm of the noise added to each word's region")
    parser.add_argument("--loop-captions", type=int, default=128, help="captions the loops are timed on")
    parser.add_argument("--repeats", type=int, default=2, help="matched timings: best of this many")
    parser.add_argument("--check-images", type=int, default=100, help="images of the full identity check")
    parser.add_argument("--skip-inference", action="store_true", help="run (a) only")
    args = parser.parse_args()
    if args.captions % args.images:
        parser.error("--captions must be a multiple of --images")
    torch.set_num_threads(args.threads)
    print(f"{args.threads} thread(s)")
    scoring_benchmark(args)
    if not args.skip_inference:
        inference_benchmark(args)


if __name__ == "__main__":
    main()
