"""Benchmark of MMT beam search, sentences/s, on the CPU or CUDA (not a test; prints numbers).

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

Device and precision: the model and every search run on ``--device``, the batched and reference searches under
the pipeline's autocast (``common.runtime``, as ``mmt.translator`` decodes: inference mode + autocast); under
bf16 the reference comparison counts agreements, it does not expect them all. The float64 check runs without
autocast. Timings synchronise the device (the search returns host lists, which waits for the device anyway).

    python bench/mmt_decode.py [--threads 2] [--sentences 256] [--reference 16] [--max-len 100]
    python bench/mmt_decode.py --small                                 # CPU: 64 sentences, 4 reference, 2 exact
    python bench/mmt_decode.py --device cuda --precision bf16 --sentences 2048 --batch 256
"""

from __future__ import annotations

import argparse
import contextlib
import time
from dataclasses import dataclass

import numpy as np
import torch
from benchkit import (
    add_runtime_arguments,
    emit_json,
    header,
    memory_line,
    peak_memory,
    reset_peak_memory,
    runtime_from,
    synchronize,
)

from common.runtime import AutocastFactory
from mmt.beam import beam_search, beam_search_reference, greedy_decode
from mmt.model import MMTConfig, MMTShape, RegionalMMT, source_batch


@dataclass(frozen=True)
class Search:
    """How every search of the bench runs: beam width, most generated tokens, the precision context, and whether
    the batched search is greedy decoding instead (``beam`` then unused)."""

    beam: int
    max_len: int
    autocast: AutocastFactory
    greedy: bool = False


def batched(
    model: RegionalMMT,
    sources: list[list[int]],
    regions: np.ndarray | None,
    search: Search,
    *,
    batch_size: int,
) -> tuple[list[list[int]], float]:
    """Outputs of the vectorised search (beam, or greedy) over all sentences and the seconds it took."""
    device = model.output.weight.device
    outputs: list[list[int]] = []
    synchronize(device)
    started = time.perf_counter()
    for start in range(0, len(sources), batch_size):
        stop = min(start + batch_size, len(sources))
        features = None if regions is None else regions[start:stop]
        mask = None if regions is None else np.ones(regions.shape[:2], dtype=bool)[start:stop]
        batch = source_batch(sources[start:stop], pad_id=0, device=device, regions=features, region_mask=mask)
        with torch.inference_mode(), search.autocast():
            if search.greedy:
                outputs += greedy_decode(model, batch, max_len=search.max_len)
            else:
                outputs += beam_search(model, batch, beam=search.beam, max_len=search.max_len)
    synchronize(device)
    return outputs, time.perf_counter() - started


def one_by_one(
    model: RegionalMMT,
    sources: list[list[int]],
    regions: np.ndarray | None,
    search: Search,
) -> tuple[list[list[int]], float]:
    """Outputs of the reference search, one sentence at a time, and the seconds it took."""
    device = model.output.weight.device
    outputs = []
    synchronize(device)
    started = time.perf_counter()
    for row, ids in enumerate(sources):
        features = None if regions is None else torch.from_numpy(regions[row])
        mask = None if features is None else torch.ones(features.size(0), dtype=torch.bool)
        with torch.inference_mode(), search.autocast():
            found = beam_search_reference(
                model, ids, regions=features, region_mask=mask, beam=search.beam, max_len=search.max_len
            )
        outputs.append(found)
    synchronize(device)
    return outputs, time.perf_counter() - started


def parse_args() -> tuple[argparse.Namespace, argparse.ArgumentParser]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_runtime_arguments(parser)
    parser.add_argument("--sentences", type=int, help="sentences of the batched search (default 256; --small: 64)")
    parser.add_argument("--reference", type=int, help="sentences for the slow reference search (16; --small: 4)")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--max-len", type=int, default=100)
    parser.add_argument("--regions", type=int, default=36)
    parser.add_argument("--exact", type=int, help="sentences for the float64 identity check (4; --small: 2)")
    args = parser.parse_args()
    small = args.small
    args.sentences = args.sentences or (64 if small else 256)
    args.reference = args.reference if args.reference is not None else (4 if small else 16)
    args.exact = args.exact if args.exact is not None else (2 if small else 4)
    return args, parser


