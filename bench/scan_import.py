"""Speed and peak memory of the checked SCAN import of a whole Flickr30K-sized precomp folder (scan-npy).

Writes, into a temporary folder, what a Flickr30K precomp release holds: ``train_ims.npy`` (29,000 images, one row
each), ``dev_ims.npy`` and ``test_ims.npy`` (1,014 and 1,000 images, each row repeated ``--repeat`` times: one row
per caption, as some releases store them), all (rows, 36, 2048) float32 written through ``numpy.lib.format.
open_memmap``, and ``<stem>_caps.txt`` with five captions per image (no ids files, as in Flickr30K precomp). It then
runs :func:`features.importers.import_scan_splits` in a child process, captions check included, and prints the
images/s, the seconds, the GB of the inputs, the GB read (one row per image, and the captions) and written (the
store), and the child's peak RSS (VmHWM, Linux). The temporary folder is deleted. The last line is a JSON object.

Usage (from the repository root):
    python bench/scan_import.py [--train 29000] [--dev 1014] [--test 1000] [--repeat 5] [--dir /tmp]

The inputs were just written, so they are probably in the page cache: the figures are those of a warm cache.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
K, D = 36, 2048
ROW_BYTES = K * D * 4  # one image of float32 features
CAPTIONS = 5
POOL = 64  # distinct random images; image i holds pool image i % POOL (writing stays at memory-copy speed)
STEMS = {"train": "train", "val": "dev", "test": "test"}
CHILD = """
import json, sys, time
from features.importers import import_scan_splits

def peak_mb():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) / 1024

root, out, counts = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
stems = {"train": "train", "val": "dev", "test": "test"}
ids = {split: [f"{split}{index:06d}" for index in range(count)] for split, count in counts.items()}
captions = {split: [[f"caption {c} of image {i}" for c in range(5)] for i in range(n)] for split, n in counts.items()}
before = peak_mb()
start = time.perf_counter()
import_scan_splits(root, stems, ids, out, captions_by_split=captions)
print(json.dumps({"seconds": time.perf_counter() - start, "peak_mb": peak_mb(), "baseline_mb": before}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train", type=int, default=29_000, help="train images (one row each)")
    parser.add_argument("--dev", type=int, default=1_014, help="dev images")
    parser.add_argument("--test", type=int, default=1_000, help="test images")
    parser.add_argument("--repeat", type=int, default=5, choices=(1, 5), help="rows per dev/test image")
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where the temporary folder goes")
    args = parser.parse_args()
    counts = {"train": args.train, "val": args.dev, "test": args.test}
    rows = {"train": args.train, "val": args.dev * args.repeat, "test": args.test * args.repeat}
    images = sum(counts.values())
    needed = sum(rows.values()) * ROW_BYTES + images * K * (D * 2 + 16)  # the inputs and the float16 store
    free = shutil.disk_usage(args.dir).free
    if free < needed * 1.1:
        sys.exit(f"{args.dir}: {free / 1e9:.1f} GB free, the benchmark needs {needed / 1e9:.1f} GB; use --train")
    with tempfile.TemporaryDirectory(prefix="scan-import-", dir=args.dir) as folder:
        root = Path(folder)
        started = time.perf_counter()
        for split, stem in STEMS.items():
            _write_ims(root / f"{stem}_ims.npy", counts[split], 1 if split == "train" else args.repeat)
            _write_caps(root / f"{stem}_caps.txt", counts[split])
        inputs = sum(path.stat().st_size for path in root.iterdir())
        # every row of a repeated image but the first is skipped: the import reads one row per image
        read = images * ROW_BYTES + sum(path.stat().st_size for path in root.glob("*_caps.txt"))
        print(f"wrote {inputs / 1e9:.2f} GB of inputs for {images} images in {time.perf_counter() - started:.0f} s")
        result = _run_child(root, root / "store", counts)
        written = sum(path.stat().st_size for path in (root / "store").rglob("*") if path.is_file())
    results = {
        "images": images,
        "seconds": result["seconds"],
        "images_per_s": images / result["seconds"],
        "gb_inputs": inputs / 1e9,
        "gb_read": read / 1e9,
        "gb_written": written / 1e9,
        "peak_rss_mb": result["peak_mb"],
        "baseline_rss_mb": result["baseline_mb"],
    }
    print(
        f"{images} images in {result['seconds']:.1f} s: {results['images_per_s']:.0f} images/s, "
        f"{read / 1e9:.2f} GB read, {written / 1e9:.2f} GB written, peak RSS {result['peak_mb']:.0f} MB "
        f"(interpreter and imports: {result['baseline_mb']:.0f} MB)"
    )
    sizes = {"train": args.train, "dev": args.dev, "test": args.test, "repeat": args.repeat, "regions": [K, D]}
    machine = {"cpus": _cpus(), "machine": platform.machine()}
    print(json.dumps({"bench": "scan_import", "machine": machine, "sizes": sizes, "results": _rounded(results)}))


def _write_ims(path: Path, images: int, repeat: int, chunk: int = 256) -> None:
    """A (images * repeat, K, D) float32 .npy filled through a memory map, ``chunk`` images at a time."""
    pool = np.random.default_rng(0).random((POOL, K, D), dtype=np.float32) * 8  # BUTD-like: >= 0, small
    array = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(images * repeat, K, D))
    for start in range(0, images, chunk):
        block = pool[np.arange(start, min(images, start + chunk)) % POOL]
        array[start * repeat : (start + len(block)) * repeat] = np.repeat(block, repeat, axis=0)
        array.flush()
    del array


def _write_caps(path: Path, images: int) -> None:
    with open(path, "w") as handle:
        for index in range(images):
            handle.writelines(f"caption {number} of image {index}\n" for number in range(CAPTIONS))


def _run_child(root: Path, out: Path, counts: dict[str, int]) -> dict[str, float]:
    command = [sys.executable, "-c", CHILD, str(root), str(out), json.dumps(counts)]
    done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    if done.returncode:
        sys.exit(f"the import failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _cpus() -> int:
    return len(os.sched_getaffinity(0))


def _rounded(values: dict[str, float]) -> dict[str, float]:
    return {name: round(value, 3) if isinstance(value, float) else value for name, value in values.items()}


if __name__ == "__main__":
    main()
