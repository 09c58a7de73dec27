"""How long the `mmtr` command takes to answer one question (not a test; prints numbers).

In a temporary folder the bench builds what `mmtr search` and `mmtr translate` read (tests/cli_setup.py, the
project's own writers) at the demo's sizes (``--images`` sets the gallery's): a FeatureStore of random region
features (K = 8 regions of D = 256, the compact preset's), the prepared images table, a SAN retrieval checkpoint of
the demo's config, and two translation systems of the demo's config with their sentencepiece text pipelines: the
text-only MT (``mt-en-de``) and the regional MMT (``mmt-en-de``, which reads the sentence's image regions from the
store). The weights are random: search costs the same whatever they hold, but an untrained system decodes up to the
length limit (100 subwords) where a trained one stops after about a sentence's length, so the translate figures are
upper bounds.

Then each command runs as a fresh process of the `mmtr` console script, ``--repeats`` times, and the median counts:

- ``mmtr --help``;
- ``mmtr search``, cold: the cache folder (``MMTR_CACHE_DIR`` and ``--cache-dir``) emptied before every run, so the
  weights' and the store's finite scans and the gallery's encoding all run, as for the first query after training;
- ``mmtr search``, warm: the same query with every cache filled, as for every later query;
- ``mmtr translate`` of one sentence, with the text-only MT and with the MMT.

Each command also runs ``--repeats`` times under ``python -X importtime``: the seconds its imports take (the sum of
the top-level imports' cumulative times; the report itself adds a little) and which heavy packages it loaded.
Writes bench/results/cli_latency.json with the machine, the load averages at the start and the end, the command
lines and the git commit.

    python -m bench.cli_latency                 # from the repository root
    python -m bench.cli_latency --images 5000   # a Flickr30K-size gallery
    python -m bench.cli_latency --demo          # the demo's own model and system (after `make demo`)
    python -m bench.cli_latency --threads 1     # one torch thread per command (OMP_NUM_THREADS)
    python -m bench.cli_latency --markdown bench/results/cli_latency.json --into docs/scaling.md   # the table
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from common.files import write_text
from mmtr.doc_sections import add_section_arguments, publish_section
from tests.cli_setup import DEMO, SENTENCE, build

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results" / "cli_latency.json"
SECTION = "cli-latency"  # the docs section this bench writes (mmtr.doc_sections)
DEMO_MODEL = Path("data/models/retrieval/san-mmt_f-all")
DEMO_SYSTEM = Path("data/models/mmt/mt-en-de")
# packages of seconds to import that a command should load only when it uses them
HEAVY = ("torch", "pyarrow", "pandas", "sentencepiece", "sacremoses", "sacrebleu", "transformers", "prefect", "dvc")
QUERY = "a big red circle"


@dataclass(frozen=True)
class Command:
    name: str  # what the docs' table calls it
    argv: list[str]  # after the `mmtr` program
    cache: str  # the folder under the setup that MMTR_CACHE_DIR names for it
    stdin: str = ""
    cold: bool = False  # the cache folder is emptied before each run


def scratch_commands(root: Path, images: int) -> list[Command]:
    """Build the setup in ``root`` (the demo's sizes, ``images`` in the gallery); the commands that time it."""
    setup = build(root, replace(DEMO, images=images))
    search = setup.search_argv(QUERY, root / "cache")
    image_line = f"{setup.image_ids[0]}\t{SENTENCE}\n"
    return [
        Command("mmtr --help", ["--help"], "cache"),
        Command("search, cold cache", search, "cache", cold=True),
        Command("search, warm cache", search, "cache"),
        Command("translate, text-only MT", setup.translate_argv(setup.mt), "translate-cache", SENTENCE + "\n"),
        Command("translate, MMT with regions", setup.translate_argv(setup.mmt), "translate-cache", image_line),
    ]


def demo_commands(root: Path) -> list[Command]:
    """The commands on the demo's outputs (the repository's params give the store and the prepared corpus)."""
    for folder in (DEMO_MODEL, DEMO_SYSTEM):
        if not (REPO / folder).is_dir():
            raise SystemExit(f"{REPO / folder}: not there; run `make demo` first, or leave out --demo")
    search = ["search", QUERY, "--lang", "de", "--model", str(DEMO_MODEL), "--cache-dir", str(root / "cache")]
    translate = ["translate", "--src", "en", "--tgt", "de", "--model", str(DEMO_SYSTEM)]
    return [
        Command("mmtr --help", ["--help"], "cache"),
        Command("search, cold cache", search, "cache", cold=True),
        Command("search, warm cache", search, "cache"),
        Command("translate, text-only MT", translate, "translate-cache", SENTENCE + "\n"),
    ]


def mmtr_program() -> list[str]:
    """The `mmtr` console script beside this Python, else the module."""
    script = Path(sys.executable).parent / "mmtr"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "mmtr.cli"]


