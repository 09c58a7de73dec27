"""Benchmark of the built-in compact region encoder on the built-in dataset (not a test; prints numbers).

Measures, on the generated dataset at data/raw/synthetic (run `make demo` or `dvc repro generate` first):
training time for the configured epochs, extraction images/s and regions/s, and the peak RSS.

    python bench/compact_preset.py [--root data/raw/synthetic] [--epochs 10] [--threads 2]
"""

from __future__ import annotations

import argparse
import resource
import time
from pathlib import Path

import torch

from features.boxes import read_given_boxes
from features.compact import CompactConfig, CompactExtractor, CompactTraining, labelled_glimpses, train_encoder
from features.images import load_rgb


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", default="data/raw/synthetic")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=16)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    root = Path(args.root)
    given = read_given_boxes(root / "objects.parquet")
    assert given.labels is not None and given.attributes is not None
    names = sorted(path.stem for path in (root / "images").glob("*.png"))
    started = time.perf_counter()
    images = {name: load_rgb(root / "images" / f"{name}.png") for name in names}
    print(f"decoded {len(images)} PNG images in {time.perf_counter() - started:.1f} s")

    config = CompactConfig()
    objects = sorted({label for labels in given.labels.values() for label in labels})
    attributes = sorted({name for boxes in given.attributes.values() for names_ in boxes for name in names_})
    train = names[: int(len(names) * 5 / 6)]
    examples = [(images[n], given.of(n), given.labels[n], given.attributes[n]) for n in train if n in given.boxes]
    data = labelled_glimpses(examples, config, objects=objects, attributes=attributes)
    started = time.perf_counter()
    model = train_encoder(data, config, CompactTraining(epochs=args.epochs), objects=objects, attributes=attributes)
    seconds = time.perf_counter() - started
    print(
        f"training: {len(data.objects)} boxes x {args.epochs} epochs in {seconds:.1f} s "
        f"({seconds / args.epochs:.1f} s/epoch)"
    )

    extractor = CompactExtractor(model, max_regions=8, device=torch.device("cpu"))
    started, regions = time.perf_counter(), 0
    for start in range(0, len(names), args.batch):
        batch = names[start : start + args.batch]
        results = extractor.extract([images[n] for n in batch], [given.of(n) for n in batch])
        regions += sum(len(result.features) for result in results)
    seconds = time.perf_counter() - started
    print(
        f"extraction: {len(names)} images, {regions} regions in {seconds:.2f} s = {len(names) / seconds:.0f} images/s, "
        f"{regions / seconds:.0f} regions/s"
    )
    print(f"peak RSS: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


if __name__ == "__main__":
    main()
