"""How each stage's cost grows with the corpus, up to Flickr30K size (not a test; writes a JSON file and a table).

For each size n (default 1,000, 4,000, 16,000 and 31,014 images) a scratch project gets a Multi30K tree in the
real layout (``task1/raw/*.gz``, ``task1/image_splits``, ``task2/raw``, ``task2/image_splits``) holding the real
English and German caption text of the first images of each real split, split in Multi30K's proportions
29,000 : 1,014 : 1,000 (so the test split grows with n, as a bigger corpus's does). Images and features cannot be
had here, so both are stand-ins: one tiny valid JPEG under each real file name, and seeded random float16
region features (36 x 2048 per image) in the SCAN release's layout (``train_ims.npy``, ``dev_ims.npy``,
``test_ims.npy``, with ``<stem>_ids.txt``), imported by the scan-npy extractor. The text-only corpus of the MMT's
pre-training is the first short pairs of the WMT sample, the same at every size.

The project's params.yaml is the repository's with that corpus and fixed amounts of work where a full pass would
take hours on a CPU: ``max_steps`` for the MMT's pre-training and fine-tuning and for retrieval training, and
``synthesis.max_captions`` (the first captions of the train split). Everything else runs in full at every size:
reading and checking the text, importing every feature row, the MMT's validation and beam-search test decoding,
augmenting, the retrieval's validation and its full evaluation on the test split (every test image against every
test caption), the report. Each stage runs as the command dvc.yaml gives it (``mmtr dag`` writes dvc.yaml from the
project's params), in a child process reporting to one Prefect server: its wall time and its peak RSS (the
child's ``ru_maxrss`` from ``wait4``, which covers its own child processes too) are recorded.

Per stage, the exponent b of ``seconds ~ a n^b`` and of ``peak RSS ~ n^b`` is the least-squares slope in log-log
over the sizes; b > 1.15 is flagged as super-linear. The per-stage fit then extrapolates to MS-COCO's 123,287
images, and the step-capped stages to full training (seconds per step x steps per epoch x epochs).

    python -m bench.cost_curve                               # all four sizes (about 20 minutes on 2 cores)
    python -m bench.cost_curve --small --out /tmp/cost.json  # sizes 60 and 120, about 3 minutes
    python -m bench.cost_curve --markdown bench/results/cost_curve.json                      # print the table
    python -m bench.cost_curve --markdown bench/results/cost_curve.json --into docs/scaling.md  # ... into the docs

Each size's scratch tree (up to 9 GB at 31,014 images: the stand-in arrays and the imported store) is deleted
before the next one is built.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import math
import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from common.files import write_text
from mmtr.doc_sections import add_section_arguments, publish_section
from mmtr.local_server import prefect_server

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "bench" / "results" / "cost_curve.json"
GPU_FIGURES = REPO / "bench" / "results" / "gpu_checks.json"
SIZES, SMALL_SIZES = (1000, 4000, 16000, 31014), (60, 120)
SPLITS = {"train": 29_000, "val": 1_014, "test": 1_000}  # Multi30K's images per split
STEMS = {"train": ("train", "train"), "val": ("val", "val"), "test": ("test_2016_flickr", "test_2016")}  # task1, task2
NPY_STEMS = {"train": "train", "val": "dev", "test": "test"}  # the SCAN release's file stems
LANGS, CAPTIONS_PER_IMAGE, REGIONS, DIM = ("en", "de"), 5, 36, 2048
# The MMT's pre-training corpus, the same at every size: short pairs of the WMT sample
PARALLEL_PAIRS, PARALLEL_WORDS = {"train": 2000, "val": 100, "test": 100}, 20
# Fixed work where a full pass takes hours on a CPU (the rest runs in full).
MMT_STEPS, RETRIEVAL_STEPS, SYNTHESIS_CAPTIONS = 10, 20, 100
RETRIEVAL_RUN = "san-mt_f-all"
STAGES = (
    "prepare_parallel@de",
    "prepare@multi30k",
    "features@multi30k",
    "train_mmt@de",
    "synthesize@de",
    "augment",
    f"train_retrieval@{RETRIEVAL_RUN}",
    "report",
)
SUPER_LINEAR = 1.15
# MS-COCO, Karpathy split: the extrapolation's target
COCO = {"images": 123_287, "train": 113_287, "val": 5_000, "test": 5_000}
# Full training at Flickr30K/COCO size, as the paper and the demo params do it
PAPER_RETRIEVAL_EPOCHS, RETRIEVAL_BATCH = 24, 128
SECTION = "cost-curve"  # the docs section this bench writes (mmtr.doc_sections)


# ------------------------------------------------------------------------------------------------ the scratch tree


def split_sizes(images: int) -> dict[str, int]:
    """``images`` shared among train, val and test in Multi30K's proportions (largest remainders), val and test
    at least one image each (taken from train at tiny sizes)."""
    if images < len(SPLITS):
        raise ValueError(f"{images} images: at least {len(SPLITS)} are needed, one per split")
    total = sum(SPLITS.values())
    exact = {split: images * count / total for split, count in SPLITS.items()}
    sizes = {split: math.floor(value) for split, value in exact.items()}
    by_remainder = sorted(SPLITS, key=lambda split: exact[split] - math.floor(exact[split]), reverse=True)
    for split in by_remainder[: images - sum(sizes.values())]:
        sizes[split] += 1
    for split in ("val", "test"):
        if sizes[split] == 0:
            sizes[split], sizes["train"] = 1, sizes["train"] - 1
    return sizes


def _head_lines(path: Path, lines: int) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as reader:
        found = list(islice(reader, lines))
    if len(found) < lines:
        raise SystemExit(f"{path}: {len(found)} lines, {lines} needed")
    return found


def _write_gz(path: Path, lines: Sequence[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8") as writer:
        writer.writelines(lines)


def _write_lines(path: Path, lines: Sequence[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(lines), encoding="utf-8")


def stand_in_jpeg() -> bytes:
    """A valid 32 x 24 JPEG (every stand-in image is this file under a real name)."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (32, 24), (128, 96, 64)).save(buffer, format="JPEG")
    return buffer.getvalue()


