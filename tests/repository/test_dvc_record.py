"""The committed DVC record is true: every output that git tracks (the metrics, their notes and the learning curves,
declared with ``cache: false``) has the bytes whose hash the committed ``dvc.lock`` records, and every file git tracks
under ``data/metrics`` is such an output. So `dvc status`, `dvc metrics diff` and `dvc exp show` compare against the
run that ``dvc.lock`` describes, and a fresh ``make demo`` rewrites none of them.
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]


def locked_hashes(lock: dict) -> dict[str, str]:
    """Output path -> md5 that a parsed ``dvc.lock`` records (file outputs; directories end in ``.dir``)."""
    return {out["path"]: out["md5"] for stage in lock["stages"].values() for out in stage.get("outs", [])}


def uncached_outputs() -> set[str]:
    """The paths of every output dvc.yaml declares with ``cache: false`` (metrics, notes, plots), resolved."""
    from dvc.repo import Repo

    with Repo(str(REPO)) as repo:
        return {out.def_path for stage in repo.index.stages for out in stage.outs if not out.use_cache}


def git_tracked(folder: str) -> set[str]:
    listed = subprocess.run(["git", "ls-files", folder], cwd=REPO, capture_output=True, text=True, check=True)
    return set(listed.stdout.split())


def mismatches(root: Path, paths: set[str], hashes: dict[str, str]) -> list[str]:
    """``path: why`` for each of ``paths`` whose file under ``root`` is missing, unrecorded or not what is recorded."""
    problems = []
    for path in sorted(paths):
        file = root / path
        if path not in hashes:
            problems.append(f"{path}: not recorded in dvc.lock")
        elif not file.is_file():
            problems.append(f"{path}: recorded in dvc.lock but missing")
        elif hashlib.md5(file.read_bytes()).hexdigest() != hashes[path]:
            problems.append(f"{path}: its bytes are not what dvc.lock records")
    return problems


def test_every_uncached_output_is_committed_with_the_bytes_dvc_lock_records() -> None:
    hashes = locked_hashes(yaml.safe_load((REPO / "dvc.lock").read_text(encoding="utf-8")))
    outputs = uncached_outputs()
    assert outputs, "dvc.yaml declares metrics and plots"
    assert sorted(outputs - git_tracked("data")) == [], "commit these outputs with the dvc.lock that records them"
    assert mismatches(REPO, outputs, hashes) == []


def test_every_file_git_tracks_under_data_metrics_is_a_declared_output() -> None:
    """DVC's own .gitignore files (they keep its cached outputs, e.g. the ranks files, out of git) are the exception."""
    tracked = {path for path in git_tracked("data/metrics") if Path(path).name != ".gitignore"}
    assert sorted(tracked - uncached_outputs()) == []


def test_the_comparison_reports_each_kind_of_drift(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text('{"bleu": 1.0}\n')
    (tmp_path / "b.json").write_text('{"bleu": 2.0}\n')
    (tmp_path / "c.json").write_text("{}\n")
    hashes = {
        "a.json": hashlib.md5(b'{"bleu": 1.0}\n').hexdigest(),
        "b.json": hashlib.md5(b'{"bleu": 3.0}\n').hexdigest(),
        "gone.json": "0" * 32,
    }
    assert mismatches(tmp_path, {"a.json", "b.json", "c.json", "gone.json"}, hashes) == [
        "b.json: its bytes are not what dvc.lock records",
        "c.json: not recorded in dvc.lock",
        "gone.json: recorded in dvc.lock but missing",
    ]
