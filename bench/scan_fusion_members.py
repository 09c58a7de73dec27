"""SCAN (Fusion)'s members alone against their fused score, on the test split of a finished run (not a test).

Huang et al. 2020 (Table 2) and Lee et al. 2018 report the fusion of a t2i and an i2t SCAN above either member. Here
`table2` at demo size gives SCAN (Fusion) below the single SCAN. For every replicate of a workspace's
`train_retrieval@scan_fusion-<variant>-<role>` runs, this bench tests the fused score (what the run reports), the
t2i member's score alone and the i2t member's alone, on the run's test captions of each test language, and records
how widely each member's scores spread over the test set's (image, caption) pairs: the fusion averages raw scores
(:class:`~retrieval.zoo.scan_fusion.SCANFusion`, as Lee et al.), so the member whose scores spread wider decides the
fused ranking.

    python -m bench.scan_fusion_members --workspace ../finished-clone     # after `mmtr profile table2 --run` there
    python -m bench.scan_fusion_members --markdown bench/results/scan_fusion_members.json --into docs/papers.md

The workspace is read, not changed: its params.yaml and the models and captions its dvc.lock records.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
from pathlib import Path
from typing import Any

import torch
import yaml
from torch import Tensor

from common.files import write_text
from mmtr.doc_sections import add_section_arguments, publish_section

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results" / "scan_fusion_members.json"
SECTION = "scan-fusion-members"  # the docs section this bench writes (mmtr.doc_sections)
MEMBERS = ("fused", "t2i", "i2t")


class SpreadRecorder:
    """Stands in for a fusion model's ``similarity`` while it is tested: returns the score one member gives (or
    the fused one) and adds up the mean and the spread of each member's scores over every pair it scored."""

    def __init__(self, model: Any, pick: str) -> None:
        self.model, self.pick = model, pick
        self.pairs = 0
        self.sums = {name: {"mean": 0.0, "std": 0.0} for name in ("t2i", "i2t")}

    def __call__(self, images: Any, texts: Any) -> Tensor:
        t2i, i2t = self.model.ranking_similarities(images, texts)
        for name, scores in (("t2i", t2i), ("i2t", i2t)):
            self.sums[name]["mean"] += scores.float().mean().item() * scores.numel()
            self.sums[name]["std"] += scores.float().std().item() * scores.numel()
        self.pairs += t2i.numel()
        return {"fused": (t2i + i2t) / 2, "t2i": t2i, "i2t": i2t}[self.pick]

    def spread(self) -> dict[str, dict[str, float]]:
        return {
            name: {key: round(total / self.pairs, 4) for key, total in sums.items()} for name, sums in self.sums.items()
        }


