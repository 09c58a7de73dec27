"""Where the time of a step goes: SAN training at batch 128 and bottom-up extraction, per section, on the CPU.

What: ``retrieval.train.fit`` of SAN (the paper's sizes: word_dim 300, hidden 512) at batch 128 on random
captions and random 36 x 2048 regions, ``--steps`` steps after ``--warmup``; and ``BUTDExtractor.extract`` of
``--images`` random 480x640 images (resized to 600x800) with a narrow R-C4 detector (the reference's RPN
numbers, 6,000 proposals into NMS and 300 out, 1,600 classes, 36 regions; ``EXTRACTOR`` below), so the per-image
host work weighs what it weighs with the real network while the convolutions stay cheap enough for a CPU.

How: the functions and methods a step calls are wrapped with a timer: data assembly, the encoders, the loss,
backward, clipping, the optimiser; preprocessing, backbone, proposals and NMS, RoIPool, res5, heads and region
selection. What no section covers is ``other``: Python glue, batch drawing, the loop. ``reads`` counts the
values the project's code reads back from tensors in a step (``item``, ``tolist``, ``float``, ``int``, ``bool``,
``cpu``): free on the CPU, each one of a device tensor a wait for the whole queue of kernels on a GPU, so their
count per step says whether a step can run ahead of its device. The wrappers find the names the code of either
version has, so the same bench profiles another checkout: ``--before REV`` extracts that commit with
``git archive`` into a temporary folder and profiles it in a child process, then this tree in another, and the
JSON holds both, with the machine and the load average (``os.getloadavg``) at the start and end.

    python bench/step_profile.py --before HEAD~3 --out bench/results/step_profile.json   # a few minutes, 2 cores
    python bench/step_profile.py --steps 3 --warmup 1 --images 2                          # this tree only, quick
    python bench/step_profile.py --markdown bench/results/step_profile.json --into docs/scaling.md
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import inspect
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SECTION = "step-profile"  # the docs section this bench writes (mmtr.doc_sections)
READS = ("item", "tolist", "cpu", "__float__", "__int__", "__bool__")


class Profile:
    """Seconds per section and reads from tensors, counted only while ``counting`` (after the warm-up).

    With ``sync`` (the device's synchronize) each section waits for its kernels, so it measures the device's
    time as well as the host's; without, a section on a GPU measures the host's time to queue its work.
    """

    def __init__(self, sync: Callable[[], None] | None = None) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.reads = 0
        self.counting = False
        self.sync = sync
        self._depth = 0  # a wrapped call inside another is part of the outer one's time
        self._wrapped: list[tuple[Any, str, Any]] = []

    @contextlib.contextmanager
    def section(self, name: str) -> Iterator[None]:
        outer = self._depth == 0
        if outer and self.sync is not None:
            self.sync()
        self._depth += 1
        start = time.perf_counter()
        try:
            yield
        finally:
            self._depth -= 1
            if outer and self.sync is not None:
                self.sync()
            if self.counting and outer:
                self.seconds[name] += time.perf_counter() - start

    def restore(self) -> None:
        """Undo every wrapper, last first."""
        for owner, attribute, original in reversed(self._wrapped):
            setattr(owner, attribute, original)
        self._wrapped.clear()

    def wrap(self, owner: Any, attribute: str, name: str) -> None:
        """Time ``owner.attribute`` as section ``name``; a name this version of the code lacks is skipped."""
        original = getattr(owner, attribute, None)
        if original is None:
            return
        profile = self

        def timed(*args: Any, **kwargs: Any) -> Any:
            with profile.section(name):
                return original(*args, **kwargs)

        self._wrapped.append((owner, attribute, original))
        setattr(owner, attribute, timed)

    def count_reads(self, tensor_type: Any, code: Path) -> None:
        """Count the reads made by the project's code under ``code``: torch's own reads inside its modules are
        of host tensors on a GPU too (Adam's step counters, a packed sequence's batch sizes)."""
        own = tuple(str(code / package) for package in ("common", "features", "retrieval"))
        profile = self
        for attribute in READS:
            original = getattr(tensor_type, attribute)

            def counted(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
                if profile.counting and sys._getframe(1).f_code.co_filename.startswith(own):
                    profile.reads += 1
                return _original(*args, **kwargs)

            self._wrapped.append((tensor_type, attribute, original))
            setattr(tensor_type, attribute, counted)


def wrap_training_step(profile: Profile, model_type: type) -> None:
    """Sections of a retrieval training step, in the names of either version of ``retrieval.train``."""
    import torch

    import retrieval.data as data
    import retrieval.train as train
    from retrieval.losses import RankingLoss

    for name in ("text_batch", "image_batch", "images_of"):
        profile.wrap(train, name, "data assembly")
    for name in ("HostBatches", "DeviceBatches"):
        if hasattr(data, name):
            profile.wrap(getattr(data, name), "batch", "data assembly")
    for name in ("encode_images", "encode_texts", "ranking_similarities"):
        profile.wrap(model_type, name, "forward")
    profile.wrap(RankingLoss, "__call__", "loss")
    profile.wrap(torch.Tensor, "backward", "backward")
    profile.wrap(torch.nn.utils, "clip_grad_norm_", "clip")
    profile.wrap(torch.optim.Adam, "step", "optimiser")


def profile_training(steps: int, warmup: int) -> dict[str, Any]:
    """SAN at batch 128 through ``fit``, sections per step (ms)."""
    import numpy as np
    import torch
    from benchkit import RandomRegions, random_captions

    import retrieval.train as train
    from retrieval.losses import RankingLoss
    from retrieval.train import TrainConfig, fit
    from retrieval.zoo.registry import build_model, make_config

    profile = Profile()
    batch, images = 128, 1_000
    captions, regions = random_captions(images), RandomRegions(images)
    validation = {"en": captions.subset(np.arange(5))}  # one image: validation is not what is profiled
    torch.manual_seed(0)
    model = build_model("san", make_config("san", {}), vocab_size=10_000, languages=1, region_dim=2048)
    wrap_training_step(profile, type(model))
    profile.wrap(train, "evaluate", "validation")
    profile.count_reads(torch.Tensor, Path.cwd())
    done = {"steps": 0, "start": 0.0, "end": 0.0}
    step = torch.optim.Adam.step

    def counted_step(*args: Any, **kwargs: Any) -> Any:
        result = step(*args, **kwargs)
        done["steps"] += 1
        if done["steps"] == warmup:
            profile.counting, done["start"] = True, time.perf_counter()
        if done["steps"] == warmup + steps:
            profile.counting, done["end"] = False, time.perf_counter()
        return result

    torch.optim.Adam.step = counted_step  # type: ignore[method-assign]
    # where fit can hold the data on the device (DeviceBatches), profile that path: the one a GPU runs
    resident: dict[str, Any] = {"resident": True} if "resident" in inspect.signature(fit).parameters else {}
    fit(
        model,
        captions,
        validation,
        regions,
        loss=RankingLoss("auto").for_model("san", model.default_loss),
        type_weights=torch.ones(1),
        config=TrainConfig(epochs=1, batch_size=batch, max_steps=warmup + steps),
        seed=0,
        device=torch.device("cpu"),
        **resident,
    )
    settings = {"batch": batch, "model": "san", **resident}
    return _summary(profile, (done["end"] - done["start"]) / steps, steps, settings=settings)


EXTRACTOR = {"blocks": (1, 1, 1, 1), "stem_channels": 8, "width": 8, "rpn_channels": 64}


def profile_extraction(images: int, runs: int) -> dict[str, Any]:
    """``BUTDExtractor.extract`` of ``images`` random 480x640 images, sections per call (ms)."""
    import numpy as np
    import torch

    import features.bottom_up.extractor as extractor_module
    from features.bottom_up.extractor import BUTDExtractor
    from features.bottom_up.model import BottomUpAttention, BUTDConfig
    from features.regions import FixedRegions

    profile = Profile()
    torch.manual_seed(0)
    model = BottomUpAttention(BUTDConfig(**EXTRACTOR)).eval()  # type: ignore[arg-type]
    extractor = BUTDExtractor(model, FixedRegions(count=36), torch.device("cpu"))
    for name, section in (
        ("backbone", "backbone"),
        ("propose", "proposals + NMS"),
        ("propose_batch", "proposals + NMS"),
        ("pool", "RoIPool"),
        ("pool_batch", "RoIPool"),
        ("head", "res5"),
        ("predict", "heads"),
    ):
        profile.wrap(model, name, section)
    for name, section in (
        ("preprocess_image", "preprocess"),
        ("preprocess_batch", "preprocess"),
        ("select_proposals", "selection"),
    ):
        profile.wrap(extractor_module, name, section)
    profile.count_reads(torch.Tensor, Path.cwd())
    rng = np.random.default_rng(0)
    batch = [rng.integers(0, 256, size=(480, 640, 3), dtype=np.uint8) for _ in range(images)]
    extractor.extract(batch)  # warm-up: oneDNN's kernel choice, first allocations
    profile.counting = True
    start = time.perf_counter()
    for _ in range(runs):
        extractor.extract(batch)
    seconds = (time.perf_counter() - start) / runs
    profile.counting = False
    settings = {"images": images, "image": [480, 640], "regions": 36, "detector": dict(EXTRACTOR), "runs": runs}
    return _summary(profile, seconds, runs, settings=settings)


def _summary(profile: Profile, seconds: float, calls: int, *, settings: dict[str, Any]) -> dict[str, Any]:
    sections = {name: 1000 * value / calls for name, value in profile.seconds.items()}
    sections["other"] = max(0.0, 1000 * seconds - sum(sections.values()))
    return {"ms": 1000 * seconds, "sections_ms": sections, "reads": profile.reads / calls, "settings": settings}


def run_here(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    torch.set_num_threads(args.threads)
    return {
        "training": profile_training(args.steps, args.warmup),
        "extraction": profile_extraction(args.images, args.runs),
    }


def run_tree(tree: Path, args: argparse.Namespace) -> dict[str, Any]:
    """This bench in a child process whose project modules come from ``tree``."""
    command = [sys.executable, str(Path(__file__).resolve()), "--child", "--threads", str(args.threads)]
    command += ["--steps", str(args.steps), "--warmup", str(args.warmup)]
    command += ["--images", str(args.images), "--runs", str(args.runs)]
    bench = str(Path(__file__).resolve().parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), bench]), "OMP_NUM_THREADS": str(args.threads)}
    output = subprocess.run(command, cwd=tree, env=env, check=True, capture_output=True, text=True).stdout
    result: dict[str, Any] = json.loads(output.strip().splitlines()[-1])
    return result


def archived(revision: str, folder: Path) -> str:
    """``revision``'s files, extracted into ``folder`` -> its commit hash."""
    commit = subprocess.run(["git", "rev-parse", revision], cwd=REPO, check=True, capture_output=True, text=True)
    archive = subprocess.run(["git", "archive", revision], cwd=REPO, check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)
    return commit.stdout.strip()


def head_commit() -> str | None:
    done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True)
    return done.stdout.strip() or None