def write_features(path: Path, images: int, rng: np.random.Generator, chunk: int = 64) -> None:
    """Seeded random float16 regions (images, 36, 2048) as a .npy file, written chunk by chunk through a file (not
    a memory map, whose written pages would count in this process's RSS: a child started from it inherits that peak
    in its ``ru_maxrss``), so this process stays small."""
    header = {"descr": np.lib.format.dtype_to_descr(np.dtype(np.float16)), "fortran_order": False}
    with path.open("wb") as output:
        np.lib.format.write_array_header_1_0(output, {**header, "shape": (images, REGIONS, DIM)})
        for start in range(0, images, chunk):
            rows = min(chunk, images - start)
            output.write((rng.random((rows, REGIONS, DIM), dtype=np.float32) * 8).astype(np.float16).tobytes())


def build_tree(shared: Path, raw: Path, images: int, seed: int = 0) -> dict[str, int]:
    """The Multi30K tree of the first ``images`` images (per split, in proportion), stand-in images and features,
    and the WMT sample's first lines, under ``raw``; returns the images per split."""
    sizes = split_sizes(images)
    source, multi30k = shared / "multi30k", raw / "multi30k"
    jpeg, image_folder, precomp = stand_in_jpeg(), raw / "flickr30k-images", raw / "precomp"
    image_folder.mkdir(parents=True, exist_ok=True)
    precomp.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for split, count in sizes.items():
        task1, task2 = STEMS[split]
        names = _head_lines(source / "task1" / "image_splits" / f"{task1}.txt", count)
        _write_lines(multi30k / "task1" / "image_splits" / f"{task1}.txt", names)
        _write_lines(multi30k / "task2" / "image_splits" / f"{task2}_images.txt", names)
        for lang in LANGS:
            name = f"{task1}.{lang}.gz"
            _write_gz(multi30k / "task1" / "raw" / name, _head_lines(source / "task1" / "raw" / name, count))
            for number in range(1, CAPTIONS_PER_IMAGE + 1):
                name = f"{task2}.{number}.{lang}.gz"
                _write_gz(multi30k / "task2" / "raw" / name, _head_lines(source / "task2" / "raw" / name, count))
        for name in names:
            (image_folder / name.strip()).write_bytes(jpeg)
        stem = NPY_STEMS[split]
        _write_lines(precomp / f"{stem}_ids.txt", [f"{Path(name.strip()).stem}\n" for name in names])
        write_features(precomp / f"{stem}_ims.npy", count, rng)
    for split, count in PARALLEL_PAIRS.items():
        english, german = short_pairs(shared / "wmt-sample" / "opennmt-toy-ende", split, count)
        _write_lines(raw / "wmt" / "en-de" / f"{split}.en", english)
        _write_lines(raw / "wmt" / "en-de" / f"{split}.de", german)
    return sizes


