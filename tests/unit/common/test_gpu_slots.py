"""One GPU per stage process: claims by file lock, and `auto` resolved to the claimed GPU (faked device count)."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

from common import gpu_slots
from common.gpu_slots import claim, slots_folder, try_claim
from common.runtime import Runtime


def test_two_claims_get_different_gpus_and_a_released_one_is_taken_again(tmp_path: Path) -> None:
    first, second = try_claim(tmp_path, 3), try_claim(tmp_path, 3)
    assert first is not None and second is not None
    assert (first.index, second.index) == (0, 1)
    first.release()
    again = try_claim(tmp_path, 3)
    assert again is not None and again.index == 0  # the lowest free index, not the next unused one
    assert sorted(path.name for path in tmp_path.iterdir()) == ["0.lock", "1.lock"]


def test_all_held_is_none_and_claim_waits_for_a_release(tmp_path: Path) -> None:
    held = [try_claim(tmp_path, 2), try_claim(tmp_path, 2)]
    assert all(slot is not None for slot in held) and try_claim(tmp_path, 2) is None
    releaser = threading.Timer(0.3, held[1].release)  # type: ignore[union-attr]
    releaser.start()
    slot = claim(tmp_path, 2, poll=0.05)
    releaser.join()
    assert slot.index == 1


def test_a_claim_of_another_process_counts_and_ends_with_it(tmp_path: Path) -> None:
    script = (
        f"from pathlib import Path; from common.gpu_slots import try_claim; s = try_claim(Path({str(tmp_path)!r}), 2)"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", f"{script}; print(s.index, flush=True); input()"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "0"
    mine = try_claim(tmp_path, 2)
    assert mine is not None and mine.index == 1
    holder.kill()  # killed, not released: the operating system drops its lock
    holder.wait()
    after = try_claim(tmp_path, 2)
    assert after is not None and after.index == 0


def test_slots_folder_is_under_the_repository_dvc_runs_for(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("MMTR_GPU_SLOTS", raising=False)
    monkeypatch.delenv("DVC_ROOT", raising=False)
    assert slots_folder("data/work") == Path("data/work/gpu-slots")
    monkeypatch.setenv("DVC_ROOT", "/repo")  # a queued experiment runs in a temporary copy of /repo
    assert slots_folder("data/work") == Path("/repo/data/work/gpu-slots")
    monkeypatch.setenv("MMTR_GPU_SLOTS", str(tmp_path))
    assert slots_folder("data/work") == tmp_path


def test_auto_on_several_gpus_takes_a_free_one_per_process(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(gpu_slots, "_HELD", {})
    other = try_claim(tmp_path, 2)  # another stage process holds cuda:0
    assert other is not None and other.index == 0
    assert Runtime.resolve("auto", "fp32", tmp_path) == Runtime("cuda:1", "fp32")
    assert Runtime.resolve("auto", "fp32", tmp_path) == Runtime("cuda:1", "fp32")  # held, not claimed again
    assert Runtime.resolve("auto", "fp32") == Runtime("auto", "fp32")  # no slots folder: as before
    assert Runtime.resolve("cuda:0", "fp32", tmp_path) == Runtime("cuda:0", "fp32")  # an explicit device is kept


def test_auto_on_one_gpu_or_none_claims_nothing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(gpu_slots, "_HELD", {})
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert Runtime.resolve("auto", "fp32", tmp_path / "slots") == Runtime("auto", "fp32")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert Runtime.resolve("auto", "fp32", tmp_path / "slots") == Runtime("auto", "fp32")
    assert not (tmp_path / "slots").exists()  # no lock files on a machine without several GPUs
