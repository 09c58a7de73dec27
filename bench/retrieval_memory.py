"""Training memory and speed with region features read from a FeatureStore vs held in RAM.

The goal: a FeatureStore of Flickr30K's size (29,000 images x 36 regions x 2048 float16, 4.3 GB) should train
with at least 5x less memory than the references' way (``np.load`` of the whole array into RAM) at no less
than 0.9x their step throughput.

Writes, into a temporary folder, a FeatureStore of N images with random features (every region valid) and the
same features as a plain (N, 36, 2048) float16 ``.npy`` file, both block by block so that this process stays
small. Then, in one fresh interpreter per run, trains SAN (paper config: word_dim 300, hidden 512,
region_dim 2048; the "harder" ranking loss; Adam) for a fixed number of steps on 5 random English captions per
image (about 10 words each from a 2,000-word vocabulary) with the trainer's own step
(``retrieval.train._ranking_step``) on regions from
    memmap: ``FeatureStore.open`` (each batch reads its rows from the memory map);
    inram:  an array loaded with ``np.load`` (no ``mmap_mode``), indexed per batch.
Each child reports its RSS before the regions are opened (interpreter, imports, captions, model, optimizer),
its peak RSS (VmHWM, Linux), the peak of its anonymous RSS (RssAnon, sampled after every step: memory
actually allocated, without mapped file pages), the time to open or load the regions, the time per step
spent reading the batch's rows (the only work that differs between the modes) and the steps/s over the
steps after the warm-up ones. The temporary folder is deleted unless ``--keep``.

Usage (from the repository root):
    python bench/retrieval_memory.py [--images 29000] [--steps 200] [--batch 128] [--threads 2]
        [--warmup 5] [--rounds 1] [--dir /tmp] [--keep]

Caveats:
- Both files were just written, so they are in the page cache (dropping it needs root): the memmap reads
  come from a warm cache, an upper bound on its speed with a cold disk; ``np.load`` reads warm too.
- Page-cache pages of a memory map count towards RSS (and VmHWM) while they stay mapped and touched, so
  the memmap run's VmHWM grows with the distinct images its batches have read, though the kernel can
  reclaim those pages under pressure; RssAnon is the memory that cannot be reclaimed. Where the page cache
  holds a file in large folios (recent kernels), touching one row maps its whole folio, so a few dozen
  batches can map most of the file. VmHWM is the figure a job scheduler sees, so both are printed.
- Steps/s depends on whatever else runs on the CPU; ``--rounds`` alternates the modes several times and the
  ratio uses each mode's best round.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
K, D = 36, 2048
ROW_BYTES = K * D * 2  # one image of float16 features
CAPTIONS_PER_IMAGE, WORDS, VOCABULARY = 5, 10, 2_000
GOAL_MEMORY, GOAL_SPEED = 5.0, 0.9
MODES = ("memmap", "inram")

CHILD = """
import contextlib, json, sys, time
import numpy as np
import torch
from features.store import FeatureStore
from retrieval.data import BalancedSampler, Caption, HostBatches, encode_captions
from retrieval.losses import RankingLoss
from retrieval.zoo.registry import build_model, make_config
from retrieval.train import TrainConfig, _ranking_step
from retrieval.vocab import Vocabulary

def status():
    with open("/proc/self/status") as handle:
        fields = dict(line.split(":", 1) for line in handle)
    return {name: int(fields[name].split()[0]) / 1024 for name in ("VmRSS", "VmHWM", "RssAnon", "RssFile")}

class InRam:
    # The references' way: the whole array in memory, rows indexed per batch.
    def __init__(self, path):
        self.features = np.load(path)

    def batch(self, rows):
        rows = np.asarray(rows, dtype=np.int64)
        features = self.features[rows]
        mask = np.ones(features.shape[:2], dtype=bool)
        return features, mask, np.zeros((*features.shape[:2], 4), dtype=np.float32)

class Timed:
    # Time spent reading rows (the only work that differs between the modes).
    def __init__(self, regions):
        self.regions, self.seconds = regions, 0.0

    def batch(self, rows):
        started = time.perf_counter()
        result = self.regions.batch(rows)
        self.seconds += time.perf_counter() - started
        return result