def short_pairs(sample: Path, split: str, count: int) -> tuple[list[str], list[str]]:
    """The first ``count`` pairs of the WMT sample's ``split`` with both sides of at most PARALLEL_WORDS words
    (caption-like lengths: the sample's long news sentences would make the fixed pre-training cost dominate)."""
    sources = (sample / f"src-{split}.txt").read_text(encoding="utf-8").splitlines(keepends=True)
    targets = (sample / f"tgt-{split}.txt").read_text(encoding="utf-8").splitlines(keepends=True)
    pairs = [
        (source, target)
        for source, target in zip(sources, targets, strict=True)
        if len(source.split()) <= PARALLEL_WORDS and len(target.split()) <= PARALLEL_WORDS
    ][:count]
    if len(pairs) < count:
        raise SystemExit(f"{sample}: {len(pairs)} {split} pairs of at most {PARALLEL_WORDS} words, {count} needed")
    return [source for source, _ in pairs], [target for _, target in pairs]


def project_params(
    mmt_steps: int = MMT_STEPS, retrieval_steps: int = RETRIEVAL_STEPS, synthesis_captions: int = SYNTHESIS_CAPTIONS
) -> dict[str, Any]:
    """The repository's params with the scratch corpus (relative paths) and the fixed amounts of work."""
    tree: dict[str, Any] = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
    tree["device"] = "cpu"
    tree["languages"] = {"pivot": "en", "targets": ["de"]}  # the languages with task2 text: en and de
    tree["paths"].update(parallel="data/raw/wmt", feature_inputs="data/raw/precomp")
    images = "data/raw/flickr30k-images"
    tree["corpora"] = {
        "multi30k": {
            "format": "multi30k",
            "dataset": "multi30k",
            "source": "data/raw/multi30k",
            "images": images,
            "boxes": images,
        }
    }
    tree["corpus_roles"] = {"mmt_finetune": "multi30k", "target": "multi30k"}
    tree["prepare"]["multi30k"]["splits"]["test"] = {"task1": STEMS["test"][0], "task2": STEMS["test"][1]}
    tree["prepare"]["text"]["control_characters"] = "remove"  # the WMT sample holds C1 controls
    tree["features"].update(extractor="scan-npy", probe=False)
    tree["features"]["regions"].update(mode="fixed", count=REGIONS)
    # the text-only route (README, "Real text"): each step of the regional MMT runs its Bi-LSTM over the sentence
    # once per region (37 threads), ~10 s a step on a shared 2-core CPU; its rates are in the GPU figures
    tree["mmt"].update(targets=["de"], meteor=False, systems=["mt"])
    tree["mmt"]["pretrain"]["max_steps"] = mmt_steps
    tree["mmt"]["finetune"]["max_steps"] = mmt_steps
    tree["distributed"]["parallel_directions"] = False  # one process per stage: its peak RSS is the stage's
    tree["synthesis"]["max_captions"] = synthesis_captions
    retrieval = tree["retrieval"]
    retrieval.update(models=["san"], variants=["mt_f"], roles=["all"])
    retrieval["translate_search"]["languages"] = []  # no translate_queries stage: one retrieval run is measured
    retrieval["train"]["max_steps"] = retrieval_steps
    return tree