def machine(threads: int) -> dict[str, Any]:
    import torch

    return {
        "processor": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "threads": threads,
        "torch": torch.__version__,
        "python": platform.python_version(),
    }


def compare(args: argparse.Namespace) -> dict[str, Any]:
    record: dict[str, Any] = {
        "when": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine(args.threads),
        "load_average_start": list(os.getloadavg()),
        "settings": {"steps": args.steps, "warmup": args.warmup, "images": args.images, "runs": args.runs},
    }
    if args.before:
        with tempfile.TemporaryDirectory() as folder:
            record["before_commit"] = archived(args.before, Path(folder))
            record["before"] = run_tree(Path(folder), args)
    record["after_commit"] = head_commit()
    record["after"] = run_tree(REPO, args)
    record["load_average_end"] = list(os.getloadavg())
    return record


def markdown(record: dict[str, Any]) -> str:
    """The docs section: one table per profile, before and after, ms per step and share."""
    m = record["machine"]
    start, end = record["load_average_start"], record["load_average_end"]
    lines = [
        f"Run of {record['when']} on {m['cpus']} CPU cores ({m['processor']}), {m['threads']} torch thread(s), "
        f"torch {m['torch']}; load average {start[0]:.2f} at the start, {end[0]:.2f} at the end (the machine was "
        f"shared). Before: commit {str(record.get('before_commit'))[:10]}; after: commit "
        f"{str(record.get('after_commit'))[:10]}. Weights are random.",
        "",
    ]
    titles = {
        "training": "SAN training step, batch 128 (`fit`), ms per step",
        "extraction": "Bottom-up extraction of {images} images of 480x640 (narrow R-C4, reference RPN), ms per call",
    }
    for key in ("training", "extraction"):
        after = record["after"][key]
        before = record.get("before", {}).get(key)
        lines += [f"**{titles[key].format(**after['settings'])}**", ""]
        lines += ["| section | before | after |", "| --- | ---: | ---: |"]
        names = list(dict.fromkeys([*(before["sections_ms"] if before else {}), *after["sections_ms"]]))
        names = [n for n in names if n != "other"] + ["other"]
        for name in names:
            lines.append(f"| {name} | {_cell(before, name)} | {_cell(after, name)} |")
        lines.append(f"| **total** | {_total(before)} | {_total(after)} |")
        lines.append(f"| reads from tensors in the project's code, per call | {_reads(before)} | {_reads(after)} |")
        lines.append("")
    return "\n".join(lines)