run = json.loads(sys.argv[1])
steps, batch_size, warmup = run["steps"], run["batch"], run["warmup"]
torch.set_num_threads(run["threads"])
rng = np.random.default_rng(0)
letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
words = sorted({"".join(rng.choice(letters, size=rng.integers(3, 10))) for _ in range(3 * run["vocabulary"])})
words = np.array(words[: run["vocabulary"]])
ids = [f"{index:06d}" for index in range(run["images"])]

def text():
    return " ".join(rng.choice(words, size=rng.integers(run["words"] - 3, run["words"] + 4)))

captions = [Caption(f"{i}#{n}", i, "en", text(), "human") for i in ids for n in range(run["per_image"])]
vocab = Vocabulary.build([(c.lang, c.text) for c in captions], ["en"], min_count=1)
rows = {image_id: row for row, image_id in enumerate(ids)}
train = encode_captions(captions, vocab, rows, max_len=100, source="bench")
del captions
config, seed = TrainConfig(batch_size=batch_size), 0
torch.manual_seed(seed)
model = build_model("san", make_config("san", {}), vocab_size=len(vocab), languages=1, region_dim=run["dim"])
model.train()
optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
loss, weights, device = RankingLoss("harder"), torch.ones(len(train.type_names)), torch.device("cpu")
sampler = BalancedSampler(train.synthetic, batch_size, config.synthetic_fraction, seed)
baseline = status()
started = time.perf_counter()
regions = Timed(FeatureStore.open(run["store"]) if run["mode"] == "memmap" else InRam(run["npy"]))
load_seconds = time.perf_counter() - started
peak_anon, epoch, done, timed_from = status()["RssAnon"], 0, 0, None
while done < steps:
    for indices in sampler.batches(epoch):
        if done == warmup:
            timed_from, regions.seconds = time.perf_counter(), 0.0
        _ranking_step(model, HostBatches(train, regions, device), indices, optimizer, loss, weights, config, device,
                      contextlib.nullcontext, 0.0, where=f"step {done}")
        done += 1
        peak_anon = max(peak_anon, status()["RssAnon"])
        if done == steps:
            break
    epoch += 1