# ---------------------------------------------------------------------------------------------- running the stages


def stage_commands(dvc_yaml: Path) -> dict[str, str]:
    """Stage name (``<group>@<item>`` for a foreach group) -> its command, as dvc.yaml gives it."""
    stages = yaml.safe_load(dvc_yaml.read_text(encoding="utf-8"))["stages"]
    commands: dict[str, str] = {}
    for name, stage in stages.items():
        if "foreach" in stage:
            commands.update({f"{name}@{item}": entry["cmd"] for item, entry in stage["foreach"].items()})
        else:
            commands[name] = stage["cmd"]
    return commands


def run_measured(command: Sequence[str], cwd: Path, env: Mapping[str, str], log: Path) -> dict[str, float]:
    """Run ``command`` to its end; its wall seconds, CPU seconds (user + system) and peak RSS (MiB), each covering
    the processes it waited for."""
    with log.open("ab") as output:
        started = time.perf_counter()
        child = subprocess.Popen(command, cwd=cwd, env=dict(env), stdout=output, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(child.pid, 0)
        seconds = time.perf_counter() - started
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        tail = log.read_text(encoding="utf-8", errors="replace")[-3000:]
        raise SystemExit(f"{shlex.join(command)} failed ({child.returncode}); the end of {log}:\n{tail}")
    cpu = usage.ru_utime + usage.ru_stime  # far less sensitive than wall time to what else the machine runs
    return {"seconds": seconds, "cpu_seconds": cpu, "peak_rss_mib": usage.ru_maxrss / 1024}  # maxrss: KiB


def measure_size(shared: Path, scratch: Path, images: int, env: Mapping[str, str], params: dict[str, Any]) -> dict:
    """Build the tree of ``images`` images in ``scratch``, run every stage on it and return what each cost."""
    project = scratch / "project"
    started = time.perf_counter()
    sizes = build_tree(shared, project / "data" / "raw", images)
    build_seconds = time.perf_counter() - started
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False), encoding="utf-8")
    log = scratch / "stages.log"
    python = [sys.executable if part == "python" else part for part in ("python", "-m", "mmtr.cli", "dag")]
    run_measured(python, project, env, log)
    commands = stage_commands(project / "dvc.yaml")
    missing = [stage for stage in STAGES if stage not in commands]
    if missing:
        raise SystemExit(f"dvc.yaml of the scratch project has no stage {', '.join(missing)}")
    stages: dict[str, dict[str, float]] = {}
    for stage in STAGES:
        argv = [sys.executable if part == "python" else part for part in shlex.split(commands[stage])]
        stages[stage] = run_measured(argv, project, env, log)
        print(f"  {images:>6} images  {stage:<32} {stages[stage]['seconds']:8.1f} s "
              f"{stages[stage]['peak_rss_mib']:8.0f} MiB", flush=True)  # fmt: skip
    return {
        "images": images,
        "splits": sizes,
        "build_seconds": build_seconds,
        "disk_gib": _folder_bytes(project / "data") / 2**30,
        "stages": stages,
        "outputs": outputs_of(project),
    }


def outputs_of(project: Path) -> dict[str, Any]:
    """What the runs say of the fixed work they did: steps trained, captions synthesized, test sizes."""
    metrics = project / "data" / "metrics"
    found: dict[str, Any] = {}
    retrieval = metrics / "retrieval" / f"{RETRIEVAL_RUN}.json"
    if retrieval.is_file():
        found["retrieval_metrics_keys"] = sorted(json.loads(retrieval.read_text(encoding="utf-8")))
    synthesized = project / "data" / "synthesized" / "de.parquet"
    if synthesized.is_file():
        import pyarrow.parquet as pq

        found["synthesized_captions"] = pq.read_metadata(synthesized).num_rows
    return found


def _folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


# --------------------------------------------------------------------------------------------------- the analysis


