"""Every GPU check in one run, written to one JSON file: the CUDA tests, the throughput of each heavy step, and
bf16 autocast against fp32.

Checks, in this order; each runs in its own try/except under its own time cap, so one that fails or runs out of
time records its error (and keeps the figures it measured before) and the next one runs:

- ``cuda_tests``: the test modules that need CUDA (a ``gpu`` mark, or a skipif on CUDA) run with pytest in a
  subprocess: passed / failed / skipped counts. A module that cannot be imported here (say, prefect is not
  installed) is left out and named with the reason.
- ``extraction``: ``BUTDExtractor.extract`` (bench/butd_extract.py) of the bottom-up R101-C4 on random 480x640
  images (resized to 600x800 as in extraction), 36 regions x 2048: images/s at batch 8, 16 and 32, and the
  milliseconds per image of each stage at batch 16 (``butd_extract.stage_times``, synchronised per stage).
- ``mmt_train``: RegionalMMT training steps (bench/mmt_train.py) at the sizes of the ``paper_sizes`` profile:
  target tokens/s with K=36 regions at the fine-tuning batch, and text-only at the pre-training batch.
- ``mmt_decode``: beam search (the profile's beam, at the synthesis batch) and greedy decoding of sentences with
  36 regions (bench/mmt_decode.py): sentences/s. A random model almost never emits EOS, so sentences run to the
  length limit: a worst case.
- ``retrieval_train``: SAN and SCAN training steps/s at batch 128 (bench/retrieval_train.py: the trainer's step
  with its data held on the device and its losses read every 50 steps, as ``fit`` runs), the implied epoch of
  145,000 captions, and SAN's step part by part (data assembly, forward, loss, backward, clipping, optimiser;
  synchronised per part).
- ``scan_eval``: evaluation of 1,000 images x 5,000 captions with SAN and SCAN (bench/scan_eval.py): seconds to
  encode the images and captions, score every pair and rank.
- ``bf16_agreement``: the same inputs in fp32 and under bf16 autocast: MMT teacher-forced logits (largest
  absolute difference, relative error, top-1 agreement) and greedy outputs (token agreement); SCAN scores and
  R@1 on a synthetic joint-space set whose captions match their images; bottom-up backbone and region features
  (relative error).

Timing: warm-up calls first, then timed calls with the device synchronised around them (``benchkit.timed``).
The warm-up's time plans the number of timed calls, so each check fits its cap and the whole run its
``--budget``. Weights are random everywhere: the figures measure speed and numerical agreement, not quality.

    PYTHONPATH=. python bench/gpu_checks.py --device cuda --out bench/results/gpu_checks.json   # < 6 min on one H100
    PYTHONPATH=. python bench/gpu_checks.py --device cpu --small --threads 1 --out gpu_checks_cpu.json  # tiny
    python bench/gpu_checks.py --markdown bench/results/gpu_checks.json                          # the table
    python bench/gpu_checks.py --markdown bench/results/gpu_checks.json --into docs/scaling.md   # ... into the docs

The run needs torch, numpy, pyarrow, pyyaml and pytest, not prefect or dvc, and no installed package: the
repository root on ``PYTHONPATH`` is enough.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import gc
import io
import json
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np
import torch
import yaml
from benchkit import (
    VOCABULARY,
    RandomRegions,
    add_runtime_arguments,
    device_name,
    peak_memory,
    random_captions,
    reset_peak_memory,
    rounded,
    runtime_from,
)
from butd_extract import REGIONS, end_to_end, random_images, stage_times
from mmt_decode import Search, batched
from mmt_train import random_examples, train_steps
from retrieval_train import bench_model
from scan_eval import inference_benchmark, joint_features, recalls

from common.files import write_text
from common.runtime import Runtime, autocast
from features.bottom_up.extractor import BUTDExtractor, preprocess_image
from features.bottom_up.model import BottomUpAttention, BUTDConfig
from features.regions import FixedRegions
from mmt.model import MMTConfig, MMTShape, RegionalMMT
from mmt.train import TrainConfig, collate
from mmtr.doc_sections import add_section_arguments, publish_section
from retrieval.zoo.scan import SCAN, SCANConfig
from tests.unit.features.bottom_up.helpers import TINY as TINY_BUTD

REPO = Path(__file__).resolve().parents[1]
PROFILE = REPO / "mmtr" / "profiles" / "paper_sizes.yaml"
DEFAULT_OUT = REPO / "bench" / "results" / "gpu_checks.json"
SECTION = "gpu-figures"  # the docs section this bench writes (mmtr.doc_sections)
CUDA_TEST = re.compile(r"pytest\.mark\.gpu|skipif\([^)]*cuda")  # a test module that needs (or checks for) CUDA
EXTRACTION_RUNS = 10  # the most timed extraction calls per batch size (their median is reported)
DECODE_BATCHES = 8  # the most decoding batches timed (their regions are held in RAM)
WORDS = (12, 20)  # MMT sentence lengths, as bench/mmt_train.py and bench/mmt_decode.py
REGION_DIM = 2048
WEIGHTS = "random: every figure measures speed or numerical agreement, none the quality of a trained model"


class CheckTimeout(BaseException):
    """A check ran past its time cap (a BaseException, so that no ``except Exception`` on the way swallows it)."""


@dataclass(frozen=True)
class Sizes:
    """Every size the checks use: the papers' (the ``paper_sizes`` profile) on a GPU, tiny ones with ``--small``."""

    butd: BUTDConfig
    image: tuple[int, int]  # (height, width) of the random images before the extractor's resize
    extract_batches: tuple[int, ...]
    mmt: MMTConfig
    vocab: int  # MMT source and target vocabulary (the profile's joint subword vocabulary)
    finetune_batch: int
    pretrain_batch: int
    beam: int
    decode_batch: int
    max_len: int  # decoding limit in tokens
    retrieval_batch: int
    retrieval_images: int
    retrieval_configs: dict[str, dict[str, Any]]
    eval_images: int  # 5 captions each
    eval_batch: int
    joint_dim: int  # SCAN joint space of the agreement set
    most_calls: int  # the most timed calls (steps, batches, runs) of any one measurement


