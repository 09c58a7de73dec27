"""WMT-size text: time and peak memory of each step of the MMT's text path on a corpus of a million sentence pairs.

The corpus is built from the real English-German text beside the checkout (the OpenNMT WMT sample's 10,000 pairs and
Multi30K task 1's 29,000 training pairs when present) in the layout of `paths.parallel` (`en-de/train.en.gz`,
`train.de.gz`, and the sample's `val` split). Past the first pass over the real pairs (in shuffled order) every pair is
a seeded variant of one, in turn: two random pairs joined into one (a recombination), a random pair with two adjacent
words swapped on each side (word-order perturbation), or a random pair with a number added on both sides (a numbered
variant); the JSON records how many pairs are distinct.

Each step runs in a fresh process, timed, while its process tree's memory is sampled (psutil, every 0.1 s):

- prepare: `corpora.wmt.write_parallel_pair`, what `prepare_parallel@de` runs: the gzip files streamed into Parquet;
- subword: `TextPipeline.train` on the table streamed by row group (the seeded sample of `--sample` pairs, Moses over
  `--threads` processes, sentencepiece BPE of `--vocab` pieces per side), and the time of one pass of the sampling
  over the stream alone (what grows with the corpus once it is larger than the sample);
- encode: `mmt.encoded.encode_pairs` of the training rows, streamed by row group, over `--threads` processes, into
  the flat arrays training reads, written as `train_mmt` writes them into its work folder, a chunk at a time
  (`encode_pairs_into`);
- train: what `mmt.train.fit` does with them before and in its first steps, on the arrays memory-mapped as
  `train_mmt` maps them (`open_encoded`): `check_examples`, one epoch's batch plan (`length_batches`), the collation
  of 200 batches (examples built from the arrays and padded), and `--train-steps` steps of a randomly initialised
  RegionalMMT (emb 256, hidden 512) on one torch thread.

The first three steps together take the raw text to the encoded arrays; the table gives their sum (and the largest of
their peaks). Besides each process tree's peak RSS the JSON records its peak without shared file pages (a mapped
file's pages count in RSS but belong to the page cache) and the load average after each step.

Usage (from the repository root; ``--small``: 20,000 pairs in about a minute):

    PYTHONPATH=. python bench/wmt_scale.py      # 100,000 and 1,000,000 pairs -> bench/results/wmt_scale.json
    PYTHONPATH=. python bench/wmt_scale.py --small --out wmt_small.json
    python bench/wmt_scale.py --markdown bench/results/wmt_scale.json --into docs/scaling.md   # the table in the docs

The load average of the machine is recorded at the start and end of the run: on a shared machine the figures of a
busy one are slower than the code.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gzip
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run as a script: the repository's packages, as with PYTHONPATH=.

import numpy as np  # noqa: E402  (after the path above; heavy modules are imported inside each step)
import psutil  # noqa: E402

from common.files import read_json, read_lines, write_json, write_text  # noqa: E402
from mmtr.doc_sections import add_section_arguments, publish_section  # noqa: E402

DEFAULT_OUT = REPO / "bench" / "results" / "wmt_scale.json"
STEPS = ("build", "prepare", "subword", "encode", "train")
RAW_TO_ENCODED = ("prepare", "subword", "encode")  # raw text files -> the encoded arrays train_mmt maps
SECTION = "wmt-figures"  # the docs section this bench writes (mmtr.doc_sections)
WMT_SAMPLE = Path("wmt-sample") / "opennmt-toy-ende"
MULTI30K = Path("multi30k") / "task1" / "raw"
SEED = 1
COLLATED = 200  # batches collated (examples built and padded) to time the data side of a step
EXTRAPOLATE_TO = 4_500_000  # the WMT'14 English-German training pairs the paper pre-trains on


# ------------------------------------------------------------------------------------------------------ the corpus


def base_pairs(shared: Path) -> list[tuple[str, str]]:
    """The real English-German training pairs: the WMT sample's, then Multi30K task 1's when present."""
    pairs = list(zip(*(read_lines(shared / WMT_SAMPLE / f"{side}-train.txt") for side in ("src", "tgt")), strict=True))
    multi30k = shared / MULTI30K
    if (multi30k / "train.en.gz").is_file():
        pairs += zip(read_lines(multi30k / "train.en.gz"), read_lines(multi30k / "train.de.gz"), strict=True)
    return [(src.strip(), tgt.strip()) for src, tgt in pairs]


def varied_pairs(base: list[tuple[str, str]], count: int, *, seed: int) -> Iterator[tuple[str, str]]:
    """``count`` pairs: the base pairs once in shuffled order, then seeded variants of them (module docstring)."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(base))
    for k in range(count):
        if k < len(base):
            yield base[int(order[k])]
            continue
        first, second = base[int(rng.integers(len(base)))], base[int(rng.integers(len(base)))]
        kind = k % 3
        if kind == 0:
            yield f"{first[0]} {second[0]}", f"{first[1]} {second[1]}"
        elif kind == 1:
            yield _swap_adjacent(first[0], rng), _swap_adjacent(first[1], rng)
        else:
            yield f"{first[0]} No. {k}", f"{first[1]} Nr. {k}"