def run_once(program: list[str], command: Command, cwd: Path, root: Path, threads: int | None) -> tuple[float, str]:
    """Wall seconds of one run of ``command`` (its cache folder under ``root``; ``threads``: its torch threads, None
    for torch's default), and its standard error."""
    cache = root / command.cache
    if command.cold:
        shutil.rmtree(cache, ignore_errors=True)
    env = {**os.environ, "MMTR_CACHE_DIR": str(cache)}
    env.pop("OMP_NUM_THREADS", None)
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)  # torch sizes its intra-op pool from it
    env.pop("MMTR_DEBUG", None)
    start = time.perf_counter()
    done = subprocess.run(
        [*program, *command.argv], cwd=cwd, env=env, input=command.stdin, capture_output=True, text=True, check=False
    )
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command.argv)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return seconds, done.stderr


def import_report(stderr: str) -> tuple[float, list[str]]:
    """From ``-X importtime``'s report: the seconds of the top-level imports (their cumulative times summed) and the
    :data:`HEAVY` packages among the imported modules."""
    total, loaded = 0, set()
    for match in re.finditer(r"^import time:\s+\d+ \|\s+(\d+) \|( +)(\S+)$", stderr, flags=re.MULTILINE):
        if len(match.group(2)) == 1:  # nested imports are indented further and counted in their parent
            total += int(match.group(1))
        loaded.add(match.group(3).split(".")[0])
    return total / 1e6, [name for name in HEAVY if name in loaded]


def summary(values: Sequence[float]) -> dict[str, Any]:
    return {
        "median": round(statistics.median(values), 3),
        "min": round(min(values), 3),
        "max": round(max(values), 3),
        "runs": [round(value, 3) for value in values],
    }


def time_commands(
    commands: list[Command], repeats: int, cwd: Path, root: Path, threads: int | None
) -> list[dict[str, Any]]:
    """Each command ``repeats`` times as it is and ``repeats`` times under ``-X importtime``, in turn."""
    program = mmtr_program()
    profiled = [sys.executable, "-X", "importtime", "-m", "mmtr.cli"]
    walls: dict[str, list[float]] = {command.name: [] for command in commands}
    imports: dict[str, list[float]] = {command.name: [] for command in commands}
    heavy: dict[str, list[str]] = {}
    for repeat in range(repeats):
        for command in commands:
            seconds, _ = run_once(program, command, cwd, root, threads)
            walls[command.name].append(seconds)
            _, report = run_once(profiled, command, cwd, root, threads)
            imports[command.name].append(import_report(report)[0])
            heavy[command.name] = import_report(report)[1]
            print(f"[{repeat + 1}/{repeats}] {command.name}: {seconds:.2f} s", flush=True)
    return [
        {
            "name": command.name,
            "command": " ".join(["mmtr", *command.argv]),
            "stdin": command.stdin,
            "seconds": summary(walls[command.name]),
            "import_seconds": summary(imports[command.name]),
            "heavy_imports": heavy[command.name],
        }
        for command in commands
    ]


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (Linux), else what the platform module says."""
    with_info = Path("/proc/cpuinfo")
    if with_info.is_file():
        for line in with_info.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def git_commit() -> str:
    """The checkout's short commit, with ``+changes`` when tracked files differ from it."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    dirty = subprocess.run(["git", "diff", "--quiet", "HEAD", "--"], cwd=REPO, capture_output=True)
    return head.stdout.strip() + ("+changes" if dirty.returncode else "") if head.returncode == 0 else "unknown"


