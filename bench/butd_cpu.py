"""Speed and memory of the full bottom-up-attention R101-C4 detector (random weights), split by stage.

Runs the same steps as ``BUTDExtractor.extract`` (per-image backbone, RPN and RoIPool; one res5 call for the
batch; heads; the 36-box Caffe selection) with a timer around each, on random 480x640 images resized to
600x800. Prints the median seconds per image of each stage over the timed runs, and the peak RSS.

    python bench/butd_cpu.py                                        # CPU, 2 threads, 1 warm-up + 3 runs
    python bench/butd_cpu.py --device cuda --precision bf16 --batch 8
"""

from __future__ import annotations

import argparse
import contextlib
import resource
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from features.butd import BottomUpAttention, BUTDConfig, select_proposals
from features.butd_extractor import preprocess_image
from features.regions import FixedRegions

STAGES = ("preprocess", "backbone", "rpn+proposals", "roipool", "res5", "heads", "selection")
AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def autocast_factory(device: torch.device, precision: str) -> Callable[[], contextlib.AbstractContextManager[Any]]:
    if precision == "fp32":
        return contextlib.nullcontext
    dtype = AUTOCAST_DTYPES[precision]
    return lambda: torch.autocast(device.type, dtype=dtype)


def run_batch(
    model: BottomUpAttention,
    images: list[np.ndarray],
    device: torch.device,
    autocast: Callable[[], contextlib.AbstractContextManager[Any]],
) -> tuple[dict[str, float], int]:
    """One extraction of the batch -> (seconds per stage for the whole batch, number of RoIs)."""
    times: dict[str, float] = defaultdict(float)

    @contextlib.contextmanager
    def timed(stage: str) -> Iterator[None]:
        start = time.perf_counter()
        yield
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times[stage] += time.perf_counter() - start

    config, selection = model.config, FixedRegions(count=36)
    with torch.inference_mode():
        pooled, rois, scales = [], [], []
        for image in images:
            with timed("preprocess"):
                blob, scale = preprocess_image(image, config, device)
            with timed("backbone"), autocast():
                feature = model.backbone(blob)
            with timed("rpn+proposals"), autocast():
                rois.append(model.propose(feature, (blob.shape[2], blob.shape[3]), scale))
            with timed("roipool"), autocast():
                pooled.append(model.pool(feature, rois[-1]))
            scales.append(scale)
        with timed("res5"), autocast():
            pool5 = model.head(torch.cat(pooled))
        with timed("heads"):
            cls_prob, _ = model.predict(pool5)
        with timed("selection"):
            counts = [len(r) for r in rois]
            boxes = [r / s for r, s in zip(rois, scales, strict=True)]
            keeps = select_proposals(boxes, list(cls_prob.split(counts)), selection, config)
            for features, keep in zip(pool5.split(counts), keeps, strict=True):
                features[keep].float().cpu()  # the features leave the device, as in extract()
    if not torch.isfinite(pool5).all():
        raise RuntimeError("non-finite features: the random-weight model diverged")
    return times, sum(len(r) for r in rois)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--precision", choices=("fp32", "bf16", "fp16"), default="fp32")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2, help="intra-op threads on CPU")
    parser.add_argument("--runs", type=int, default=3, help="timed runs after one warm-up")
    parser.add_argument("--height", type=int, default=480)
    parser.add_argument("--width", type=int, default=640)
    args = parser.parse_args(argv)

    device = torch.device(args.device)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = BottomUpAttention(BUTDConfig()).to(device).eval()
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, size=(args.height, args.width, 3), dtype=np.uint8) for _ in range(args.batch)]
    autocast = autocast_factory(device, args.precision)

    run_batch(model, images, device, autocast)  # warm-up: allocator, kernels, oneDNN primitives
    runs = [run_batch(model, images, device, autocast) for _ in range(args.runs)]
    per_image = {stage: statistics.median(t[stage] for t, _ in runs) / args.batch for stage in STAGES}
    total = statistics.median(sum(t.values()) for t, _ in runs) / args.batch

    blob, _ = preprocess_image(images[0], model.config, device)
    params = sum(p.numel() for p in model.parameters()) / 1e6
    print(f"device {device}, precision {args.precision}, threads {torch.get_num_threads()}, batch {args.batch}")
    print(f"image {args.height}x{args.width} -> {blob.shape[2]}x{blob.shape[3]}, {params:.1f} M parameters,")
    print(f"RoIs per batch {runs[0][1]}, median of {args.runs} runs after 1 warm-up")
    for stage in STAGES:
        print(f"  {stage:<15} {per_image[stage]:8.3f} s/image  ({100 * per_image[stage] / total:4.1f} %)")
    print(f"  {'total':<15} {total:8.3f} s/image  = {1 / total:.3f} images/s")
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    print(f"peak RSS {peak_kib / 2**20:.2f} GiB")
    if device.type == "cuda":
        print(f"peak GPU memory {torch.cuda.max_memory_allocated(device) / 2**30:.2f} GiB")


if __name__ == "__main__":
    main()
