"""A shared machine: the demo's training steps alone and beside CPU-burning processes, with OpenMP threads that spin
or sleep while they wait.

What: two workloads at the demo's sizes (params.yaml): the retrieval stage's training step (SAN, the demo's
``retrieval.configs.san`` and batch, the built-in features' 8 regions x 256) and the MMT's fine-tuning step (the demo's
``mmt.model`` with region context and word grounding, 1,000-piece vocabularies, its fine-tuning batch, 8 regions x
256), each on random data of those shapes. How: each workload runs in a fresh process (libgomp reads its settings
when torch loads) with all of the machine's cores as threads, for ``--seconds`` after two warm-up steps, and reports
steps/s. Every workload runs under two wait policies:

- ``spin``: ``GOMP_SPINCOUNT=300000``, libgomp's own default, which every process of the project had before
  :mod:`common.threads`;
- ``short``: the project's default now (a spin of ``GOMP_SPINCOUNT=1000``, then sleep: :mod:`common.threads`);

and in two conditions: alone, and beside ``--burners`` processes that spin on one core each (a shared workstation,
a CI runner, another experiment). The figures: the throughput beside the burners as a share of the lone one (the
goal: at least 1/3), and the lone throughput of ``short`` against ``spin`` (the goal: no more than 3% lower).
A lone run is only as lone as the machine is quiet: the load average before and after each run is recorded.

    python bench/contention.py                                   # bench/results/contention.json
    python bench/contention.py --seconds 5 --workloads retrieval --spin-counts 0 3000   # other spin counts too
    python bench/contention.py --markdown bench/results/contention.json --into docs/scaling.md
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mmtr.commit import git_commit
from mmtr.doc_sections import add_section_arguments, publish_section

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
DEFAULT_OUT = BENCH / "results" / "contention.json"
SECTION = "contention"
WORKLOADS = ("retrieval", "mmt")
POLICIES = {"spin": {"GOMP_SPINCOUNT": "300000"}, "short": {}}  # short: common.threads' own default
CONDITIONS = ("alone", "burners")
WARMUP_STEPS = 2
SHARE_GOAL, LONE_LOSS_GOAL = 1 / 3, 0.03
DEMO_REGIONS, DEMO_REGION_DIM = 8, 256  # features.regions.max_count and the compact encoder's dim in params.yaml


def retrieval_step(params_file: Path) -> Callable[[], None]:
    """The demo's SAN training step (``retrieval.train._ranking_step``) on random captions and regions."""
    import torch
    from benchkit import RandomRegions, random_captions
    from retrieval_train import batch_stream

    from common.runtime import Runtime
    from mmtr.params import load_params
    from retrieval.data import HostBatches
    from retrieval.losses import RankingLoss
    from retrieval.train import FiniteWatch, TrainConfig, _ranking_step
    from retrieval.zoo.registry import build_model, make_config

    params = load_params(str(params_file))
    settings = params.retrieval
    batch_size = settings.train.batch_size
    train = random_captions(1000)
    regions = RandomRegions(1000, regions=DEMO_REGIONS, dim=DEMO_REGION_DIM)
    torch.manual_seed(0)
    model = build_model(
        "san", settings.configs.get("san") or make_config("san", {}), vocab_size=10_000, languages=1, region_dim=256
    )
    model.train()
    config = TrainConfig(batch_size=batch_size)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    loss = RankingLoss("auto").for_model("san", model.default_loss)
    weights = torch.tensor(loss.type_weights(train.type_names))
    batches = batch_stream(train, batch_size)
    runtime = Runtime()
    device, autocast = runtime.torch_device(), runtime.autocast()
    source, watch = HostBatches(train, regions, device), FiniteWatch(1)

    def step() -> None:
        arguments = (model, source, next(batches), optimizer, loss, weights, config, device, autocast, 0.0)
        _ranking_step(*arguments, where="bench", watch=watch)

    return step