seconds = time.perf_counter() - timed_from
end = status()
print(json.dumps({
    "baseline_mb": baseline["VmRSS"], "peak_mb": end["VmHWM"], "peak_anon_mb": peak_anon,
    "end_file_mb": end["RssFile"], "load_s": load_seconds, "steps_per_s": (steps - warmup) / seconds,
    "read_ms": 1000 * regions.seconds / (steps - warmup), "vocabulary": len(vocab),
}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=29_000, help="images of the store (Flickr30K train: 29000)")
    parser.add_argument("--steps", type=int, default=200, help="training steps per run, warm-up included")
    parser.add_argument("--batch", type=int, default=128, help="captions per batch")
    parser.add_argument("--threads", type=int, default=2, help="torch threads in the child")
    parser.add_argument("--warmup", type=int, default=5, help="first steps left out of steps/s")
    parser.add_argument("--rounds", type=int, default=1, help="runs per mode, the modes alternating")
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where the temporary folder goes")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder (its path is printed)")
    args = parser.parse_args()
    if args.steps <= args.warmup:
        sys.exit(f"--steps {args.steps} must exceed --warmup {args.warmup}")
    needed = 2 * args.images * ROW_BYTES + args.images * K * 16  # the .npy, regions.npy and boxes.npy
    free = shutil.disk_usage(args.dir).free
    if free < needed * 1.1:
        sys.exit(f"{args.dir}: {free / 1e9:.1f} GB free, the benchmark needs {needed / 1e9:.1f} GB; use --images")
    folder = tempfile.mkdtemp(prefix="retrieval-memory-", dir=args.dir)
    try:
        _bench(Path(folder), args)
    finally:
        if args.keep:
            print(f"kept {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)


def _bench(root: Path, args: argparse.Namespace) -> None:
    store, npy = root / "store", root / "regions.npy"
    print(f"writing {args.images} x {K} x {D} float16 twice ({2 * args.images * ROW_BYTES / 1e9:.2f} GB) to {root}")
    _write_features(store, npy, args.images)
    columns = (
        ("load s", 8),
        ("baseline MB", 13),
        ("peak RSS MB", 13),
        ("growth MB", 11),
        ("peak anon MB", 14),
        ("read ms/step", 14),
        ("steps/s", 9),
    )
    print(
        f"SAN, {args.steps} steps of {args.batch} captions ({args.warmup} warm-up), {args.threads} threads, "
        f"{CAPTIONS_PER_IMAGE * args.images} captions"
    )
    print(f"{'mode':<8}" + "".join(f"{name:>{width}}" for name, width in columns))
    results: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
    for _ in range(args.rounds):
        for mode in MODES:
            result = _run_child(mode, store, npy, args)
            results[mode].append(result)
            growth = result["peak_mb"] - result["baseline_mb"]
            print(
                f"{mode:<8}{result['load_s']:>8.1f}{result['baseline_mb']:>13.0f}{result['peak_mb']:>13.0f}"
                f"{growth:>11.0f}{result['peak_anon_mb']:>14.0f}"
                f"{result['read_ms']:>14.1f}{result['steps_per_s']:>9.2f}"
            )
    memmap, inram = (_best(results[mode]) for mode in MODES)
    ratios = [
        ("memory, peak RSS (inram / memmap)", inram["peak_mb"] / memmap["peak_mb"], GOAL_MEMORY),
        ("memory, RSS growth (inram / memmap)", inram["growth_mb"] / max(memmap["growth_mb"], 1.0), GOAL_MEMORY),
        ("memory, peak anon (inram / memmap)", inram["peak_anon_mb"] / memmap["peak_anon_mb"], GOAL_MEMORY),
        ("speed, steps/s (memmap / inram)", memmap["steps_per_s"] / inram["steps_per_s"], GOAL_SPEED),
    ]
    for name, ratio, goal in ratios:
        verdict = "met" if ratio >= goal else "missed"
        print(f"{name:<38}{ratio:>7.2f}x   goal >= {goal:g}x: {verdict}")


def _write_features(store: Path, npy: Path, images: int, *, chunk: int = 256) -> None:
    """The FeatureStore and the plain .npy with the same random rows, one block of ``chunk`` images at a time."""
    from features.store import FeatureStoreWriter

    rng = np.random.default_rng(0)
    ids = [f"{index:06d}" for index in range(images)]
    header = {"descr": "<f2", "fortran_order": False, "shape": (images, K, D)}
    writer = FeatureStoreWriter(
        store, image_ids=ids, max_regions=K, dim=D, extractor="bench-random", checkpoint_sha256=None, config={}
    )
    with writer, open(npy, "wb") as handle:
        np.lib.format.write_array_header_1_0(handle, header)
        for start in range(0, images, chunk):
            count = min(chunk, images - start)
            block = (rng.random((count, K, D), dtype=np.float32) * 8).astype(np.float16)  # BUTD-like: >= 0, small
            writer.write_rows(start, block, np.zeros((count, K, 4), np.float32), np.full(count, K, np.int32))
            handle.write(block.tobytes())


def _run_child(mode: str, store: Path, npy: Path, args: argparse.Namespace) -> dict[str, float]:
    run = {
        "mode": mode,
        "store": str(store),
        "npy": str(npy),
        "images": args.images,
        "steps": args.steps,
        "batch": args.batch,
        "threads": args.threads,
        "warmup": args.warmup,
        "vocabulary": VOCABULARY,
        "words": WORDS,
        "per_image": CAPTIONS_PER_IMAGE,
        "dim": D,
    }
    command = [sys.executable, "-c", CHILD, json.dumps(run)]
    done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    if done.returncode:
        sys.exit(f"{mode} run failed:\n{done.stderr}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def _best(runs: list[dict[str, float]]) -> dict[str, float]:
    """The largest peaks and the best steps/s over a mode's rounds."""
    return {
        "peak_mb": max(run["peak_mb"] for run in runs),
        "growth_mb": max(run["peak_mb"] - run["baseline_mb"] for run in runs),
        "peak_anon_mb": max(run["peak_anon_mb"] for run in runs),
        "steps_per_s": max(run["steps_per_s"] for run in runs),
    }


if __name__ == "__main__":
    main()