def growth_exponent(sizes: Sequence[float], values: Sequence[float]) -> float:
    """The least-squares slope b of log(value) = log(a) + b log(size)."""
    if len(sizes) < 2:
        raise ValueError(f"an exponent needs two sizes or more, got {len(sizes)}")
    slope, _ = np.polyfit(np.log(np.asarray(sizes, float)), np.log(np.asarray(values, float)), 1)
    return float(slope)


def power_law(sizes: Sequence[float], values: Sequence[float]) -> tuple[float, float]:
    """(a, b) of value = a size^b, fitted in log-log."""
    slope, intercept = np.polyfit(np.log(np.asarray(sizes, float)), np.log(np.asarray(values, float)), 1)
    return float(math.exp(intercept)), float(slope)


def analyse(runs: Sequence[Mapping[str, Any]], params: Mapping[str, Any], gpu: Mapping[str, Any] | None) -> dict:
    """Per stage: exponents of time and memory, the super-linear flag, the extrapolation to COCO size.

    Every stage pays a fixed cost per run (a Python process, torch and Prefect imports, a flow run): the stage whose
    input is the same at every size (``prepare_parallel``) measures it, and ``net_seconds_exponent`` is the slope of
    what a stage takes beyond it (null where that is not positive at every size), the cost that grows with n. The
    COCO figure is that fixed cost plus the net fit (the whole fit where there is no net one).
    """
    sizes = [run["images"] for run in runs]
    fixed = [run["stages"][STAGES[0]]["seconds"] for run in runs]
    fixed_cost = float(np.mean(fixed))
    fixed_cpu = [run["stages"][STAGES[0]].get("cpu_seconds") for run in runs]
    stages: dict[str, Any] = {}
    for stage in STAGES:
        seconds = [run["stages"][stage]["seconds"] for run in runs]
        rss = [run["stages"][stage]["peak_rss_mib"] for run in runs]
        a, b = power_law(sizes, seconds)
        rss_a, rss_b = power_law(sizes, rss)
        net = [value - base for value, base in zip(seconds, fixed, strict=True)]
        net_fit = power_law(sizes, net) if stage != STAGES[0] and min(net) > 0 else None
        if net_fit is None:  # no growth beyond the fixed cost to fit: at least the largest run's seconds
            grown = max(seconds[-1], a * COCO["images"] ** b)
        else:
            grown = fixed_cost + net_fit[0] * COCO["images"] ** net_fit[1]
        cpu = [run["stages"][stage].get("cpu_seconds") for run in runs]
        cpu_b = growth_exponent(sizes, cpu) if None not in cpu else None
        net_cpu = [value - base for value, base in zip(cpu, fixed_cpu, strict=True)] if cpu_b is not None else []
        net_cpu_fit = power_law(sizes, net_cpu) if net_cpu and stage != STAGES[0] and min(net_cpu) > 0 else None
        net_cpu_b = None if net_cpu_fit is None else net_cpu_fit[1]
        if net_cpu_fit is not None:  # CPU time, far less noisy on a shared machine: the fixed CPU plus the net fit
            grown = float(np.mean(fixed_cpu)) + net_cpu_fit[0] * COCO["images"] ** net_cpu_fit[1]
        elif cpu_b is not None:
            cpu_a, _ = power_law(sizes, cpu)
            grown = max(cpu[-1], cpu_a * COCO["images"] ** cpu_b)
        exponents = [value for value in (b, net_fit[1] if net_fit else None, cpu_b, net_cpu_b) if value is not None]
        stages[stage] = {
            "seconds_exponent": b,
            "net_seconds_exponent": None if net_fit is None else net_fit[1],
            "cpu_seconds_exponent": cpu_b,
            "net_cpu_seconds_exponent": net_cpu_b,
            "rss_exponent": rss_b,
            "super_linear": max(exponents) > SUPER_LINEAR,
            "coco_seconds": grown,  # CPU seconds where the run measured them, else wall seconds
            "coco_peak_rss_mib": rss_a * COCO["images"] ** rss_b,
        }
    return {
        "fixed_seconds_per_stage": fixed_cost,
        "stages": stages,
        "full_training": full_training(runs[-1], params),
        "gpu": gpu_extrapolation(gpu) if gpu is not None else None,
    }


