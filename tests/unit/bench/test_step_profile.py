"""bench/step_profile.py: its timers and read counter, and the docs section written from its committed run."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from bench import step_profile
from mmtr.doc_sections import markers

REPO = Path(__file__).resolve().parents[3]


def test_nested_sections_count_once_and_restore_puts_the_originals_back() -> None:
    class Thing:
        def outer(self) -> int:
            return self.inner() + 1

        def inner(self) -> int:
            return 1

    profile = step_profile.Profile()
    original = Thing.outer
    profile.wrap(Thing, "outer", "a")
    profile.wrap(Thing, "inner", "b")
    profile.wrap(Thing, "missing", "c")  # a name this version lacks is skipped
    profile.counting = True
    assert Thing().outer() == 2
    assert set(profile.seconds) == {"a"}  # inner ran inside outer: its time is outer's
    profile.restore()
    assert Thing.outer is original


def test_reads_are_counted_only_from_the_projects_code() -> None:
    profile = step_profile.Profile()
    profile.count_reads(torch.Tensor, REPO)
    try:
        profile.counting = True
        float(torch.tensor(1.0))  # from a test: not the project's code
        assert profile.reads == 0
    finally:
        profile.restore()
    assert torch.Tensor.item is torch._C.TensorBase.item


def test_the_docs_section_is_the_committed_run() -> None:
    record = json.loads((REPO / "bench" / "results" / "step_profile.json").read_text(encoding="utf-8"))
    start, end = markers(step_profile.SECTION)
    page = (REPO / "docs" / "scaling.md").read_text(encoding="utf-8")
    assert page.split(start)[1].split(end)[0].strip() == step_profile.markdown(record).strip()
