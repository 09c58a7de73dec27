"""Peak memory and speed of the feature importers on a Flickr30K-sized input.

Writes a synthetic SCAN ``train_ims.npy`` ((N, 36, 2048) float32; the default 29,000 images are 8.5 GB) and a
bottom-up TSV into a temporary folder, runs each import (and ``check_finite`` over the SCAN store) in a
child process, and prints the child's peak RSS (VmHWM, Linux), its RSS before the call (interpreter + imports), the wall
time and the input MB/s. The goal is a peak RSS under 1 GB whatever N is. The temporary folder is deleted.

Usage (from the repository root):
    python bench/importer_rss.py [--images 29000] [--tsv-rows 2000] [--dir /tmp]

The input files were just written, so they are probably in the page cache: the MB/s are those of a warm
cache, an upper bound for a cold disk.
"""

from __future__ import annotations

import argparse
import base64
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
K, D = 36, 2048
ROW_BYTES = K * D * 4  # one image of float32 features
# The child reads its peak from VmHWM: ru_maxrss would start at the RSS of this (forked) parent.
CHILD = """
import json, sys, time
from features.importers import import_butd_tsv, import_scan_npy
from features.store import FeatureStore

def peak_kb():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))

kind, source, out, images = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
before = peak_kb()
start = time.perf_counter()
if kind.startswith("scan"):  # "scan x5": the array repeats each image 5 times (SCAN's f30k train)
    import_scan_npy(source, image_ids=[f"{index:06d}" for index in range(images)], out_dir=out)
elif kind == "tsv":
    import_butd_tsv([source], out_dir=out, max_regions=36)
else:
    FeatureStore.open(source).check_finite()
seconds = time.perf_counter() - start
peak = peak_kb()
print(json.dumps({"seconds": seconds, "peak_mb": peak / 1024, "baseline_mb": before / 1024}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=29_000, help="rows of the SCAN array (Flickr30K train: 29000)")
    parser.add_argument("--tsv-rows", type=int, default=2_000, help="lines of the TSV")
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where the temporary folder goes")
    args = parser.parse_args()
    repeated = min(args.images, 2_000)  # images of the 5x repeated SCAN array
    scan_bytes, tsv_bytes = args.images * ROW_BYTES, args.tsv_rows * ROW_BYTES * 4 // 3
    # inputs + their float16 stores
    needed = scan_bytes * 3 // 2 + tsv_bytes + args.tsv_rows * ROW_BYTES // 2 + repeated * ROW_BYTES * 11 // 2
    free = shutil.disk_usage(args.dir).free
    if free < needed * 1.1:
        sys.exit(f"{args.dir}: {free / 1e9:.1f} GB free, the benchmark needs {needed / 1e9:.1f} GB; use --images")
    with tempfile.TemporaryDirectory(prefix="importer-rss-", dir=args.dir) as folder:
        root = Path(folder)
        print(f"writing {args.images} x {K} x {D} float32 ({scan_bytes / 1e9:.2f} GB) and a {args.tsv_rows}-line TSV")
        _write_scan(root / "train_ims.npy", args.images)
        _write_scan(root / "repeated_ims.npy", repeated, repeat=5)
        _write_tsv(root / "features.tsv", args.tsv_rows)
        columns = ("input GB", 10), ("images", 9), ("peak RSS MB", 13), ("baseline MB", 13), ("seconds", 9), ("MB/s", 8)
        print(f"{'run':<14}" + "".join(f"{name:>{width}}" for name, width in columns))
        runs = [
            ("scan", root / "train_ims.npy", root / "scan-store", args.images),
            ("scan x5", root / "repeated_ims.npy", root / "repeated-store", repeated),
            ("tsv", root / "features.tsv", root / "tsv-store", args.tsv_rows),
            ("check_finite", root / "scan-store", root / "unused", args.images),
        ]
        for kind, source, out, images in runs:
            size = _size(source)
            result = _run_child(kind, source, out, images)
            print(
                f"{kind:<14}{size / 1e9:>10.2f}{images:>9}{result['peak_mb']:>13.0f}{result['baseline_mb']:>13.0f}"
                f"{result['seconds']:>9.1f}{size / 1e6 / result['seconds']:>8.0f}"
            )


def _write_scan(path: Path, images: int, *, repeat: int = 1, chunk: int = 64) -> None:
    """A .npy written block by block with plain file writes, so this process stays small too."""
    rng = np.random.default_rng(0)
    header = {"descr": "<f4", "fortran_order": False, "shape": (images * repeat, K, D)}
    with open(path, "wb") as handle:
        np.lib.format.write_array_header_1_0(handle, header)
        for start in range(0, images, chunk):
            block = rng.random((min(chunk, images - start), K, D), dtype=np.float32) * 8  # BUTD-like: >= 0, small
            handle.write(np.repeat(block, repeat, axis=0).tobytes())


def _write_tsv(path: Path, rows: int) -> None:
    rng = np.random.default_rng(1)
    with open(path, "w") as handle:
        for index in range(rows):
            boxes = rng.uniform(0, 500, (K, 4)).astype("<f4")
            features = (rng.random((K, D), dtype=np.float32) * 8).astype("<f4")
            fields = [str(100_000 + index), "640", "480", str(K), _b64(boxes), _b64(features)]
            handle.write("\t".join(fields) + "\n")


def _b64(array: np.ndarray) -> str:
    return base64.b64encode(array.tobytes()).decode("ascii")


def _run_child(kind: str, source: Path, out: Path, images: int) -> dict[str, float]:
    command = [sys.executable, "-c", CHILD, kind, str(source), str(out), str(images)]
    done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    if done.returncode:
        sys.exit(f"{kind} import failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _size(path: Path) -> int:
    return sum(file.stat().st_size for file in path.rglob("*")) if path.is_dir() else path.stat().st_size


if __name__ == "__main__":
    main()