def _swap_adjacent(sentence: str, rng: np.random.Generator) -> str:
    words = sentence.split(" ")
    if len(words) > 1:
        at = int(rng.integers(len(words) - 1))
        words[at], words[at + 1] = words[at + 1], words[at]
    return " ".join(words)


def build(work: Path, shared: Path, pairs: int) -> dict[str, Any]:
    base = base_pairs(shared)
    folder = work / "parallel" / "en-de"
    folder.mkdir(parents=True, exist_ok=True)
    distinct: set[int] = set()
    with (
        gzip.open(folder / "train.en.gz", "wt", encoding="utf-8", compresslevel=1) as src,
        gzip.open(folder / "train.de.gz", "wt", encoding="utf-8", compresslevel=1) as tgt,
    ):
        for pair in varied_pairs(base, pairs, seed=SEED):
            src.write(pair[0] + "\n")
            tgt.write(pair[1] + "\n")
            distinct.add(hash(pair))
    for side, lang in (("src", "en"), ("tgt", "de")):
        lines = read_lines(shared / WMT_SAMPLE / f"{side}-val.txt")
        write_text(folder / f"val.{lang}", "".join(line + "\n" for line in lines))
    size = sum(path.stat().st_size for path in folder.iterdir())
    return {"base_pairs": len(base), "distinct_pairs": len(distinct), "files_mib": size / 2**20}


# ----------------------------------------------------------------------------------------------------- the steps


def prepare(work: Path) -> dict[str, Any]:
    import pyarrow.parquet as pq

    from common.text_input import TextCleaner
    from corpora.wmt import ParallelConfig, write_parallel_pair

    out = work / "prepared" / "en-de.parquet"
    clean = TextCleaner("remove")  # the WMT sample holds C1 controls
    splits = ParallelConfig().splits
    counts = write_parallel_pair(work / "parallel", pair=("en", "de"), splits=splits, out=out, text=clean)
    return {
        "train_pairs": counts["train"],
        "val_pairs": counts.get("val", 0),
        "parquet_mib": out.stat().st_size / 2**20,
        "row_groups": pq.ParquetFile(out).metadata.num_row_groups,
    }


def train_rows(table: Path, column: str) -> Iterator[str]:
    """One column of the training rows of a prepared parallel table, read a row group at a time."""
    for src, tgt in train_chunks(table):
        yield from src if column == "src" else tgt