def full_training(run: Mapping[str, Any], params: Mapping[str, Any]) -> dict[str, Any]:
    """Upper bounds of the step-capped retrieval trained in full: the largest run's stage seconds per capped step
    (fixed costs, validation and test included, so an upper bound) x the steps of full training at the demo's
    epochs and batch."""
    train_images = run["splits"]["train"]
    retrieval = params["retrieval"]["train"]
    captions = train_images * CAPTIONS_PER_IMAGE * len(LANGS)  # human comparable captions, en + de
    retrieval_steps = math.ceil(captions / retrieval["batch_size"]) * retrieval["epochs"]
    retrieval_per_step = run["stages"][f"train_retrieval@{RETRIEVAL_RUN}"]["seconds"] / retrieval["max_steps"]
    return {
        "from_images": run["images"],
        "retrieval_seconds_per_step_bound": retrieval_per_step,
        "retrieval_steps_full": retrieval_steps,
        "retrieval_full_hours_bound": retrieval_per_step * retrieval_steps / 3600,
    }


def gpu_extrapolation(gpu: Mapping[str, Any]) -> dict[str, Any]:
    """COCO-size figures from the GPU checks (docs/scaling.md, GPU figures): the 1K x 5K evaluation scaled to
    5K x 25K (encoding grows with the items, scoring and ranking with the pairs: x5 and x25), and the paper's
    24-epoch retrieval training at the measured steps/s (113,287 x 5 captions per language in batches of 128)."""
    evaluation = gpu["checks"]["scan_eval"]
    figures = {key: item["value"] for key, item in evaluation["figures"].items()}
    settings = evaluation["settings"]
    items = COCO["test"] / settings["images"]
    pairs = items * (COCO["test"] * CAPTIONS_PER_IMAGE / settings["captions"])
    steps = math.ceil(COCO["train"] * CAPTIONS_PER_IMAGE / RETRIEVAL_BATCH) * PAPER_RETRIEVAL_EPOCHS
    training = {key: item["value"] for key, item in gpu["checks"]["retrieval_train"]["figures"].items()}
    result: dict[str, Any] = {"device": gpu["machine"]["device_name"], "precision": gpu["precision"]}
    for model in ("scan", "san"):
        encode = figures[f"{model}_encode_images_s"] + figures[f"{model}_encode_texts_s"]
        score = figures[f"{model}_score_s"] + figures[f"{model}_rank_s"]
        result[f"{model}_eval_1k_s"] = figures[f"{model}_total_s"]
        result[f"{model}_eval_coco_5k_s"] = encode * items + score * pairs
        result[f"{model}_eval_coco_score_share"] = score * pairs / (encode * items + score * pairs)
        result[f"{model}_train_coco_24_epochs_h"] = steps / training[f"{model}_steps_per_s"] / 3600
    result["coco_training_steps"] = steps
    return result


# --------------------------------------------------------------------------------------------------- the markdown