def _cell(profile: dict[str, Any] | None, name: str) -> str:
    if profile is None or name not in profile["sections_ms"]:
        return ""
    value = profile["sections_ms"][name]
    return f"{value:,.1f} ({100 * value / profile['ms']:.0f} %)"


def _total(profile: dict[str, Any] | None) -> str:
    return "" if profile is None else f"{profile['ms']:,.1f}"


def _reads(profile: dict[str, Any] | None) -> str:
    return "" if profile is None else f"{profile['reads']:,.1f}"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    from mmtr.doc_sections import add_section_arguments

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--before", metavar="REV", help="also profile this commit (git archive into a temporary folder)"
    )
    parser.add_argument("--out", type=Path, help="write the JSON record here")
    parser.add_argument("--steps", type=int, default=10, help="timed training steps")
    parser.add_argument("--warmup", type=int, default=2, help="untimed training steps first")
    parser.add_argument("--images", type=int, default=4, help="images per extraction call")
    parser.add_argument("--runs", type=int, default=2, help="timed extraction calls")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    add_section_arguments(parser)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.child:
        print(json.dumps(run_here(args)))
        return
    from mmtr.doc_sections import publish_section

    if publish_section(args, SECTION, markdown):
        return
    record = compare(args)
    text = json.dumps(record, indent=2) + "\n"
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    print(markdown(record))


if __name__ == "__main__":
    main()