def mmt_step(params_file: Path) -> Callable[[], None]:
    """The demo's MMT fine-tuning step (``mmt.train``'s collate, loss and update) on random pairs and regions."""
    import torch
    from benchkit import RandomRegions
    from mmt_train import batch_stream, random_examples

    from mmt.model import MMTConfig, MMTShape, RegionalMMT
    from mmt.train import TrainConfig, _update, adam, collate, mmt_loss, parameter_groups
    from mmtr.params import load_params

    params = load_params(str(params_file))
    vocab = params.mmt.text.vocab_size
    shape = MMTShape(src_vocab=vocab, tgt_vocab=vocab, region_dim=DEMO_REGION_DIM)
    torch.manual_seed(0)
    model = RegionalMMT(MMTConfig(**vars(params.mmt.model)), shape).train()
    config = TrainConfig(**vars(params.mmt.finetune))
    examples = random_examples(2000, shape, lengths=(6, 16), with_regions=True)
    regions = RandomRegions(2000, regions=DEMO_REGIONS, dim=DEMO_REGION_DIM)
    optimizer = adam(parameter_groups(model, config), lr=config.lr, device=torch.device("cpu"))
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    batches = batch_stream(examples, config)
    cpu = torch.device("cpu")

    def step() -> None:
        batch, tgt_in, tgt_out = collate(examples, next(batches), regions=regions, shape=shape, device=cpu)
        _update(model, optimizer, scaler, mmt_loss(model, batch, tgt_in, tgt_out), clip=config.clip, step=1, epoch=1)

    return step


def run_child(workload: str, seconds: float, params_file: Path) -> dict[str, Any]:
    """Steps/s of ``workload`` over ``seconds`` after the warm-up (in this process: the parent set its environment)."""
    import torch

    step = {"retrieval": retrieval_step, "mmt": mmt_step}[workload](params_file)
    for _ in range(WARMUP_STEPS):
        step()
    steps, started = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - started) < seconds or steps < 3:
        step()
        steps += 1
    return {"steps": steps, "seconds": elapsed, "steps_per_s": steps / elapsed, "threads": torch.get_num_threads()}


def _burn() -> None:
    while True:
        pass


@contextmanager
def burners(count: int) -> Iterator[None]:
    """``count`` processes that each keep one core busy until the block ends."""
    context = multiprocessing.get_context("spawn")
    processes = [context.Process(target=_burn, daemon=True) for _ in range(count)]
    for process in processes:
        process.start()
    time.sleep(1.0)  # every burner running before the measured run starts
    try:
        yield
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.join()


def measure(workload: str, policy: str, seconds: float, params_file: Path) -> dict[str, Any]:
    """One child run of ``workload`` under ``policy``, with the load average around it."""
    env = {name: value for name, value in os.environ.items() if name not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    env.pop("OMP_NUM_THREADS", None)  # every core, as a stage on a machine of its own takes them
    env.update(POLICIES[policy], PYTHONPATH=os.pathsep.join([str(REPO), str(BENCH)]))
    command = [sys.executable, str(Path(__file__).resolve()), "--child", workload, "--seconds", str(seconds)]
    command += ["--params", str(params_file)]
    load_before = os.getloadavg()[0]
    result = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"{workload} under {policy}: the child failed:\n{result.stderr[-3000:]}")
    record: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return {**record, "load_before": load_before, "load_after": os.getloadavg()[0]}