def measure(workspace: Path) -> dict[str, Any]:
    """Every scan_fusion run of ``workspace``: each replicate's rsum per test language for the fused score and each
    member alone, and the members' score spread; the single SCAN runs' rsum beside them, where the workspace has
    them."""
    from common.files import read_json
    from common.runtime import Runtime
    from features.store import FeatureStore
    from mmtr.params import load_params
    from retrieval.checkpoint import load_retrieval
    from retrieval.experiment import read_captions, test_model

    params = load_params(str(workspace / "params.yaml"))
    runtime = Runtime.resolve("cpu", "fp32")
    stages = yaml.safe_load((workspace / "dvc.lock").read_text(encoding="utf-8"))["stages"]
    models = workspace / "data" / "models" / "retrieval"
    runs: dict[str, Any] = {}
    for folder in sorted(models.glob("scan_fusion-*")):
        _, variant, role_name = folder.name.split("-", 2)
        languages = list(params.retrieval.role(role_name, params.languages.pivot).test)
        inputs = stage_arguments(stages[f"train_retrieval@{folder.name}"]["cmd"])
        store = FeatureStore.open(str(workspace / inputs["--store"]))
        rows = read_captions(
            workspace / inputs["--augmented"] / variant, split="test", languages=languages, kinds=None, human_only=True
        )
        replicates = [folder, *sorted((folder / "replicates").glob("seed-*"))]
        measured = []
        for replicate in replicates:
            entry: dict[str, Any] = {"replicate": replicate.name if replicate != folder else "first", "rsum": {}}
            loaded = load_retrieval(replicate / "model.safetensors", device=runtime.torch_device())
            for pick in MEMBERS:  # each pick stands in for the same model's fused similarity in turn
                recorder = SpreadRecorder(loaded.model, pick)
                loaded.model.similarity = recorder  # type: ignore[method-assign]  # stands in while tested
                metrics = test_model(
                    loaded, rows, store, params.retrieval.evaluation, languages, source="test", runtime=runtime
                )
                entry["rsum"][pick] = {lang: round(metrics[lang]["rsum"], 1) for lang in languages}
                entry["spread"] = recorder.spread()
            measured.append(entry)
            print(folder.name, entry["replicate"], json.dumps(entry["rsum"]), flush=True)
        single = models.parent.parent / "metrics" / "retrieval" / f"scan-{variant}-{role_name}.json"
        runs[folder.name] = {
            "replicates": measured,
            "single_scan": {lang: read_json(single)[lang]["rsum"] for lang in languages} if single.is_file() else None,
        }
    if not runs:
        raise SystemExit(f"{models}: no scan_fusion run (run `mmtr profile table2 --run` in the workspace first)")
    return {
        "date": datetime.date.today().isoformat(),
        "machine": f"{os.cpu_count()} CPU cores ({platform.machine()}, {platform.system()})",
        "runs": runs,
    }


def stage_arguments(cmd: str) -> dict[str, str]:
    """The ``--flag value`` pairs of a stage's command as dvc.lock records it."""
    words = cmd.split()
    return {word: words[index + 1] for index, word in enumerate(words[:-1]) if word.startswith("--")}


def markdown(record: dict[str, Any]) -> str:
    """The docs section: per run and test language, the rsum of the fused score and of each member alone (mean
    over the replicates), the single SCAN's beside them, and the members' score spread."""
    lines = [
        "Written by `python -m bench.scan_fusion_members --markdown bench/results/scan_fusion_members.json"
        " --into docs/papers.md` from its record (the `table2` profile's SCAN (Fusion) runs at demo size,"
        f" {record['date']}).",
        "",
        "| run | test set | replicates | fused (reported) | t2i member alone | i2t member alone | single SCAN"
        " | score spread (sd), t2i / i2t |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, run in record["runs"].items():
        replicates = run["replicates"]
        for lang in replicates[0]["rsum"]["fused"]:
            means = {pick: sum(entry["rsum"][pick][lang] for entry in replicates) / len(replicates) for pick in MEMBERS}
            single = run["single_scan"][lang] if run["single_scan"] else None
            spread = {
                member: sum(entry["spread"][member]["std"] for entry in replicates) / len(replicates)
                for member in ("t2i", "i2t")
            }
            lines.append(
                f"| `{name}` | {lang} | {len(replicates)} | {means['fused']:.1f} | {means['t2i']:.1f}"
                f" | {means['i2t']:.1f} | {'-' if single is None else f'{single:.1f}'}"
                f" | {spread['t2i']:.3f} / {spread['i2t']:.3f} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workspace", type=Path, help="a finished demo clone where `table2` ran")
    parser.add_argument("--out", type=Path, default=RESULTS)
    add_section_arguments(parser)
    args = parser.parse_args(argv)
    if publish_section(args, SECTION, markdown):
        return
    if args.workspace is None:
        parser.error("--workspace is required to measure")
    torch.set_num_threads(max(1, (os.cpu_count() or 1)))
    record = measure(args.workspace.resolve())
    write_text(args.out, json.dumps(record, indent=2) + "\n")
    print(markdown(record))


if __name__ == "__main__":
    main()
