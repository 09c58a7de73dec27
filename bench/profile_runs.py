"""The papers' profiles run for real, one after the other, in a finished demo workspace: time and headline numbers.

For each profile named: the workspace's params.yaml and dvc.yaml are put back to the commit's, `mmtr profile <name>
--run` merges the profile and runs it as a DVC experiment (`dvc exp run -n <name>`; what the profile shares with the
demo and with the profiles before it comes from DVC's cache), timed. Then from the files the run wrote: the report's
findings paragraph (`data/reports/results.md`), each retrieval run's mean and spread over its seeds (rsum per test
language, `data/metrics/retrieval/<run>.json`), and the paired tests of MMT(f) against MT(f) and of each variant
against `-` (`data/metrics/significance.json`). Everything goes into `bench/results/profile_runs.json` under the
profile's name, with the load average at the start and end of each run (a busy machine is slower than the code).

    python -m bench.profile_runs --workspace ../finished-clone table1 passes
    python -m bench.profile_runs --markdown bench/results/profile_runs.json --into docs/papers.md

The workspace is a clone after `make demo` (git, dvc.lock and its DVC cache); its params.yaml and dvc.yaml are
changed, and each profile is left there as a DVC experiment (`dvc exp show`).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import yaml

from common.files import read_json, write_text
from mmtr.doc_sections import add_section_arguments, publish_section

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results" / "profile_runs.json"
SECTION = "profile-runs"  # the docs section this bench writes (mmtr.doc_sections)
FINDINGS = re.compile(r"^\*\*Findings\.\*\* (.*)$", re.MULTILINE)


def run_profile(workspace: Path, name: str) -> dict[str, Any]:
    """Run profile ``name`` as a DVC experiment in ``workspace`` and read back what it wrote."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    subprocess.run(["git", "checkout", "--", "params.yaml", "dvc.yaml"], cwd=workspace, check=True)
    load_start = os.getloadavg()
    started = time.perf_counter()
    done = subprocess.run(["mmtr", "profile", name, "--run"], cwd=workspace, env=env, check=False)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"mmtr profile {name} --run failed with exit status {done.returncode}")
    report = (workspace / "data" / "reports" / "results.md").read_text(encoding="utf-8")
    findings = FINDINGS.search(report)
    return {
        "date": datetime.date.today().isoformat(),
        "machine": f"{os.cpu_count()} CPU cores ({platform.machine()}, {platform.system()})",
        "seconds": round(seconds, 1),
        "load_average": {"start": list(load_start), "end": list(os.getloadavg())},
        "findings": findings.group(1) if findings else "",
        "runs": run_metrics(workspace / "data" / "metrics" / "retrieval", profile_runs(workspace / "dvc.yaml")),
        "tests": key_tests(workspace / "data" / "metrics" / "significance.json"),
    }


def profile_runs(dvc_yaml: Path) -> list[str]:
    """The retrieval runs of the profile just run: the `train_retrieval` stages of the workspace's dvc.yaml (the
    metrics folder also holds the files of runs made before it)."""
    stages = yaml.safe_load(dvc_yaml.read_text(encoding="utf-8"))["stages"]
    return sorted(stages.get("train_retrieval", {}).get("foreach", {}))


def run_metrics(folder: Path, names: list[str]) -> dict[str, dict[str, Any]]:
    """Each named run's rsum per test set: mean, and with several seeds their sample standard deviation and count."""
    runs: dict[str, dict[str, Any]] = {}
    for name in names:
        path = folder / f"{name}.json"
        metrics = read_json(path)
        spreads = metrics.get("std", {})
        entry: dict[str, Any] = {}
        for key, value in metrics.items():
            if isinstance(value, dict) and isinstance(value.get("rsum"), (int, float)):
                spread = spreads.get(key, {}).get("rsum") if isinstance(spreads.get(key), dict) else None
                entry[key] = {"rsum": value["rsum"], "std": spread}
        notes = folder / f"{name}.notes.json"  # the seeds are a note beside the metrics, not a metric
        seeds = read_json(notes).get("seeds") if notes.is_file() else None
        runs[name] = {"sets": entry, "seeds": len(seeds) if isinstance(seeds, list) else 1}
    return runs