def train_chunks(table: Path, size: int = 5000) -> Iterator[tuple[list[str], list[str]]]:
    """The training rows of a prepared parallel table as (src, tgt) chunks of ``size``, a row group at a time."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(table)
    for group in range(parquet.num_row_groups):
        rows = parquet.read_row_group(group)
        rows = rows.filter(pc.equal(rows.column("split"), "train"))
        src, tgt = rows.column("src").to_pylist(), rows.column("tgt").to_pylist()
        for start in range(0, len(src), size):
            yield src[start : start + size], tgt[start : start + size]


def subword(work: Path, args: argparse.Namespace) -> dict[str, Any]:
    from mmt.sample import reservoir_sample
    from mmt.text import SubwordConfig, TextPipeline

    table = work / "prepared" / "en-de.parquet"
    started = time.perf_counter()
    sample = reservoir_sample(zip(train_rows(table, "src"), train_rows(table, "tgt"), strict=True), args.sample, seed=1)
    scan_s = time.perf_counter() - started
    sampled, total = len(sample.items), sample.total
    del sample
    config = SubwordConfig(vocab_size=args.vocab, sample_sentences=args.sample, threads=args.threads)
    started = time.perf_counter()
    text = TextPipeline.train(
        train_rows(table, "src"),
        train_rows(table, "tgt"),
        src_lang="en",
        tgt_lang="de",
        config=config,
        out_dir=work / "text",
        seed=SEED,
    )
    return {
        "sampled_pairs": sampled,
        "corpus_pairs": total,
        "sample_scan_s": scan_s,
        "train_s": time.perf_counter() - started,
        "src_vocab": text.src_vocab.size,
        "tgt_vocab": text.tgt_vocab.size,
    }


def encode(work: Path, args: argparse.Namespace) -> dict[str, Any]:
    from mmt.encoded import encode_pairs_into, open_encoded
    from mmt.text import TextPipeline

    text = TextPipeline.load(work / "text", threads=args.threads)
    # what train_mmt writes into its work folder, a chunk at a time, and maps
    encode_pairs_into(text, train_chunks(work / "prepared" / "en-de.parquet"), work / "encoded", threads=args.threads)
    encoded = open_encoded(work / "encoded")
    src_lengths, tgt_lengths = encoded.lengths()
    return {
        "pairs": len(encoded),
        "store_mib": encoded.nbytes / 2**20,
        "id_dtype": str(encoded.src_ids.dtype),
        "mean_src_ids": float(src_lengths.mean()),
        "mean_tgt_ids": float(tgt_lengths.mean()),
    }


def train(work: Path, args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from mmt.encoded import open_encoded
    from mmt.model import MMTConfig, MMTShape, RegionalMMT
    from mmt.text import TextPipeline
    from mmt.train import check_examples, collate, length_batches, share_loss

    torch.set_num_threads(1)  # the figures are the data path's; one thread keeps a busy machine's steps comparable
    torch.manual_seed(SEED)
    encoded = open_encoded(work / "encoded")  # memory-mapped, as train_mmt reads them
    text = TextPipeline.load(work / "text")
    shape = MMTShape(src_vocab=text.src_vocab.size, tgt_vocab=text.tgt_vocab.size, max_len=text.config.max_len)
    started = time.perf_counter()
    check_examples(encoded, shape, with_regions=False)
    check_s = time.perf_counter() - started
    started = time.perf_counter()
    batches = length_batches(encoded, batch_size=args.batch, sort_chunk=20, rng=np.random.default_rng(SEED))
    plan_s = time.perf_counter() - started
    cpu = torch.device("cpu")
    started = time.perf_counter()
    for indices in batches[:COLLATED]:
        collate(encoded, indices, regions=None, shape=shape, device=cpu)
    collate_ms = 1000 * (time.perf_counter() - started) / min(COLLATED, len(batches))
    # the data path's memory, before the model's steps add theirs (which depend on the batches drawn, not the corpus)
    memory = psutil.Process().memory_info()
    model = RegionalMMT(MMTConfig(), shape)
    optimizer = torch.optim.Adam(model.parameters(), lr=4e-4)
    model.train()
    steps = batches[: args.train_steps]
    started = time.perf_counter()
    for indices in steps:
        loss = share_loss(model, encoded, indices, regions=None, device=cpu)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        optimizer.step()
    step_s = (time.perf_counter() - started) / len(steps)
    return {
        "check_examples_s": check_s,
        "plan_epoch_s": plan_s,
        "batches_per_epoch": len(batches),
        "collate_ms_per_batch": collate_ms,
        "data_rss_mib": memory.rss / 2**20,
        "data_private_mib": (memory.rss - memory.shared) / 2**20,
        "longest_step_ids": max(int(max(encoded.lengths()[1][indices])) for indices in steps),
        "steps": len(steps),
        "seconds_per_step": step_s,
    }


# ------------------------------------------------------------------------------------------------ measuring a step


def run_step(args: argparse.Namespace) -> None:
    """In the step's own process: run it and write its figures and this process's peak RSS."""
    work = Path(args.work)
    functions = {
        "build": lambda: build(work, Path(args.shared), args.step_pairs),
        "prepare": lambda: prepare(work),
        "subword": lambda: subword(work, args),
        "encode": lambda: encode(work, args),
        "train": lambda: train(work, args),
    }
    figures = functions[args.step]()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    write_json(work / f"{args.step}.json", {"figures": figures, "peak_rss_mib": peak})


def measured(step: str, work: Path, args: argparse.Namespace, pairs: int) -> dict[str, Any]:
    """Run ``step`` in a child process; its seconds, its own peak RSS and the peak RSS of its process tree."""
    command = [sys.executable, str(Path(__file__).resolve()), "--step", step, "--work", str(work)]
    command += ["--step-pairs", str(pairs), "--shared", str(args.shared), "--threads", str(args.threads)]
    command += ["--sample", str(args.sample), "--vocab", str(args.vocab), "--batch", str(args.batch)]
    command += ["--train-steps", str(args.train_steps)]
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    started, cpu_before = time.perf_counter(), _children_cpu_s()
    child = subprocess.Popen(command, env=env)
    tree_peak = private_peak = 0
    while child.poll() is None:
        rss, private = _tree_rss(child.pid)
        tree_peak, private_peak = max(tree_peak, rss), max(private_peak, private)
        time.sleep(0.1)
    seconds = time.perf_counter() - started
    cpu_s = _children_cpu_s() - cpu_before  # the step's processes, its pool's workers included (each was waited for)
    if child.returncode:
        raise SystemExit(f"step {step} at {pairs} pairs failed (exit {child.returncode})")
    result = read_json(work / f"{step}.json")
    print(f"{pairs:>9,} pairs  {step:<8} {seconds:8.1f} s  peak RSS {result['peak_rss_mib']:7.0f} MiB", flush=True)
    return {
        "seconds": seconds,
        "cpu_s": cpu_s,
        "peak_tree_rss_mib": tree_peak / 2**20,
        "peak_tree_private_mib": private_peak / 2**20,
        "loadavg_after": list(os.getloadavg()),
        **result,
    }


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _tree_rss(pid: int) -> tuple[int, int]:
    """RSS of a process and its children, and the part of it that is not shared file pages (a memory-mapped file's
    pages count in RSS but are the page cache's, given back under pressure)."""
    with contextlib.suppress(psutil.Error):
        process = psutil.Process(pid)
        total = private = 0
        for member in [process, *process.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                memory = member.memory_info()
                total, private = total + memory.rss, private + memory.rss - memory.shared
        return total, private
    return 0, 0


def run_all(args: argparse.Namespace) -> dict[str, Any]:
    load_start = os.getloadavg()
    started = time.perf_counter()
    record: dict[str, Any] = {
        "bench": "wmt_scale",
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "commit": _commit(),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "settings": {
            "threads": args.threads,
            "sample": args.sample,
            "vocab": args.vocab,
            "batch": args.batch,
            "train_steps": args.train_steps,
            "small": args.small,
        },
        "loadavg_start": list(load_start),
        "runs": [],
    }
    for pairs in args.pairs:
        steps: dict[str, Any] = {}
        record["runs"].append({"pairs": pairs, "steps": steps})
        with tempfile.TemporaryDirectory(prefix="wmt-scale-", dir=args.work) as folder:
            for step in STEPS:
                steps[step] = measured(step, Path(folder), args, pairs)
                record["loadavg_end"] = list(os.getloadavg())
                record["total_s"] = time.perf_counter() - started
                write_json(args.out, record)  # after every step: a run cut short keeps what it measured
    print(markdown(record), end="")
    return record


def _commit() -> str | None:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        query = ["git", "rev-parse", "HEAD"]
        return subprocess.run(query, cwd=REPO, capture_output=True, text=True, timeout=20, check=True).stdout.strip()
    return None


# ---------------------------------------------------------------------------------------------------- the markdown


def extrapolated(record: dict[str, Any], step: str, key: str, target: int) -> float | None:
    """``key`` of ``step`` at ``target`` pairs from the two largest runs; None with fewer than two.

    A step grows linearly through the two runs, except where part of it does not depend on the corpus. Subword
    training reads a sample of at most ``settings.sample`` pairs, so beyond it only the pass over the corpus grows
    (time by the growth of ``sample_scan_s``, memory not at all). In the train step only checking the examples and
    planning the epoch read the whole corpus (time by the growth of ``check_examples_s`` + ``plan_epoch_s``), and
    of its memory only the encoded store grows with it (by the growth of the encode step's ``store_mib``); the
    model's steps depend on the batch."""
    runs = sorted(record["runs"], key=lambda run: run["pairs"])[-2:]
    if len(runs) < 2:
        return None
    low, high = runs[0]["pairs"], runs[1]["pairs"]
    lo, hi = runs[0]["steps"], runs[1]["steps"]

    def grown(value: float, low_part: float, high_part: float) -> float:
        return float(value + (high_part - low_part) / (high - low) * (target - high))

    def part(steps: dict[str, Any], names: tuple[str, ...], source: str) -> float:
        return float(sum(steps[source]["figures"][name] for name in names))

    if step == "subword" and high >= record["settings"]["sample"]:
        if key != "seconds":
            return float(hi[step][key])
        names: tuple[str, ...] = ("sample_scan_s",)
        return grown(hi[step][key], part(lo, names, step), part(hi, names, step))
    if step == "train":
        names, source = (
            (("check_examples_s", "plan_epoch_s"), "train") if key == "seconds" else (("store_mib",), "encode")
        )
        return grown(hi[step][key], part(lo, names, source), part(hi, names, source))
    return grown(hi[step][key], lo[step][key], hi[step][key])


def markdown(record: dict[str, Any], target: int = EXTRAPOLATE_TO) -> str:
    """The figures of a run as a Markdown table: per step and corpus size, seconds and peak memory, and the
    extrapolation to ``target`` pairs."""
    settings = record["settings"]
    load = f"load average {record['loadavg_start'][0]:.1f} at the start, {record['loadavg_end'][0]:.1f} at the end"
    lines = [
        f"Run of {record['created']} on {record['machine']['cpus']} CPUs ({load})"
        + (f", commit {record['commit'][:10]}" if record.get("commit") else "")
        + f"; {settings['threads']} processes, a subword sample of {settings['sample']:,} pairs, "
        f"{settings['vocab']:,} pieces per side, {settings['train_steps']} training steps of batch "
        f"{settings['batch']}; {record['total_s']:.0f} s in all.",
        "",
    ]
    sizes = [run["pairs"] for run in record["runs"]]
    header = "| step | " + " | ".join(f"{pairs:,} pairs: s / MiB" for pairs in sizes)
    can_extrapolate = len(sizes) >= 2
    if can_extrapolate:
        header += f" | {target:,} pairs (extrapolated): s / MiB"
    lines += [header + " |", "|---" * (1 + len(sizes) + can_extrapolate) + "|"]
    for step in STEPS[1:]:
        cells = [
            f"{run['steps'][step]['seconds']:,.0f} / {run['steps'][step]['peak_tree_rss_mib']:,.0f}"
            for run in record["runs"]
        ]
        if can_extrapolate:
            seconds = extrapolated(record, step, "seconds", target)
            memory = extrapolated(record, step, "peak_tree_rss_mib", target)
            cells.append(f"{seconds:,.0f} / {memory:,.0f}")
        lines.append(f"| {step} | " + " | ".join(cells) + " |")
    cells = [f"**{_raw_seconds(run['steps']):,.0f} / {_raw_memory(run['steps']):,.0f}**" for run in record["runs"]]
    if can_extrapolate:
        seconds = sum(extrapolated(record, step, "seconds", target) or 0.0 for step in RAW_TO_ENCODED)
        memory = max(extrapolated(record, step, "peak_tree_rss_mib", target) or 0.0 for step in RAW_TO_ENCODED)
        cells.append(f"**{seconds:,.0f} / {memory:,.0f}**")
    lines.append("| **raw text -> encoded arrays** (the three above) | " + " | ".join(cells) + " |")
    largest = max(record["runs"], key=lambda run: run["pairs"])
    steps = largest["steps"]
    build, prepare_, subword_, encode_, train_ = (steps[name]["figures"] for name in STEPS)
    lines += [
        "",
        f"At {largest['pairs']:,} pairs ({build['distinct_pairs']:,} distinct, from {build['base_pairs']:,} real "
        f"ones): the table holds {prepare_['row_groups']} row groups ({prepare_['parquet_mib']:,.0f} MiB); subword "
        f"training read {subword_['sampled_pairs']:,} pairs (the pass over the corpus: "
        f"{subword_['sample_scan_s']:,.1f} s); the encoded store holds {encode_['store_mib']:,.0f} MiB "
        f"({encode_['id_dtype']} ids, {encode_['mean_src_ids']:.1f} source and {encode_['mean_tgt_ids']:.1f} target "
        f"ids a pair on average); training checked the examples in {train_['check_examples_s']:,.1f} s, planned "
        f"an epoch of {train_['batches_per_epoch']:,} batches in {train_['plan_epoch_s']:,.1f} s, and collated a "
        f"batch in {train_['collate_ms_per_batch']:,.1f} ms beside a training step of "
        f"{train_['seconds_per_step']:,.1f} s (one torch thread, emb 256, hidden 512).",
    ]
    if all("loadavg_after" in run["steps"][step] for run in record["runs"] for step in STEPS):
        loads = [
            f"{run['pairs']:,} pairs: "
            + ", ".join(f"{step} {run['steps'][step]['loadavg_after'][0]:.1f}" for step in STEPS[1:])
            for run in record["runs"]
        ]
        private = ", ".join(
            f"{run['steps']['train']['peak_tree_private_mib']:,.0f} MiB at {run['pairs']:,} pairs"
            for run in record["runs"]
        )
        data = ", ".join(
            f"{run['steps']['train']['figures']['data_rss_mib']:,.0f} MiB "
            f"({run['steps']['train']['figures']['data_private_mib']:,.0f} without shared file pages) at "
            f"{run['pairs']:,} pairs"
            for run in record["runs"]
            if "data_rss_mib" in run["steps"]["train"]["figures"]
        )
        longest = ", ".join(
            f"{run['steps']['train']['figures']['longest_step_ids']} ids at {run['pairs']:,} pairs"
            for run in record["runs"]
            if "longest_step_ids" in run["steps"]["train"]["figures"]
        )
        if data:
            private += (
                f". Before the model's steps (the examples checked, the epoch planned, {COLLATED} batches collated) "
                f"the train step's process held {data}; the steps add a batch's activations and logits, which grow "
                f"with the batch's longest target (the timed steps' longest: {longest}), not with the corpus"
            )
        cpu = [
            f"{run['pairs']:,} pairs: "
            + ", ".join(f"{step} {run['steps'][step]['cpu_s']:,.0f}" for step in STEPS[1:])
            + f" (raw text -> encoded arrays {sum(run['steps'][step]['cpu_s'] for step in RAW_TO_ENCODED):,.0f})"
            for run in record["runs"]
            if all("cpu_s" in run["steps"][step] for step in STEPS)
        ]
        cpu_sentence = (
            "On a busy machine a step's wall time is the machine's more than the code's; the CPU seconds its "
            f"processes used (user and system, the pool's workers included) are the code's: {'; '.join(cpu)}. "
            if cpu
            else ""
        )
        lines += [
            "",
            f"The load average (1 minute) after each step, {'; '.join(loads)}. {cpu_sentence}The train step reads the "
            "encoded arrays memory-mapped, so its RSS counts the pages of them it touched, which are the page cache's; "
            f"without shared file pages its peak was {private}.",
        ]
    return "\n".join(lines) + "\n"


def _raw_seconds(steps: dict[str, Any]) -> float:
    return float(sum(steps[step]["seconds"] for step in RAW_TO_ENCODED))


def _raw_memory(steps: dict[str, Any]) -> float:
    return float(max(steps[step]["peak_tree_rss_mib"] for step in RAW_TO_ENCODED))


# ----------------------------------------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, nargs="+", help="corpus sizes (default 100000 1000000; --small: 20000)")
    parser.add_argument("--small", action="store_true", help="20,000 pairs, 1,000 pieces, 2 training steps")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="processes (mmt.text.threads)")
    parser.add_argument("--sample", type=int, default=1_000_000, help="mmt.text.sample_sentences")
    parser.add_argument("--vocab", type=int, help="pieces per side (default 8000; --small: 1000)")
    parser.add_argument("--batch", type=int, default=64, help="sentences per training batch")
    parser.add_argument("--train-steps", type=int, help="training steps timed (default 5; --small: 2)")
    parser.add_argument("--shared", type=Path, default=REPO.parent / "shared" / "data", help="the real data folder")
    parser.add_argument("--work", type=Path, help="where the corpus and outputs are written (default: a temp folder)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the JSON file")
    add_section_arguments(parser)
    parser.add_argument("--step", choices=STEPS, help=argparse.SUPPRESS)  # a child process runs one step
    parser.add_argument("--step-pairs", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.pairs = args.pairs or ([20_000] if args.small else [100_000, 1_000_000])
    args.vocab = args.vocab or (1000 if args.small else 8000)
    args.train_steps = args.train_steps or (2 if args.small else 5)
    if not args.step and not args.markdown and not (args.shared / WMT_SAMPLE).is_dir():
        parser.error(f"--shared {args.shared}: no {WMT_SAMPLE} in it (the real English-German sample)")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if publish_section(args, SECTION, markdown):
        return
    if args.step:
        run_step(args)
    else:
        run_all(args)


if __name__ == "__main__":
    main()