def run(args: argparse.Namespace) -> dict[str, Any]:
    for count in args.spin_counts:
        POLICIES[f"spin-{count}"] = {"GOMP_SPINCOUNT": str(count)}
    runs: list[dict[str, Any]] = []
    for workload in args.workloads:
        for condition in CONDITIONS:
            for policy in POLICIES:
                if condition == "burners":
                    with burners(args.burners):
                        record = measure(workload, policy, args.seconds, args.params)
                else:
                    record = measure(workload, policy, args.seconds, args.params)
                runs.append({"workload": workload, "policy": policy, "condition": condition, **record})
                print(
                    f"{workload:9} {policy:5} {condition:7} {record['steps_per_s']:7.2f} steps/s "
                    f"({record['steps']} steps, {record['threads']} threads, load {record['load_before']:.2f})",
                    flush=True,
                )
    return {
        "bench": "contention",
        "commit": git_commit() or "unknown",
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, {platform.system()}",
        "cpu": _cpu_model(),
        "burners": args.burners,
        "seconds": args.seconds,
        "command": " ".join(["python", "bench/contention.py", *sys.argv[1:]]),
        "runs": runs,
        "summary": summarize(runs),
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def summarize(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per workload: each policy's share of its lone throughput beside the burners, and the default's lone cost."""
    rate = {(r["workload"], r["policy"], r["condition"]): r["steps_per_s"] for r in runs}
    rows = []
    for workload in dict.fromkeys(r["workload"] for r in runs):
        row: dict[str, Any] = {"workload": workload}
        for policy in POLICIES:
            row[f"{policy}_alone"] = rate[workload, policy, "alone"]
            row[f"{policy}_burners"] = rate[workload, policy, "burners"]
            row[f"{policy}_share"] = rate[workload, policy, "burners"] / rate[workload, policy, "alone"]
        row["lone_change"] = row["short_alone"] / row["spin_alone"] - 1
        row["share_met"] = row["short_share"] >= SHARE_GOAL
        row["lone_met"] = row["lone_change"] >= -LONE_LOSS_GOAL
        rows.append(row)
    return rows


def markdown(result: dict[str, Any]) -> str:
    names = {"retrieval": "retrieval step (SAN)", "mmt": "MMT fine-tuning step"}
    loads = [r["load_before"] for r in result["runs"]] + [r["load_after"] for r in result["runs"]]
    lines = [
        f"_Written by `{result['command']}` at commit {result['commit'][:7]} on {result['cpu']} "
        f"({result['machine']}); {result['burners']} burners, {result['seconds']:g} s per run; load average "
        f"{min(loads):.2f} to {max(loads):.2f} over the runs._",
        "",
        "| workload | spin alone | spin with burners | share | short alone | short with burners | share | "
        "short alone vs spin alone |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in result["summary"]:
        lines.append(
            f"| {names[row['workload']]} | {row['spin_alone']:.2f} | {row['spin_burners']:.2f} | "
            f"{row['spin_share']:.0%} | {row['short_alone']:.2f} | {row['short_burners']:.2f} | "
            f"{row['short_share']:.0%} {'(goal met)' if row['share_met'] else '(goal missed)'} | "
            f"{row['lone_change']:+.1%} {'(goal met)' if row['lone_met'] else '(goal missed)'} |"
        )
    lines += [
        "",
        f"Steps per second. spin: libgomp's default (`GOMP_SPINCOUNT=300000`, what every process ran before); short: "
        f"the project's default (`GOMP_SPINCOUNT=1000`); share: with the burners over alone (goal: at least "
        f"{SHARE_GOAL:.0%}); the last column: the lone cost of the short spin (goal: no more than {LONE_LOSS_GOAL:.0%} "
        f"lower).",
    ]
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", nargs="+", choices=WORKLOADS, default=list(WORKLOADS))
    parser.add_argument("--seconds", type=float, default=20.0, help="timed seconds of each run (after 2 warm-up steps)")
    parser.add_argument("--burners", type=int, default=2, help="CPU-burning processes beside the second runs")
    parser.add_argument(
        "--spin-counts", type=int, nargs="*", default=[], help="also run under these GOMP_SPINCOUNT values"
    )
    parser.add_argument("--params", type=Path, default=REPO / "params.yaml", help="the demo's sizes come from here")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--child", choices=WORKLOADS, help=argparse.SUPPRESS)
    add_section_arguments(parser)
    return parser.parse_args(argv)


def main() -> None:
    args = parse_args()
    if args.child:
        print(json.dumps(run_child(args.child, args.seconds, args.params)))
        return
    if publish_section(args, SECTION, markdown):
        return
    result = run(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(markdown(result))


if __name__ == "__main__":
    main()