def key_tests(path: Path) -> list[dict[str, Any]]:
    """The paired tests of rsum the report made: each as system, baseline, their rsums, the difference and p."""
    if not path.is_file():
        return []
    tests = read_json(path).get("tests", read_json(path))
    rows = []
    for system, baselines in sorted(tests.items()):
        if not isinstance(baselines, dict):
            continue
        for baseline, test in sorted(baselines.items()):
            if isinstance(test, dict) and isinstance(test.get("rsum"), dict):
                rsum = test["rsum"]
                rows.append(
                    {
                        "system": system,
                        "baseline": baseline,
                        "system_rsum": rsum["system"],
                        "baseline_rsum": rsum["baseline"],
                        "delta": rsum["delta"],
                        "p_value": rsum["p_value"],
                    }
                )
    return rows


def markdown(record: dict[str, Any]) -> str:
    lines = [
        "Written by `python -m bench.profile_runs --markdown bench/results/profile_runs.json --into docs/papers.md`"
        " from the runs' record (each profile run after the demo, in a finished demo workspace).",
        "",
        "| profile | retrieval runs | seeds | wall time | machine, load average (start, end) | date |",
        "|---|---|---|---|---|---|",
    ]
    for name, run in record.items():
        seeds = sorted({entry["seeds"] for entry in run["runs"].values()})
        load = run["load_average"]
        lines.append(
            f"| `{name}` | {len(run['runs'])} | {', '.join(map(str, seeds))} | {_minutes(run['seconds'])}"
            f" | {run['machine']}, {load['start'][0]:.1f}, {load['end'][0]:.1f} | {run['date']} |"
        )
    for name, run in record.items():
        if run["runs"] and all(_variant(ref) == "none" for ref in run["runs"]):
            lines += ["", *setup_table(name, run["runs"])]
            continue
        lines += ["", f"**`{name}`.** {run['findings']}"]
        mmt_vs_mt = [
            test
            for test in run["tests"]
            if _variant(test["system"]) == "mmt_f" and _variant(test["baseline"]) == "mt_f"
        ]
        if mmt_vs_mt:
            lines += [
                "",
                "| MMT(f) against MT(f) | test set | MMT(f) rsum | MT(f) rsum | difference | p (paired bootstrap) |",
                "|---|---|---|---|---|---|",
            ]
            for test in mmt_vs_mt:
                model = test["system"].split("-")[0]
                test_set = test["system"].split("/")[-1]
                lines.append(
                    f"| {model} | {test_set} | {test['system_rsum']:.1f} | {test['baseline_rsum']:.1f}"
                    f" | {test['delta']:+.1f} | {_p(test['p_value'])} |"
                )
    return "\n".join(lines) + "\n"


def setup_table(name: str, runs: dict[str, dict[str, Any]]) -> list[str]:
    """A profile whose runs differ in their training setup, not their augmentation (``kadar2018``'s roles): each
    run's rsum per test set, mean ± sd over its seeds (its findings would say of every run that it has no variant to
    compare)."""
    sets = sorted({test_set for run in runs.values() for test_set in run["sets"]})
    seeds = sorted({run["seeds"] for run in runs.values()})
    lines = [
        f"**`{name}`.** Every run trains without augmentation, so the runs compare training setups: rsum per test set,"
        f" mean ± sd over {', '.join(map(str, seeds))} seeds.",
        "",
        "| run | " + " | ".join(sets) + " |",
        "|---" * (len(sets) + 1) + "|",
    ]
    for ref, run in sorted(runs.items()):
        cells = []
        for test_set in sets:
            entry = run["sets"].get(test_set)
            if entry is None:
                cells.append("")
            elif entry["std"] is None:
                cells.append(f"{entry['rsum']:.1f}")
            else:
                cells.append(f"{entry['rsum']:.1f} ± {entry['std']:.1f}")
        lines.append(f"| `{ref}` | " + " | ".join(cells) + " |")
    return lines


def _variant(ref: str) -> str:
    run = ref.split("/")[0]
    return run.split("-")[1] if run.count("-") >= 2 else ""


def _p(value: float) -> str:
    return "< 0.001" if value < 0.001 else f"{value:.3f}"


def _minutes(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s" if minutes else f"{rest} s"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("profiles", nargs="*", help="profile names, run in this order")
    parser.add_argument("--workspace", type=Path, help="a clone after `make demo` (changed in place)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    add_section_arguments(parser)
    args = parser.parse_args(argv)
    if publish_section(args, SECTION, markdown):
        return
    if args.workspace is None or not args.profiles:
        parser.error("give --workspace and at least one profile")
    for name in args.profiles:
        result = run_profile(args.workspace.resolve(), name)
        record = read_json(args.out) if args.out.exists() else {}
        record[name] = result
        write_text(args.out, json.dumps(record, indent=2, ensure_ascii=False) + "\n")
        print(f"{name}: {_minutes(result['seconds'])}; {result['findings']}", flush=True)


if __name__ == "__main__":
    main()