def paper_sizes(profile: Path = PROFILE) -> Sizes:
    """The sizes of a real run on a GPU, read from the profile (so a change there moves the checks with it)."""
    values = yaml.safe_load(profile.read_text(encoding="utf-8"))
    mmt, retrieval = values["mmt"], values["retrieval"]
    return Sizes(
        butd=BUTDConfig(),
        image=(480, 640),  # COCO's typical size, as bench/butd_extract.py
        extract_batches=tuple(values["features"]["batch_size"] * k // 2 for k in (1, 2, 4)),  # 8, 16, 32
        mmt=MMTConfig(**mmt["model"]),
        vocab=mmt["text"]["vocab_size"],
        finetune_batch=mmt["finetune"]["batch_size"],
        pretrain_batch=mmt["pretrain"]["batch_size"],
        beam=mmt["beam"],
        decode_batch=values["synthesis"]["batch_size"],
        max_len=mmt["text"]["max_len"],
        retrieval_batch=retrieval["train"]["batch_size"],
        retrieval_images=2000,  # 10,000 captions: the sampler draws distinct batches for longer than a check runs
        retrieval_configs={name: retrieval["configs"][name] for name in ("san", "scan")},
        eval_images=1000,
        eval_batch=retrieval["evaluation"]["batch_size"],
        joint_dim=retrieval["configs"]["scan"]["hidden"],
        most_calls=60,
    )


def small_sizes() -> Sizes:
    """Tiny sizes that run every code path of every check in seconds on a CPU."""
    return Sizes(
        butd=dataclasses.replace(TINY_BUTD, blocks=(1, 1, 1, 1), rpn_post_nms_top_n=60),  # at least the 36 regions
        image=(96, 128),
        extract_batches=(1, 2),
        mmt=MMTConfig(emb_dim=16, hidden=32, dropout=0.3),
        vocab=200,
        finetune_batch=8,
        pretrain_batch=16,
        beam=3,
        decode_batch=8,
        max_len=8,
        retrieval_batch=16,
        retrieval_images=64,
        retrieval_configs={"san": {"word_dim": 16, "hidden": 32}, "scan": {"word_dim": 16, "hidden": 32}},
        eval_images=16,
        eval_batch=32,
        joint_dim=32,
        most_calls=3,
    )


@dataclass
class Report:
    """What a check measured: figures with their units, the settings it ran with, notes on reading them."""

    figures: dict[str, dict[str, Any]] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def add(self, name: str, value: float, unit: str) -> None:
        if not np.isfinite(value):
            raise ValueError(f"figure {name} is not finite: {value}")
        self.figures[name] = {"value": rounded(float(value)), "unit": unit}


@dataclass(frozen=True)
class Context:
    """What a check runs with: device and precision, sizes, and the moment its time cap ends."""

    runtime: Runtime
    sizes: Sizes
    deadline: float  # time.perf_counter() value
    small: bool

    @property
    def device(self) -> torch.device:
        return self.runtime.torch_device()

    def left(self) -> float:
        return max(0.0, self.deadline - time.perf_counter())

    def plan(self, seconds_per_call: float, share: float, *, least: int = 1, most: int | None = None) -> int:
        """How many timed calls of ``seconds_per_call`` fit in ``share`` of the time left, within [``least``,
        ``most``] (default: ``sizes.most_calls``)."""
        fit = int(share * self.left() / max(seconds_per_call, 1e-6))
        return max(least, min(most or self.sizes.most_calls, fit))


Check = Callable[[Context, Report], None]


# ----------------------------------------------------------------------------------------------------------- checks


def cuda_tests(context: Context, report: Report) -> None:
    """The CUDA test modules with pytest in subprocesses: first their ``gpu``-marked tests, then (not with
    ``--small``) their other tests, which run with CUDA visible (a device ``auto`` resolves to it)."""
    modules = sorted(path for path in (REPO / "tests").rglob("test_*.py") if CUDA_TEST.search(path.read_text()))
    left_out = _unimportable(modules, timeout=context.left() / 3)
    chosen = [_relative(path) for path in modules if _relative(path) not in left_out]
    report.settings.update(modules=chosen, left_out=left_out)
    if left_out:
        report.notes.append(f"left out, not importable here: {', '.join(sorted(left_out))}")
    phases = [("gpu", "")] if context.small else [("gpu", ""), ("not gpu", "other_")]
    for marker, prefix in phases:
        counts, failed, skipped, code = _pytest(chosen, marker, timeout=max(1.0, context.left() - 2))
        report.settings[f"{prefix}pytest"] = {"marker": marker, "exit_code": code}
        for name, count in counts.items():
            report.add(f"{prefix}{name}", count, "tests")
        if failed:
            report.notes.append(f"failed (-m '{marker}'): " + "; ".join(failed))
        report.notes += [f"skipped (-m '{marker}'): {reason}" for reason in sorted(set(skipped))]


def extraction(context: Context, report: Report) -> None:
    """Images/s of the bottom-up extractor per batch size (36 regions, random weights)."""
    sizes, device = context.sizes, context.device
    model = BottomUpAttention(sizes.butd)
    extractor = BUTDExtractor(model, FixedRegions(count=REGIONS), device, context.runtime.autocast())
    report.settings.update(
        parameters=sum(p.numel() for p in model.parameters()),
        image=list(sizes.image),
        resized_to=[sizes.butd.test_scale, sizes.butd.max_size],
        regions=REGIONS,
        region_dim=sizes.butd.dim,
        batches=list(sizes.extract_batches),
        weights="random",
    )
    first = sizes.extract_batches[0]
    extractor.extract(random_images(first, *sizes.image))  # lazy CUDA init, allocator, kernel choice
    for number, batch in enumerate(sizes.extract_batches):
        images = random_images(batch, *sizes.image, seed=batch)
        [probe] = end_to_end(extractor, images, runs=1)  # untimed: a new batch size may pay for its new shapes
        runs = context.plan(probe, 0.8 / (len(sizes.extract_batches) - number), most=EXTRACTION_RUNS)
        seconds = statistics.median(end_to_end(extractor, images, runs=runs))
        report.add(f"images_per_s_batch_{batch}", batch / seconds, "images/s")
        report.settings[f"runs_batch_{batch}"] = runs
    middle = sizes.extract_batches[len(sizes.extract_batches) // 2]
    times, rois = stage_times(extractor, random_images(middle, *sizes.image, seed=middle))
    for stage, seconds in times.items():  # the device synchronised around each stage: where a call's time goes
        report.add(f"stage_{stage.replace('+', '_')}_ms_per_image_batch_{middle}", 1000 * seconds / middle, "ms")
    report.settings["stage_rois"] = rois


def mmt_train(context: Context, report: Report) -> None:
    """Target tokens/s of MMT training: regional fine-tuning, then text-only pre-training."""
    sizes, runtime = context.sizes, context.runtime
    shape = MMTShape(src_vocab=sizes.vocab, tgt_vocab=sizes.vocab, region_dim=REGION_DIM)
    report.settings.update(
        model=dataclasses.asdict(sizes.mmt), vocab=sizes.vocab, lengths=list(WORDS), regions=[REGIONS, REGION_DIM]
    )
    for label, batch, with_regions, share in (
        ("regional", sizes.finetune_batch, True, 0.5),
        ("text_only", sizes.pretrain_batch, False, 0.8),
    ):
        torch.manual_seed(0)
        model = RegionalMMT(sizes.mmt, shape)
        config = TrainConfig(batch_size=batch)
        count = batch * config.sort_chunk  # one length-sorted chunk; later steps draw the next epochs
        examples = random_examples(count, shape, lengths=WORDS, with_regions=with_regions)
        regions = RandomRegions(count, REGIONS, REGION_DIM) if with_regions else None
        probe, _, _ = train_steps(model, examples, regions, config, runtime, warmup=2, steps=2)
        steps = context.plan(probe / 2, share, least=2)
        seconds, tokens, losses = train_steps(model, examples, regions, config, runtime, warmup=1, steps=steps)
        if not np.isfinite(losses).all():
            raise RuntimeError(f"{label}: non-finite training loss {losses}")
        report.add(f"{label}_target_tokens_per_s", tokens / seconds, "tokens/s")
        report.add(f"{label}_steps_per_s", steps / seconds, "steps/s")
        report.settings[f"{label}_batch"], report.settings[f"{label}_steps"] = batch, steps


def mmt_decode(context: Context, report: Report) -> None:
    """Sentences/s of beam search and of greedy decoding, 36 regions per sentence."""
    sizes, device = context.sizes, context.device
    shape = MMTShape(src_vocab=sizes.vocab, tgt_vocab=sizes.vocab, region_dim=REGION_DIM)
    torch.manual_seed(0)
    model = RegionalMMT(dataclasses.replace(sizes.mmt, dropout=0.0), shape).eval().to(device)
    most_batches = min(sizes.most_calls, DECODE_BATCHES)
    count = sizes.decode_batch * most_batches
    rng = np.random.default_rng(0)
    sources = [
        rng.integers(4, sizes.vocab, size=int(rng.integers(WORDS[0], WORDS[1] + 1))).tolist() for _ in range(count)
    ]
    regions = RandomRegions(count, REGIONS, REGION_DIM).features
    report.settings.update(
        batch=sizes.decode_batch, beam=sizes.beam, max_len=sizes.max_len, regions=[REGIONS, REGION_DIM]
    )
    report.notes.append("a random model almost never emits EOS: sentences run to max_len tokens (a worst case)")
    first = sizes.decode_batch
    for label, search, share in (
        ("beam", Search(sizes.beam, sizes.max_len, context.runtime.autocast()), 0.6),
        ("greedy", Search(1, sizes.max_len, context.runtime.autocast(), greedy=True), 0.8),
    ):
        batched(model, sources[:first], regions[:first], search, batch_size=first)  # warm-up
        _, probe = batched(model, sources[:first], regions[:first], search, batch_size=first)
        sentences = first * context.plan(probe, share, most=most_batches)
        outputs, seconds = batched(model, sources[:sentences], regions[:sentences], search, batch_size=first)
        report.add(f"{label}_sentences_per_s", sentences / seconds, "sentences/s")
        report.add(f"{label}_tokens_per_s", sum(map(len, outputs)) / seconds, "tokens/s")
        report.settings[f"{label}_sentences"] = sentences


def retrieval_train(context: Context, report: Report) -> None:
    """Training steps/s of SAN and SCAN at the paper's batch."""
    sizes = context.sizes
    regions, train = RandomRegions(sizes.retrieval_images), random_captions(sizes.retrieval_images)
    report.settings.update(batch=sizes.retrieval_batch, images=sizes.retrieval_images, configs=sizes.retrieval_configs)
    for name, share in (("san", 0.4), ("scan", 0.8)):
        arguments: dict[str, Any] = {"batch": sizes.retrieval_batch, "model_config": sizes.retrieval_configs[name]}
        with quiet():  # the probe's own result lines would read like the measurement's
            probe = bench_model(name, train, regions, context.runtime, warmup=2, steps=2, **arguments)
        steps = context.plan(1 / probe["steps_per_s"], share, least=2)
        result = bench_model(name, train, regions, context.runtime, warmup=1, steps=steps, **arguments)
        report.add(f"{name}_steps_per_s", result["steps_per_s"], "steps/s")
        report.add(f"{name}_epoch_s", result["epoch_s"], "s")
        report.settings[f"{name}_steps"], report.settings["epoch_steps"] = steps, result["epoch_steps"]
    # SAN's step part by part, the device synchronised around each part (slower than the steps timed above)
    with quiet():
        arguments = {"batch": sizes.retrieval_batch, "model_config": sizes.retrieval_configs["san"]}
        parts = bench_model("san", train, regions, context.runtime, warmup=1, steps=5, sections=True, **arguments)
    for part, ms in parts["sections_ms"].items():
        report.add(f"san_step_{part.replace(' ', '_')}_ms", ms, "ms")


def scan_eval(context: Context, report: Report) -> None:
    """Seconds of a 1K x 5K evaluation (encode, score, rank) with SAN and SCAN."""
    sizes = context.sizes

    def evaluation(images: int) -> dict[str, Any]:
        arguments = argparse.Namespace(
            images=images,
            captions=5 * images,
            regions=REGIONS,
            region_dim=REGION_DIM,
            vocab=VOCABULARY,
            batch=sizes.eval_batch,
        )
        return inference_benchmark(arguments, context.runtime)

    with quiet():
        evaluation(max(2, sizes.eval_images // 10))  # warm-up: lazy init and kernel choice
    results = evaluation(sizes.eval_images)
    report.settings.update(images=sizes.eval_images, captions=5 * sizes.eval_images, batch=sizes.eval_batch)
    for name in ("scan", "san"):
        for part in ("total_s", "encode_images_s", "encode_texts_s", "score_s", "rank_s"):
            report.add(f"{name}_{part}", results[name][part], "s")


def bf16_agreement(context: Context, report: Report) -> None:
    """The same inputs in fp32 and under bf16 autocast: MMT, SCAN, the bottom-up extractor."""
    device = context.device
    low: Callable[[], AbstractContextManager[object]]
    if device.type == "cuda":
        report.settings["low_precision"] = "bf16: the pipeline's autocast (common.runtime)"
        low = lambda: autocast(device, "bf16")  # noqa: E731
    else:  # the pipeline's autocast is CUDA-only; torch's CPU autocast still runs every comparison
        report.settings["low_precision"] = "bf16: torch's CPU autocast (the pipeline's autocast is CUDA-only)"
        low = lambda: torch.autocast("cpu", dtype=torch.bfloat16)  # noqa: E731
    report.notes.append(
        "random MMT weights give nearly flat next-token distributions, where bf16 rounding flips the argmax more "
        "easily than in a trained model's peaked ones: read the MMT agreement figures as pessimistic"
    )
    _butd_agreement(context, report, low)
    _mmt_agreement(context, report, low)
    _scan_agreement(context, report, low)  # the slowest part last: a time cap then costs it alone


def _mmt_agreement(context: Context, report: Report, low: Callable[[], AbstractContextManager[object]]) -> None:
    sizes, device = context.sizes, context.device
    shape = MMTShape(src_vocab=sizes.vocab, tgt_vocab=sizes.vocab, region_dim=REGION_DIM)
    torch.manual_seed(0)
    model = RegionalMMT(dataclasses.replace(sizes.mmt, dropout=0.0), shape).eval().to(device)
    count = sizes.decode_batch
    examples = random_examples(count, shape, lengths=WORDS, with_regions=True)
    regions = RandomRegions(count, REGIONS, REGION_DIM)
    batch, tgt_in, tgt_out = collate(examples, range(count), regions=regions, shape=shape, device=device)
    with torch.inference_mode():
        exact = model(batch, tgt_in).float()
        with low():
            rough = model(batch, tgt_in).float()
    real = tgt_out != shape.pad_id
    report.add("mmt_logits_max_abs_diff", float((rough - exact)[real].abs().max()), "logit")
    report.add("mmt_logits_relative_error", _relative_error(rough[real], exact[real]), "ratio")
    top1 = (rough.argmax(-1) == exact.argmax(-1))[real].float().mean()
    report.add("mmt_teacher_forced_top1_agreement", float(top1), "fraction")
    sources = [list(example.src_ids) for example in examples]
    greedy = {
        name: batched(
            model, sources, regions.features, Search(1, sizes.max_len, factory, greedy=True), batch_size=count
        )[0]
        for name, factory in (("fp32", contextlib.nullcontext), ("bf16", low))
    }
    same = sum(
        sum(a == b for a, b in zip(x, y, strict=False)) for x, y in zip(greedy["fp32"], greedy["bf16"], strict=True)
    )
    longest = sum(max(len(x), len(y)) for x, y in zip(greedy["fp32"], greedy["bf16"], strict=True))
    report.add("mmt_greedy_token_agreement", same / max(1, longest), "fraction")
    identical = sum(x == y for x, y in zip(greedy["fp32"], greedy["bf16"], strict=True))
    report.add("mmt_greedy_identical_sentences", identical / count, "fraction")
    report.settings.update(mmt_sentences=count, mmt_max_len=sizes.max_len)


def _scan_agreement(context: Context, report: Report, low: Callable[[], AbstractContextManager[object]]) -> None:
    sizes, device = context.sizes, context.device
    count = sizes.eval_images
    per_image = 5
    model = SCAN(SCANConfig(hidden=sizes.joint_dim), vocab_size=10, languages=1, region_dim=1).to(device)
    images, texts = joint_features(
        count, per_image * count, regions=REGIONS, dim=sizes.joint_dim, words=(8, 20), noise=12.0
    )
    images, texts = images.detached(device), texts.detached(device)
    with torch.inference_mode():
        exact = model.similarity(images, texts).float()
        with low():
            rough = model.similarity(images, texts).float()
    report.add("scan_scores_max_abs_diff", float((rough - exact).abs().max()), "score")
    found = {"fp32": recalls(exact, per_image), "bf16": recalls(rough, per_image)}
    for precision, metrics in found.items():
        for direction in ("i2t", "t2i"):
            report.add(f"scan_{direction}_r1_{precision}", metrics[f"{direction}_r1"], "%")
        report.add(f"scan_rsum_{precision}", sum(metrics.values()), "points")
    report.settings.update(scan_images=count, scan_captions=per_image * count, scan_joint_dim=sizes.joint_dim)


def _butd_agreement(context: Context, report: Report, low: Callable[[], AbstractContextManager[object]]) -> None:
    sizes, device = context.sizes, context.device
    torch.manual_seed(0)
    model = BottomUpAttention(sizes.butd).to(device).eval()
    [image] = random_images(1, *sizes.image, seed=7)
    blob, scale = preprocess_image(image, sizes.butd, device)
    with torch.inference_mode():
        exact = model.backbone(blob)
        rois = model.propose(exact, (blob.shape[2], blob.shape[3]), scale)  # the same boxes for both precisions
        exact_regions = model.head(model.pool(exact, rois)).float()
        with low():
            rough = model.backbone(blob)
            rough_regions = model.head(model.pool(rough, rois)).float()
    report.add("butd_backbone_relative_error", _relative_error(rough.float(), exact.float()), "ratio")
    report.add("butd_region_features_relative_error", _relative_error(rough_regions, exact_regions), "ratio")
    report.settings["butd_rois"] = len(rois)


def quiet() -> contextlib.redirect_stdout[io.StringIO]:
    """Swallow a warm-up's printed lines."""
    return contextlib.redirect_stdout(io.StringIO())


def _relative_error(rough: torch.Tensor, exact: torch.Tensor) -> float:
    """||rough - exact|| / ||exact|| (Frobenius norms)."""
    return float((rough - exact).norm() / exact.norm().clamp(min=1e-30))


# ------------------------------------------------------------------------------------------------- cuda_tests parts


def _relative(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


def _python_path() -> str:
    return os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH"))))


def _unimportable(modules: list[Path], *, timeout: float) -> dict[str, str]:
    """Test module -> why it cannot be imported in this environment (a missing package), in one subprocess."""
    names = [_relative(path).removesuffix(".py").replace("/", ".") for path in modules]
    code = (
        "import importlib, json, sys\n"
        "why = {}\n"
        "for name in sys.argv[1:]:\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except Exception as error:\n"
        "        why[name] = f'{type(error).__name__}: {error}'\n"
        "print(json.dumps(why))\n"
    )
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": _python_path()}
    finished = subprocess.run(
        [sys.executable, "-c", code, *names], cwd=REPO, env=environment, capture_output=True, text=True, timeout=timeout
    )
    if finished.returncode != 0:
        raise RuntimeError(f"the import check of the test modules failed:\n{finished.stderr[-2000:]}")
    why: dict[str, str] = json.loads(finished.stdout.strip().splitlines()[-1])
    return {name.replace(".", "/") + ".py": reason for name, reason in why.items()}


def _pytest(modules: list[str], marker: str, *, timeout: float) -> tuple[dict[str, int], list[str], list[str], int]:
    """pytest on ``modules`` with ``-m marker`` in a subprocess: (counts, failed tests, skip reasons, exit code)."""
    with tempfile.TemporaryDirectory() as folder:
        junit = Path(folder) / "junit.xml"
        command = [sys.executable, "-m", "pytest", *modules, "-m", marker, "-q", "-p", "no:cacheprovider"]
        environment = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": _python_path()}
        finished = subprocess.run(
            [*command, f"--junitxml={junit}"],
            cwd=REPO,
            env=environment,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        print(finished.stdout[-3000:], end="", flush=True)
        if not junit.is_file():
            raise RuntimeError(f"pytest exited {finished.returncode} without a report:\n{finished.stderr[-2000:]}")
        return (*_junit_counts(junit), finished.returncode)


def _junit_counts(path: Path) -> tuple[dict[str, int], list[str], list[str]]:
    """(passed/failed/errors/skipped counts, failed test ids, skip reasons) of a pytest JUnit XML report."""
    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    failed, skipped = [], []
    for case in ElementTree.parse(path).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        outcome = next((child for child in case if child.tag in ("failure", "error", "skipped")), None)
        if outcome is None:
            counts["passed"] += 1
        elif outcome.tag == "skipped":
            counts["skipped"] += 1
            skipped.append(outcome.get("message", ""))
        else:
            counts["failed" if outcome.tag == "failure" else "errors"] += 1
            failed.append(f"{name}: {(outcome.get('message') or '')[:200]}")
    return counts, failed, skipped


# ------------------------------------------------------------------------------------------------------ the runner


@dataclass(frozen=True)
class Planned:
    name: str
    check: Check
    cap_s: float  # on a GPU at the paper's sizes
    small_cap_s: float  # with --small on a CPU
    what: str


CHECKS = (
    Planned("cuda_tests", cuda_tests, 100, 40, "the CUDA test modules under pytest"),
    Planned("extraction", extraction, 90, 20, "bottom-up extraction, 36 regions per image"),
    Planned("mmt_train", mmt_train, 45, 20, "MMT training steps, with regions and text-only"),
    Planned("mmt_decode", mmt_decode, 45, 15, "MMT beam search and greedy decoding"),
    Planned("retrieval_train", retrieval_train, 75, 20, "SAN and SCAN training steps"),
    Planned("scan_eval", scan_eval, 60, 15, "evaluation (encode, score, rank) with SAN and SCAN"),
    Planned("bf16_agreement", bf16_agreement, 50, 20, "bf16 autocast against fp32"),
)
LEAST_S = 5.0  # a check that would get less than this of the run's budget is not started


def _on_alarm(signum: int, frame: FrameType | None) -> None:
    raise CheckTimeout


@contextlib.contextmanager
def time_cap(seconds: float) -> Iterator[None]:
    """Raise :class:`CheckTimeout` in this (main) thread after ``seconds``."""
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def run_check(planned: Planned, runtime: Runtime, sizes: Sizes, *, cap_s: float, small: bool) -> dict[str, Any]:
    """One check under its cap: its figures, settings, notes, seconds and error (None when it succeeded)."""
    device = runtime.torch_device()
    report, status, error = Report(), "ok", None
    reset_peak_memory(device)
    started = time.perf_counter()
    try:
        with time_cap(cap_s):
            planned.check(Context(runtime, sizes, started + cap_s, small), report)
    except CheckTimeout:
        status, error = "timeout", f"time cap of {cap_s:.3g} s reached (figures measured before it are kept)"
    except Exception:  # one failing check must not lose the others: its error goes into the JSON
        status, error = "error", traceback.format_exc()[-4000:]
    seconds = time.perf_counter() - started
    memory = peak_memory(device)
    if "peak_gpu_gib" in memory and report.figures:
        report.add("peak_gpu_memory", memory["peak_gpu_gib"], "GiB")
    if status == "ok" and not report.figures:
        status, error = "error", "the check finished without a figure"
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return {
        "what": planned.what,
        "status": status,
        "seconds": rounded(seconds),
        "cap_s": rounded(cap_s),
        "figures": report.figures,
        "settings": report.settings,
        "notes": report.notes,
        "error": error,
    }


def machine(device: torch.device) -> dict[str, Any]:
    """Where the checks ran."""
    info: dict[str, Any] = {
        "device": str(device),
        "device_name": device_name(device),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "threads": torch.get_num_threads(),
    }
    if device.type == "cuda":
        properties = torch.cuda.get_device_properties(device)
        info.update(
            capability=".".join(map(str, torch.cuda.get_device_capability(device))),
            memory_gib=rounded(properties.total_memory / 2**30),
            multiprocessors=properties.multi_processor_count,
            cudnn=torch.backends.cudnn.version(),
            driver=_driver_version(),
        )
    return info


def _driver_version() -> str | None:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        query = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
        return subprocess.run(query, capture_output=True, text=True, timeout=20, check=True).stdout.strip() or None
    return None


def _commit() -> str | None:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        query = ["git", "rev-parse", "HEAD"]
        return subprocess.run(query, cwd=REPO, capture_output=True, text=True, timeout=20, check=True).stdout.strip()
    return None


def run_all(args: argparse.Namespace, runtime: Runtime) -> dict[str, Any]:
    """Every chosen check in order, the JSON rewritten after each one (a run cut short keeps what it finished)."""
    device = runtime.torch_device()
    sizes = small_sizes() if args.small else paper_sizes()
    started = time.perf_counter()
    record: dict[str, Any] = {
        "script": "bench/gpu_checks.py",
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "commit": _commit(),
        "machine": machine(device),
        "precision": runtime.precision,
        "small": args.small,
        "weights": WEIGHTS,
        "budget_s": args.budget,
        "order": [planned.name for planned in CHECKS if planned.name in args.checks],
        "checks": {},
    }
    print(f"[gpu_checks] {record['machine']['device_name']}, torch {torch.__version__}, precision {runtime.precision}")
    for planned in CHECKS:
        if planned.name not in args.checks:
            continue
        left = args.budget - (time.perf_counter() - started)
        cap_s = min(planned.small_cap_s if args.small else planned.cap_s, left)
        if cap_s < LEAST_S:
            result = {"what": planned.what, "status": "skipped", "seconds": 0.0, "cap_s": rounded(cap_s)}
            result.update(figures={}, settings={}, notes=[], error=f"not started: {left:.0f} s of --budget left")
        else:
            print(f"[gpu_checks] {planned.name}: {planned.what} (cap {cap_s:.0f} s)", flush=True)
            result = run_check(planned, runtime, sizes, cap_s=cap_s, small=args.small)
        record["checks"][planned.name] = result
        record["total_s"] = rounded(time.perf_counter() - started)
        write_text(args.out, json.dumps(record, indent=2) + "\n")  # in the order measured
        print(_check_line(planned.name, result), flush=True)
    print(f"[gpu_checks] done in {record['total_s']:.0f} s: {args.out}", flush=True)
    return record


def _check_line(name: str, result: dict[str, Any]) -> str:
    figures = "; ".join(f"{key} {_number(item['value'])} {item['unit']}" for key, item in result["figures"].items())
    line = f"[gpu_checks] {name}: {result['status']} in {result['seconds']:.1f} s" + (f": {figures}" if figures else "")
    if result["error"]:
        line += "\n    " + result["error"].strip().splitlines()[-1]
    return line


# ---------------------------------------------------------------------------------------------------- the markdown


def markdown(record: dict[str, Any]) -> str:
    """The figures of a run as a Markdown table, with a line naming the machine."""
    machine_info = record["machine"]
    where = f"{machine_info['device_name']}"
    if "capability" in machine_info:
        where += f" (compute capability {machine_info['capability']}, {machine_info['memory_gib']:g} GiB)"
    lines = [
        f"Run of {record['created']} on {where}, torch {machine_info['torch']}"
        + (f", CUDA {machine_info['cuda']}" if machine_info.get("cuda") else "")
        + f", precision {record['precision']}{', small sizes' if record['small'] else ''}"
        + (f", commit {record['commit'][:10]}" if record.get("commit") else "")
        + f"; {record['total_s']:.0f} s in all. Weights are random.",
        "",
        "| check | figure | value | unit |",
        "| --- | --- | --- | --- |",
    ]
    for name in record["order"]:
        result = record["checks"].get(name)
        if result is None:
            lines.append(f"| {name} | not run | | |")
            continue
        for key, item in result["figures"].items():
            lines.append(f"| {name} | {key} | {_number(item['value'])} | {item['unit']} |")
        if result["status"] != "ok":
            reason = (result["error"] or "").strip().splitlines()[-1:] or [""]
            lines.append(f"| {name} | {result['status']} | | {_cell(reason[0])} |")
    return "\n".join(lines) + "\n"


def _number(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:.4g}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")[:160]


# ----------------------------------------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, argparse.ArgumentParser]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_runtime_arguments(parser, threads=os.cpu_count() or 1)
    names = [planned.name for planned in CHECKS]
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help=f"the JSON file (default {_relative(DEFAULT_OUT)})"
    )
    parser.add_argument("--checks", nargs="+", choices=names, default=names, help="run only these checks")
    parser.add_argument("--budget", type=float, help="seconds for the whole run (default 330; --small: 150)")
    add_section_arguments(parser)
    args = parser.parse_args(argv)
    args.budget = args.budget or (150.0 if args.small else 330.0)
    return args, parser


def main(argv: list[str] | None = None) -> None:
    args, parser = parse_args(argv)
    if publish_section(args, SECTION, markdown):
        return
    run_all(args, runtime_from(args, parser))


if __name__ == "__main__":
    main()