def markdown(record: Mapping[str, Any]) -> str:
    """The cost table of a run: seconds and peak RSS per stage and size, the exponents, the COCO extrapolation."""
    runs, analysis = record["runs"], record["analysis"]
    sizes, work = [run["images"] for run in runs], record["fixed_work"]
    start, end = record["load_average_start"][0], record["load_average_end"][0]
    lines = [
        f"Run of {record['created']} on {record['cpu_cores']} CPU cores, {record['threads']} thread(s) per stage "
        f"(load average {start:.2f} at the start, {end:.2f} at the end), commit {record['commit'][:10]}. Fixed work: "
        f"{work['mmt_max_steps']} steps per MMT phase, {work['retrieval_max_steps']} retrieval steps, "
        f"{work['synthesis_max_captions']} captions synthesized per pass. Stand-in images and features; each cell: "
        "wall seconds, peak RSS.",
        "",
        "| stage | "
        + " | ".join(f"{size:,} images" for size in sizes)
        + " | b wall | b wall net | b CPU | b CPU net | b RSS | COCO (fit: CPU s, RSS) |",
        "| --- | " + " | ".join("---:" for _ in sizes) + " | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for stage in STAGES:
        fit = analysis["stages"][stage]
        cells = [_cell(run["stages"][stage]) for run in runs]
        net, cpu, net_cpu = (
            _exponent(fit.get(key))
            for key in ("net_seconds_exponent", "cpu_seconds_exponent", "net_cpu_seconds_exponent")
        )
        flag = " (super-linear)" if fit["super_linear"] else ""
        lines.append(
            f"| {stage}{flag} | {' | '.join(cells)} | {fit['seconds_exponent']:.2f} | {net} | {cpu} | {net_cpu} "
            f"| {fit['rss_exponent']:.2f} | {fit['coco_seconds']:,.0f} s, {fit['coco_peak_rss_mib']:,.0f} MiB |"
        )
    splits = ", ".join(
        f"{run['splits']['train']:,} / {run['splits']['val']:,} / {run['splits']['test']:,}" for run in runs
    )
    full = analysis["full_training"]
    lines += [
        "",
        f"- Train / val / test images per size: {splits}.",
        f"- Peak RSS of the bench process itself (every stage's figure includes at least this): "
        f"{record['bench_peak_rss_mib']:,.0f} MiB.",
        f"- Fixed cost of a stage (the mean of `{STAGES[0]}`, whose input is the same at every size): "
        f"{analysis['fixed_seconds_per_stage']:.1f} s; the net exponents are those of the seconds beyond it.",
        "- Building each tree (not a stage): "
        + ", ".join(f"{run['build_seconds']:.0f} s" for run in runs)
        + "; on disk after the run: "
        + ", ".join(f"{run['disk_gib']:.2f} GiB" for run in runs)
        + ".",
        f"- Retrieval trained in full at {full['from_images']:,} images ({full['retrieval_steps_full']:,} steps at "
        f"the demo's epochs and batch): at most {full['retrieval_full_hours_bound']:.1f} h on this CPU "
        f"({full['retrieval_seconds_per_step_bound']:.2f} s per capped step, fixed costs included).",
    ]
    gpu = analysis.get("gpu")
    if gpu:
        lines.append(
            f"- At COCO size on the GPU of the [GPU figures](#gpu-figures) ({gpu['device']}, {gpu['precision']}): "
            f"the 5K x 25K evaluation takes about {gpu['scan_eval_coco_5k_s']:.0f} s with SCAN "
            f"({gpu['scan_eval_coco_score_share']:.0%} of it scoring the pairs; {gpu['scan_eval_1k_s']:.1f} s at "
            f"1K x 5K) and {gpu['san_eval_coco_5k_s']:.1f} s with SAN; the paper's 24 epochs "
            f"({gpu['coco_training_steps']:,} steps) {gpu['scan_train_coco_24_epochs_h']:.1f} h with SCAN, "
            f"{gpu['san_train_coco_24_epochs_h']:.1f} h with SAN."
        )
    return "\n".join(lines) + "\n"


def _cell(cost: Mapping[str, float]) -> str:
    cpu = f" ({cost['cpu_seconds']:.1f} s CPU)" if "cpu_seconds" in cost else ""
    return f"{cost['seconds']:.1f} s{cpu}, {cost['peak_rss_mib']:,.0f} MiB"


def _exponent(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}"


# ----------------------------------------------------------------------------------------------------------- main


def _commit() -> str:
    done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=False)
    return done.stdout.strip() if done.returncode == 0 else ""


def _scratches(parent: Path | None, sizes: Sequence[int]) -> Iterator[tuple[int, Path]]:
    """One scratch folder per size, deleted before the next is made: never two sizes on disk at once."""
    for images in sizes:
        with tempfile.TemporaryDirectory(prefix=f"cost-curve-{images}-", dir=parent) as scratch:
            yield images, Path(scratch)


