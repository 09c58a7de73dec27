"""Benchmark of MMT beam search on CPU (not a test; prints numbers).

A randomly initialised RegionalMMT of realistic size (emb 256, hidden 512, vocab 8000 on both sides) translates
source sentences of 12-20 tokens. Measured, in sentences/s:
- batched beam search (beam 5, batches of 64) against the per-sentence, per-hypothesis reference search on the
  same model and inputs (outputs must be identical; the slow reference runs on the first ``--reference``
  sentences only);
- the regional model with K=36 regions of 2048-d features against text-only.

A random model almost never emits EOS, so every hypothesis runs to ``--max-len``: the numbers are per
sentence of ``--max-len`` generated tokens (the worst case of a trained model).

Identity: a random model's next-token distribution is nearly flat over 8000 tokens, so two prefixes can differ
by less than float32 rounding, and a batched matrix product may round differently from a one-row one; the
float32 agreement count can then be below 100%. The exact check runs in float64 on ``--exact`` sentences.

    python bench/mmt_decode.py [--threads 2] [--sentences 256] [--reference 16] [--max-len 100]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from mmt.beam import beam_search, beam_search_reference
from mmt.model import MMTConfig, MMTShape, RegionalMMT, source_batch

CPU = torch.device("cpu")


def batched(
    model: RegionalMMT,
    sources: list[list[int]],
    regions: np.ndarray | None,
    *,
    batch_size: int,
    beam: int,
    max_len: int,
) -> tuple[list[list[int]], float]:
    """Outputs of the vectorised search over all sentences and the seconds it took."""
    outputs: list[list[int]] = []
    started = time.perf_counter()
    for start in range(0, len(sources), batch_size):
        stop = min(start + batch_size, len(sources))
        features = None if regions is None else regions[start:stop]
        mask = None if regions is None else np.ones(regions.shape[:2], dtype=bool)[start:stop]
        batch = source_batch(sources[start:stop], pad_id=0, device=CPU, regions=features, region_mask=mask)
        outputs += beam_search(model, batch, beam=beam, max_len=max_len)
    return outputs, time.perf_counter() - started


def one_by_one(
    model: RegionalMMT, sources: list[list[int]], regions: np.ndarray | None, *, beam: int, max_len: int
) -> tuple[list[list[int]], float]:
    """Outputs of the reference search, one sentence at a time, and the seconds it took."""
    outputs = []
    started = time.perf_counter()
    for row, ids in enumerate(sources):
        features = None if regions is None else torch.from_numpy(regions[row])
        mask = None if features is None else torch.ones(features.size(0), dtype=torch.bool)
        outputs.append(
            beam_search_reference(model, ids, regions=features, region_mask=mask, beam=beam, max_len=max_len)
        )
    return outputs, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--sentences", type=int, default=256)
    parser.add_argument("--reference", type=int, default=16, help="sentences for the slow reference search")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--max-len", type=int, default=100)
    parser.add_argument("--regions", type=int, default=36)
    parser.add_argument("--exact", type=int, default=4, help="sentences for the float64 identity check")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    shape = MMTShape(src_vocab=8000, tgt_vocab=8000, region_dim=2048)
    model = RegionalMMT(MMTConfig(emb_dim=256, hidden=512, dropout=0.0), shape).eval()
    rng = np.random.default_rng(0)
    sources = [rng.integers(4, shape.src_vocab, size=int(rng.integers(12, 21))).tolist() for _ in range(args.sentences)]
    regions = rng.random((args.sentences, args.regions, shape.region_dim), dtype=np.float32).astype(np.float16)
    print(
        f"{args.sentences} sentences of 12-20 tokens, beam {args.beam}, max_len {args.max_len}, {args.threads} threads"
    )
    settings = {"beam": args.beam, "max_len": args.max_len}
    text_out, text_s = batched(model, sources, None, batch_size=args.batch, **settings)
    print(f"text-only batched (batch {args.batch}): {len(sources) / text_s:.2f} sentences/s ({text_s:.1f} s)")
    region_out, region_s = batched(model, sources, regions, batch_size=args.batch, **settings)
    print(f"regional K={args.regions} batched: {len(sources) / region_s:.2f} sentences/s ({region_s:.1f} s)")
    print(f"regional / text-only time: {region_s / text_s:.2f}x")
    count = min(args.reference, len(sources))
    for name, outputs, features in (("text-only", text_out, None), (f"regional K={args.regions}", region_out, regions)):
        expected, reference_s = one_by_one(model, sources[:count], features, **settings)
        same = sum(found == wanted for found, wanted in zip(outputs, expected, strict=False))
        batched_rate = len(sources) / (text_s if features is None else region_s)
        print(
            f"{name} reference on {count} sentences: {count / reference_s:.2f} sentences/s ({reference_s:.1f} s); "
            f"batched is {batched_rate * reference_s / count:.1f}x faster; identical outputs (float32): {same}/{count}"
        )
    exact_check(model.double(), sources[: args.exact], regions[: args.exact], **settings)


def exact_check(model: RegionalMMT, sources: list[list[int]], regions: np.ndarray, *, beam: int, max_len: int) -> None:
    """Batched and reference search of a float64 model must agree exactly, text-only and regional."""
    for name, features in (("text-only", None), ("regional", regions.astype(np.float64))):
        found, _ = batched(model, sources, features, batch_size=len(sources), beam=beam, max_len=max_len)
        expected, _ = one_by_one(model, sources, features, beam=beam, max_len=max_len)
        same = sum(a == b for a, b in zip(found, expected, strict=True))
        print(f"float64 {name}: identical outputs {same}/{len(sources)}")


if __name__ == "__main__":
    main()
