"""End-to-end images/s of the bottom-up-attention R101-C4 extractor (random weights), per batch size.

What: ``BUTDExtractor.extract`` (the call the extraction stage makes) on batches of random 480x640 RGB images
(COCO's typical size; resized to 600x800), 36 regions x 2048 per image (FixedRegions), under the pipeline's
autocast (``common.runtime``). ``--warmup`` untimed calls at the first batch size, then per batch size the
median over ``--runs`` timed calls, the device synchronised around each; images/s = batch / median seconds (a
later batch size's first call may pay for its new res5 shape; the median of 3 runs leaves that out). The timed
call covers the whole extraction of a batch: preprocessing (the uint8 pixels' copy to the device, then
conversion and resize there), backbone and RPN (one call per image size on an accelerator, image by image on the
CPU), batched proposals and NMS, one RoIPool call, one res5 call for the batch's RoIs, the heads, the batched
36-box selection and the features' copy back to the host. Image decoding and the FeatureStore write are outside it.
``--stages`` adds, at the first batch size, one extra run with a timer around each stage (seconds per image).

Random weights: the RPN keeps its full 300 proposals per image after NMS (a trained model keeps about as
many), so the res5 work, about 90 % of the total, is that of a real run; NMS and selection may differ a bit.

Goal on one H100: >= 100 images/s at batch 8 or 16.

    python bench/butd_extract.py --small                                  # CPU: batches 1 and 2, 1 run each
    python bench/butd_extract.py --device cuda --precision bf16           # batches 8 and 16, 3 runs each
    python bench/butd_extract.py --device cuda --batches 8 16 32 --stages
    (bench/butd_cpu.py is the old name; it runs this script, and its old ``--batch N`` still works)
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from collections import defaultdict
from collections.abc import Iterator

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
    timed,
)

from features.bottom_up.extractor import BUTDExtractor, preprocess_batch
from features.bottom_up.model import BottomUpAttention, BUTDConfig, select_proposals
from features.regions import FixedRegions

STAGES = ("preprocess", "backbone", "rpn+proposals", "roipool", "res5", "heads", "selection")
REGIONS = 36
GOAL_IMAGES_PER_S = 100.0


def random_images(count: int, height: int, width: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, size=(height, width, 3), dtype=np.uint8) for _ in range(count)]


def end_to_end(extractor: BUTDExtractor, images: list[np.ndarray], *, runs: int) -> list[float]:
    """Seconds of each of ``runs`` timed ``extract`` calls on ``images``."""
    device = extractor.device
    seconds = []
    for _ in range(runs):
        regions, elapsed = timed(lambda: extractor.extract(images), device)
        if any(not np.isfinite(r.features).all() for r in regions):
            raise RuntimeError("non-finite features: the random-weight model diverged at this precision")
        seconds.append(elapsed)
    return seconds


def stage_times(extractor: BUTDExtractor, images: list[np.ndarray]) -> tuple[dict[str, float], int]:
    """The steps of ``BUTDExtractor.extract`` on images of one size, a timer around each -> (seconds per stage,
    number of RoIs). Each stage runs once for the whole batch, as in ``extract``."""
    times: dict[str, float] = defaultdict(float)
    model, device, autocast = extractor.model, extractor.device, extractor.autocast
    assert isinstance(model, BottomUpAttention)

    @contextlib.contextmanager
    def stage(name: str) -> Iterator[None]:
        synchronize(device)
        start = time.perf_counter()
        yield
        synchronize(device)
        times[name] += time.perf_counter() - start

    config, selection = model.config, FixedRegions(count=REGIONS)
    one_by_one = not extractor.batch_convolutions
    with torch.inference_mode():
        with stage("preprocess"):
            blob, scale = preprocess_batch(images, config, device)
        with stage("backbone"), autocast():
            if one_by_one:
                feature = torch.cat([model.backbone(blob[i : i + 1]) for i in range(len(images))])
            else:
                feature = model.backbone(blob)
        with stage("rpn+proposals"), autocast():
            size = (blob.shape[2], blob.shape[3])
            rois, counts = model.propose_batch(feature, size, scale, convs_per_image=one_by_one)
        with stage("roipool"), autocast():
            pooled = model.pool_batch(feature, rois, counts)
        with stage("res5"), autocast():
            pool5 = model.head(pooled)
        with stage("heads"):
            cls_prob, _ = model.predict(pool5)
        with stage("selection"):
            keep, _ = select_proposals(rois / scale, cls_prob, counts, selection, config)
            pool5[keep].float().cpu()  # the features leave the device, as in extract()
    return times, len(rois)


def print_stages(times: dict[str, float], batch: int, rois: int) -> None:
    total = sum(times.values())
    print(f"stages at batch {batch} (one run, {rois} RoIs), seconds per image:")
    for name in STAGES:
        print(f"  {name:<15} {times[name] / batch:8.4f} s  ({100 * times[name] / total:4.1f} %)")


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, argparse.ArgumentParser]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_runtime_arguments(parser)
    parser.add_argument("--batches", type=int, nargs="+", help="batch sizes (default 8 16; --small: 1 2)")
    parser.add_argument("--batch", type=int, help="one batch size (the old butd_cpu.py option)")
    parser.add_argument("--runs", type=int, help="timed calls per batch size (default 3; --small: 1)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed calls before the first batch size")
    parser.add_argument("--height", type=int, default=480)
    parser.add_argument("--width", type=int, default=640)
    parser.add_argument("--stages", action="store_true", help="also time each stage at the first batch size")
    args = parser.parse_args(argv)
    if args.batch is not None:
        args.batches = [args.batch]
    args.batches = args.batches or ([1, 2] if args.small else [8, 16])
    args.runs = args.runs or (1 if args.small else 3)
    return args, parser


def main(argv: list[str] | None = None) -> None:
    args, parser = parse_args(argv)
    runtime = runtime_from(args, parser)
    device, autocast = runtime.torch_device(), runtime.autocast()
    model = BottomUpAttention(BUTDConfig())
    extractor = BUTDExtractor(model, FixedRegions(count=REGIONS), device, autocast)
    params = sum(p.numel() for p in model.parameters()) / 1e6
    print(header(runtime))
    print(f"R101-C4, {params:.1f} M parameters, random {args.height}x{args.width} images, {REGIONS} regions x 2048")
    reset_peak_memory(device)
    for _ in range(args.warmup):  # first calls pay for lazy CUDA init, the allocator, cuDNN/oneDNN kernel choice
        extractor.extract(random_images(args.batches[0], args.height, args.width))
    results: dict[str, dict[str, float]] = {"images_per_s": {}, "seconds_per_batch": {}}
    for batch in args.batches:
        images = random_images(batch, args.height, args.width)
        seconds = statistics.median(end_to_end(extractor, images, runs=args.runs))
        results["images_per_s"][str(batch)] = batch / seconds
        results["seconds_per_batch"][str(batch)] = seconds
        print(
            f"RESULT R101-C4 extraction, batch {batch:3d}: {batch / seconds:9.3f} images/s "
            f"({seconds:.3f} s per batch, median of {args.runs} run(s))"
        )
    if args.stages:
        batch = args.batches[0]
        times, rois = stage_times(extractor, random_images(batch, args.height, args.width))
        print_stages(times, batch, rois)
    memory = peak_memory(device)
    print(memory_line(memory))
    if device.type == "cuda":
        best = max(results["images_per_s"].values())
        verdict = "met" if best >= GOAL_IMAGES_PER_S else "missed"
        print(f"goal >= {GOAL_IMAGES_PER_S:g} images/s on one GPU: {verdict} (best {best:.1f})")
    sizes = {"batches": args.batches, "image": [args.height, args.width], "regions": REGIONS, "runs": args.runs}
    emit_json("butd_extract", runtime, sizes, {**results, **memory})


if __name__ == "__main__":
    main()