def run_bench(args: argparse.Namespace) -> dict[str, Any]:
    shared: Path = args.shared
    if not (shared / "multi30k" / "task2" / "raw").is_dir() or not (shared / "wmt-sample").is_dir():
        raise SystemExit(f"{shared}: needs multi30k/ (the real Multi30K data folder) and wmt-sample/")
    params = project_params(args.mmt_steps, args.retrieval_steps, args.synthesis_captions)
    record: dict[str, Any] = {
        "bench": "cost_curve",
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "commit": _commit(),
        "cpu_cores": os.cpu_count(),
        "threads": args.threads,
        "load_average_start": list(os.getloadavg()),
        "sizes": list(args.sizes),
        "fixed_work": {
            "mmt_max_steps": args.mmt_steps,
            "retrieval_max_steps": args.retrieval_steps,
            "synthesis_max_captions": args.synthesis_captions,
            "retrieval_run": RETRIEVAL_RUN,
        },
        "runs": [],
    }
    base = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    threads = str(args.threads)  # a shared machine: more threads than free cores make every step wait
    base.update(PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1", OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads)
    with (
        tempfile.TemporaryDirectory(prefix="cost-curve-prefect-", dir=args.dir) as home,
        prefect_server(home=Path(home)) as api_url,
    ):
        env = {**base, "PREFECT_API_URL": api_url}
        for images, scratch in _scratches(args.dir, args.sizes):
            record["runs"].append(measure_size(shared, scratch, images, env, params))
    record["load_average_end"] = list(os.getloadavg())
    record["bench_peak_rss_mib"] = _own_peak_mib()
    record["analysis"] = analyse(record["runs"], params, read_gpu_figures())
    write_text(args.out, json.dumps(record, indent=2) + "\n")
    return record


def read_gpu_figures(path: Path = GPU_FIGURES) -> dict[str, Any] | None:
    """The GPU checks' JSON (bench/gpu_checks.py), when the repository holds one."""
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def reanalyse(path: Path) -> dict[str, Any]:
    """Recompute the analysis of a finished run's JSON (with this version of the fit) and rewrite it."""
    record = json.loads(path.read_text(encoding="utf-8"))
    work = record["fixed_work"]
    params = project_params(work["mmt_max_steps"], work["retrieval_max_steps"], work["synthesis_max_captions"])
    record["analysis"] = analyse(record["runs"], params, read_gpu_figures())
    write_text(path, json.dumps(record, indent=2) + "\n")
    return record


def _own_peak_mib() -> float:
    """This process's own peak RSS: a child starts from a copy of it, so it is the floor of a stage's figure."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="images per tree")
    parser.add_argument("--small", action="store_true", help=f"sizes {SMALL_SIZES} (a smoke run)")
    parser.add_argument("--shared", type=Path, default=REPO.parent / "shared" / "data", help="the real data folder")
    parser.add_argument("--dir", type=Path, help="where the scratch trees go (default: the system's temp folder)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the JSON file")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads of each stage (OMP_NUM_THREADS)")
    parser.add_argument("--mmt-steps", type=int, default=MMT_STEPS, help="mmt.pretrain/finetune.max_steps")
    parser.add_argument("--retrieval-steps", type=int, default=RETRIEVAL_STEPS, help="retrieval.train.max_steps")
    parser.add_argument("--synthesis-captions", type=int, default=SYNTHESIS_CAPTIONS, help="synthesis.max_captions")
    parser.add_argument("--reanalyse", type=Path, metavar="JSON", help="recompute a finished run's fit, rewrite it")
    add_section_arguments(parser)
    args = parser.parse_args(argv)
    if args.small:
        args.sizes = list(SMALL_SIZES)
    if len(args.sizes) < 2 or sorted(set(args.sizes)) != args.sizes:
        parser.error("--sizes: two or more sizes, increasing")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    if args.reanalyse:
        reanalyse(args.reanalyse)
        return
    if publish_section(args, SECTION, markdown):
        return
    record = run_bench(args)
    print(markdown(record), end="")


if __name__ == "__main__":
    main()
