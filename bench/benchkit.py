"""What the GPU-ready benches share: device and precision arguments, synchronised timing, peak memory, the JSON line.

Not a benchmark itself. Every bench takes ``--device auto|cpu|cuda[:N]`` (auto: CUDA when
``torch.cuda.is_available()``), ``--precision fp32|bf16`` (default bf16 on CUDA, fp32 on CPU), ``--threads``
(CPU intra-op threads) and ``--small`` (sizes that finish in about two minutes on a 2-core CPU). Device and
precision become a :class:`common.runtime.Runtime`, so a bench runs under exactly the autocast the pipeline
uses; that autocast is CUDA-only, so bf16 on the CPU is refused rather than silently measured as fp32.

Random inputs of the real shapes: :class:`RandomRegions` (36 x 2048 float16 region features in RAM, a
``RegionLookup`` like a FeatureStore) and :func:`random_captions` (a ``CaptionSet`` of random token ids).

Each bench ends with one line holding a JSON object (bench, device, precision, sizes, results), the last line
of its output, so results from many machines can be collected with ``tail -n 1``.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import numpy as np
import torch

from common.runtime import Precision, Runtime, resolve_device
from retrieval.data import CaptionSet

T = TypeVar("T")
PRECISIONS = ("fp32", "bf16")
CAPTIONS_PER_IMAGE, VOCABULARY, WORDS = 5, 10_000, (8, 20)  # Flickr30K/COCO-like: 5 captions of ~12 words


def add_runtime_arguments(parser: argparse.ArgumentParser, *, threads: int = 2) -> None:
    """``--device``, ``--precision``, ``--threads`` and ``--small`` on ``parser``."""
    parser.add_argument("--device", default="auto", help="auto (CUDA when available), cpu, cuda or cuda:<index>")
    parser.add_argument("--precision", choices=PRECISIONS, help="default: bf16 on CUDA, fp32 on CPU")
    parser.add_argument("--threads", type=int, default=threads, help="torch intra-op threads on the CPU")
    parser.add_argument("--small", action="store_true", help="CPU-sized run (about two minutes on 2 cores)")


def runtime_from(args: argparse.Namespace, parser: argparse.ArgumentParser) -> Runtime:
    """The resolved device and precision; sets the CPU thread count and seeds torch."""
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error(f"--device {args.device}: this torch build ({torch.__version__}) sees no CUDA device")
    try:
        device = resolve_device(args.device)
    except (RuntimeError, ValueError) as error:
        parser.error(f"--device {args.device}: {error}")
    precision: Precision = args.precision or ("bf16" if device.type == "cuda" else "fp32")
    if precision != "fp32" and device.type != "cuda":
        # common.runtime.autocast is a no-op off CUDA: the run would be fp32 under a bf16 label.
        parser.error(f"--precision {precision} needs CUDA (the project's autocast runs on CUDA only)")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    return Runtime(str(device), precision)


def synchronize(device: torch.device) -> None:
    """Wait for queued CUDA work, so a timer read afterwards includes it (a no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(function: Callable[[], T], device: torch.device) -> tuple[T, float]:
    """``function()`` and its wall-clock seconds, the device synchronised before and after."""
    synchronize(device)
    started = time.perf_counter()
    result = function()
    synchronize(device)
    return result, time.perf_counter() - started


def reset_peak_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory(device: torch.device) -> dict[str, float]:
    """Peak RSS of this process (GiB) and, on CUDA, peak allocated GPU memory since the last reset (GiB)."""
    memory = {"peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}  # ru_maxrss: KiB (Linux)
    if device.type == "cuda":
        memory["peak_gpu_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
    return memory


def memory_line(memory: Mapping[str, float]) -> str:
    parts = [f"peak RSS {memory['peak_rss_gib']:.2f} GiB"]
    if "peak_gpu_gib" in memory:
        parts.append(f"peak GPU memory {memory['peak_gpu_gib']:.2f} GiB (torch.cuda.max_memory_allocated)")
    return ", ".join(parts)


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return platform.processor() or platform.machine()


def header(runtime: Runtime) -> str:
    """One line naming where and how the bench runs."""
    device = runtime.torch_device()
    threads = f", {torch.get_num_threads()} CPU threads" if device.type == "cpu" else ""
    return f"device {device} ({device_name(device)}), precision {runtime.precision}, torch {torch.__version__}{threads}"


def emit_json(bench: str, runtime: Runtime, sizes: Mapping[str, Any], results: Mapping[str, Any]) -> None:
    """The bench's last output line: one JSON object with everything needed to compare runs."""
    device = runtime.torch_device()
    record = {
        "bench": bench,
        "device": str(device),
        "device_name": device_name(device),
        "precision": runtime.precision,
        "threads": torch.get_num_threads() if device.type == "cpu" else None,
        "torch": torch.__version__,
        "sizes": dict(sizes),
        "results": {key: rounded(value) for key, value in results.items()},
    }
    print(json.dumps(record, sort_keys=False))


def rounded(value: Any) -> Any:
    """Floats to five significant digits, inside dicts, lists and tuples too."""
    if isinstance(value, float):
        return float(f"{value:.5g}")  # five significant digits: enough for any timing, readable
    if isinstance(value, dict):
        return {key: rounded(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [rounded(item) for item in value]
    return value


class RandomRegions:
    """A :class:`features.store.RegionLookup` over random float16 features held in RAM (every region valid).

    The benches time the device's work, not a disk: a FeatureStore's rows come from the page cache at a few
    milliseconds per batch (bench/retrieval_memory.py), so RAM is the same order and needs no temporary files.
    Values are uniform in [0, 8): non-negative and small, like ReLU'd res5 features.
    """

    def __init__(self, images: int, regions: int = 36, dim: int = 2048, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.features = (rng.random((images, regions, dim), dtype=np.float32) * 8).astype(np.float16)

    def __len__(self) -> int:
        return len(self.features)

    def batch(self, rows: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        features = self.features[np.asarray(rows, dtype=np.int64)]
        mask = np.ones(features.shape[:2], dtype=bool)
        return features, mask, np.zeros((*features.shape[:2], 4), dtype=np.float32)


def random_captions(
    images: int, *, per_image: int = CAPTIONS_PER_IMAGE, vocabulary: int = VOCABULARY, seed: int = 0
) -> CaptionSet:
    """``per_image`` captions of random token ids (WORDS long) per image, image after image, all human English
    (one language type, none synthetic): the trainer's and the evaluation's input."""
    rng = np.random.default_rng(seed)
    count = images * per_image
    tokens = tuple(rng.integers(1, vocabulary, size=int(rng.integers(WORDS[0], WORDS[1] + 1))) for _ in range(count))
    rows = np.repeat(np.arange(images), per_image)
    return CaptionSet(
        caption_ids=tuple(f"{row}#{n}" for row in range(images) for n in range(per_image)),
        image_ids=tuple(str(row) for row in rows),
        tokens=tokens,
        image_rows=rows,
        langs=np.zeros(count, dtype=np.int64),
        types=np.zeros(count, dtype=np.int64),
        type_names=("en-human",),
        synthetic=np.zeros(count, dtype=bool),
    )
