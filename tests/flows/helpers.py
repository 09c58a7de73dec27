"""A tiny edition of the repository's params.yaml for fast end-to-end runs."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from tests.command_line import flags

REPO = Path(__file__).resolve().parents[2]
# what a scratch DVC project needs of the repository to run the stages (the code they run, the inputs they read)
PROJECT_CODE: tuple[str, ...] = (
    *("common", "corpora", "features", "mmt", "retrieval", "report", "mmtr", "tasks", "flows", ".dvcignore"),
    *("pyproject.toml", "data/raw/feature-inputs", "data/raw/mt-models", "data/raw/word-vectors"),
)

TINY_SPLITS = {"train": 6, "val": 3, "test": 3}
TINY_PAIRS = {"train": 40, "val": 10, "test": 10}


def tiny_params_tree(
    features: dict[str, Any] | None = None, raw: Path | None = None, **corpus_changes: Any
) -> dict[str, Any]:
    """The repository's params with a tiny dataset, a fast compact encoder and small shards.

    Args:
        features: Changes to the `features` section.
        raw: Where the built-in dataset was generated (default: the repository's relative paths).
        corpus_changes: Changes to the `synthetic` corpus entry (format, dataset, ...).
    """
    tree = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
    tree["generate"].update(image_size=96, splits=TINY_SPLITS, parallel_pairs=TINY_PAIRS)
    corpus = tree["corpora"]["synthetic"]
    if raw is not None:
        corpus.update(source=str(raw), images=str(raw / "images"), boxes=str(raw / "objects.parquet"))
        tree["paths"]["parallel"] = str(raw / "parallel")
    corpus.update(corpus_changes)
    tree["features"].update(shard_size=4, batch_size=4)
    tree["features"]["compact"]["encoder"].update(widths=[8, 16], dim=16, input_size=32)
    tree["features"]["compact"]["training"].update(epochs=2)
    tree["features"].update(features or {})
    tree["mmt"].update(beam=2, meteor=False)  # METEOR's Java run (~7 s for English): on in the `trained` fixture
    tree["distributed"].update(parallel_directions=False)  # two spawned processes cost seconds: one test runs them
    tree["mmt"]["text"].update(vocab_size=60)
    tree["mmt"]["model"].update(emb_dim=16, hidden=16)
    tree["mmt"]["pretrain"].update(epochs=1, batch_size=16)
    tree["mmt"]["finetune"].update(epochs=2, batch_size=4)
    tree["synthesis"].update(shard_size=10, beam=2)
    retrieval = tree["retrieval"]
    tiny = {"word_dim": 8, "hidden": 8}
    retrieval["configs"] = {name: dict(tiny) for name in ("san", "dan", "scan", "vsepp", "multihead", "scan_fusion")}
    retrieval["configs"]["mule"] = {**tiny, "mule_dim": 8, "embed_dim": 8, "image_hidden": 8, "pretrain_epochs": 1}
    retrieval["configs"]["multihead"].update(attention_dim=8, context_dim=8)
    retrieval["configs"]["parallel_embn"] = {**tiny, "embed_dim": 8, "image_hidden": 8}
    retrieval.update(models=["san", "vsepp"], variants=["none", "mmt_f"])
    retrieval["vocab"].update(min_count=1)
    retrieval["train"].update(epochs=2, batch_size=16, lr_decay_epoch=1)
    return tree


def write_params(path: Path, tree: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(tree, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return path


def copy_project_code(root: Path) -> None:
    """:data:`PROJECT_CODE` copied from the repository into ``root`` (caches left out)."""
    for name in PROJECT_CODE:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, root / name, ignore=shutil.ignore_patterns("__pycache__"), dirs_exist_ok=True)
        else:
            shutil.copy2(source, root / name)


def run(command: list[str], cwd: Path, env: Mapping[str, str]) -> str:
    """Run ``command`` in ``cwd``; its output, stdout then stderr (a failure fails the test with both)."""
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def commit(root: Path, env: Mapping[str, str], message: str) -> None:
    """Commit everything in the scratch repository ``root``."""
    run(["git", "add", "-A"], root, env)
    run(["git", "-c", "user.name=Test", "-c", "user.email=test@example.org", "commit", "-q", "-m", message], root, env)


def train_retrieval_argv(trained: Path, params: Path, variant: str, out: Path) -> list[str]:
    """The arguments of `train_retrieval` for SAN on the trained fixture, role all; metrics beside ``out``."""
    return flags(
        params=params,
        model="san",
        variant=variant,
        role="all",
        augmented=trained / "augmented",
        store=trained / "features" / "compact",
        word_vectors=REPO / "data/raw/word-vectors",
        queries=trained / "queries",
        out=out,
        metrics=out.with_name(f"{out.name}.json"),
    )