def main() -> None:
    args, parser = parse_args()
    runtime = runtime_from(args, parser)
    device, autocast = runtime.torch_device(), runtime.autocast()
    shape = MMTShape(src_vocab=8000, tgt_vocab=8000, region_dim=2048)
    model = RegionalMMT(MMTConfig(emb_dim=256, hidden=512, dropout=0.0), shape).eval().to(device)
    rng = np.random.default_rng(0)
    sources = [rng.integers(4, shape.src_vocab, size=int(rng.integers(12, 21))).tolist() for _ in range(args.sentences)]
    regions = rng.random((args.sentences, args.regions, shape.region_dim), dtype=np.float32).astype(np.float16)
    print(header(runtime))
    print(f"{args.sentences} sentences of 12-20 tokens, beam {args.beam}, max_len {args.max_len}")
    reset_peak_memory(device)
    search = Search(args.beam, args.max_len, autocast)
    text_out, text_s = batched(model, sources, None, search, batch_size=args.batch)
    print(f"text-only batched (batch {args.batch}): {len(sources) / text_s:.2f} sentences/s ({text_s:.1f} s)")
    region_out, region_s = batched(model, sources, regions, search, batch_size=args.batch)
    print(
        f"RESULT MMT beam {args.beam} decoding, regional K={args.regions}, batch {args.batch}: "
        f"{len(sources) / region_s:.2f} sentences/s ({region_s:.1f} s)"
    )
    print(f"regional / text-only time: {region_s / text_s:.2f}x")
    memory = peak_memory(device)  # of the batched searches, the figure a decoding job needs
    print(memory_line(memory))
    results: dict[str, float] = {
        "text_sentences_per_s": len(sources) / text_s,
        "regional_sentences_per_s": len(sources) / region_s,
        **memory,
    }
    count = min(args.reference, len(sources))
    for name, outputs, features in (("text-only", text_out, None), (f"regional K={args.regions}", region_out, regions)):
        expected, reference_s = one_by_one(model, sources[:count], features, search)
        same = sum(found == wanted for found, wanted in zip(outputs, expected, strict=False))
        batched_rate = len(sources) / (text_s if features is None else region_s)
        print(
            f"{name} reference on {count} sentences: {count / reference_s:.2f} sentences/s ({reference_s:.1f} s); "
            f"batched is {batched_rate * reference_s / count:.1f}x faster; identical outputs "
            f"({runtime.precision}): {same}/{count}"
        )
        key = "text" if features is None else "regional"
        results[f"{key}_reference_sentences_per_s"] = count / reference_s
        results[f"{key}_reference_identical"] = same
    exact_check(model.double(), sources[: args.exact], regions[: args.exact], beam=args.beam, max_len=args.max_len)
    sizes = {
        "sentences": args.sentences,
        "reference": count,
        "batch": args.batch,
        "beam": args.beam,
        "max_len": args.max_len,
        "regions": args.regions,
        "model": "emb 256, hidden 512, vocab 8000",
    }
    emit_json("mmt_decode", runtime, sizes, results)


def exact_check(model: RegionalMMT, sources: list[list[int]], regions: np.ndarray, *, beam: int, max_len: int) -> None:
    """Batched and reference search of a float64 model must agree exactly, text-only and regional."""
    search = Search(beam, max_len, contextlib.nullcontext)  # float64: no autocast
    for name, features in (("text-only", None), ("regional", regions.astype(np.float64))):
        found, _ = batched(model, sources, features, search, batch_size=len(sources))
        expected, _ = one_by_one(model, sources, features, search)
        same = sum(a == b for a, b in zip(found, expected, strict=True))
        print(f"float64 {name}: identical outputs {same}/{len(sources)}")


if __name__ == "__main__":
    main()