def shown(text: str, root: Path) -> str:
    """``text`` with the temporary folder written as ``$SETUP``, so the record reads the same on every run."""
    return text.replace(str(root), "$SETUP")


def markdown(record: dict[str, Any]) -> str:
    """The table docs/scaling.md carries, from the JSON alone."""
    start, end = record["load_average_start"][0], record["load_average_end"][0]
    lines = [
        f"On {record['cpu']} ({record['cores']} cores), commit {record['commit']}, {record['setup']}; load average "
        f"{start:g} at the start and {end:g} at the end. Medians of {record['repeats']} runs, each a fresh process "
        f"with {record['torch_threads']} torch threads:",
        "",
        "| command | wall time | of it, imports | heavy packages loaded |",
        "| --- | ---: | ---: | --- |",
    ]
    for command in record["commands"]:
        lines.append(
            f"| {command['name']} | {command['seconds']['median']:.2f} s | "
            f"{command['import_seconds']['median']:.2f} s | {', '.join(command['heavy_imports']) or 'none'} |"
        )
    if record["random_weights"]:
        lines += [
            "",
            "The systems' weights are random: they decode to the length limit (100 subwords), an upper bound.",
        ]
    lines += ["", f"The command lines are in `{RESULTS.relative_to(REPO)}`."]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.cli_latency", description=__doc__)
    parser.add_argument("--repeats", type=int, default=5, help="runs of each command; the median counts (default 5)")
    parser.add_argument("--images", type=int, default=200, help="gallery images (default 200, the demo's test split)")
    parser.add_argument("--demo", action="store_true", help="time the demo's own model and system instead")
    parser.add_argument("--threads", type=int, help="the commands' torch threads (default: torch's, every core)")
    parser.add_argument("--out", type=Path, default=RESULTS, help=f"the JSON record (default {RESULTS})")
    add_section_arguments(parser)
    args = parser.parse_args()
    if publish_section(args, SECTION, markdown):
        return
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="cli-latency-") as scratch:
        root = Path(scratch)
        if args.demo:
            commands, cwd = demo_commands(root), REPO
            setup = f"the demo's outputs ({DEMO_MODEL}, {DEMO_SYSTEM})"
        else:
            commands, cwd = scratch_commands(root, args.images), root
            setup = (
                f"a gallery of {args.images} images of {DEMO.regions} x {DEMO.dim} region features, "
                "the demo's model sizes, random weights"
            )
        results = time_commands(commands, args.repeats, cwd, root, args.threads)
        for result in results:
            result["command"] = shown(result["command"], root)
    record: dict[str, Any] = {
        "bench": "cli_latency",
        "setup": setup,
        "cpu": cpu_model(),
        "cores": os.cpu_count() or 1,
        "machine": f"{platform.machine()}, {platform.system()}, Python {platform.python_version()}",
        "torch": torch.__version__,
        "torch_threads": args.threads or torch.get_num_threads(),  # torch's default unless --threads
        "commit": git_commit(),
        "repeats": args.repeats,
        "random_weights": not args.demo,
        "commands": results,
        "load_average_start": [round(value, 2) for value in load_start],
        "load_average_end": [round(value, 2) for value in os.getloadavg()],
    }
    write_text(args.out, json.dumps(record, indent=2, ensure_ascii=False) + "\n")
    print(markdown(record))
    print(json.dumps(record, ensure_ascii=False))


if __name__ == "__main__":
    main()
