"""The CPU threading policy: OpenMP's waiting threads sleep in every entry point, a user's own choice is kept, and a
cgroup CPU quota lowers the thread count."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from common.threads import (
    USER_SETTINGS,
    available_cpus,
    cgroup_cpu_limit,
    configure_environment,
    use_available_cpus,
)

REPO_ROOT = Path(__file__).resolve().parents[3]


def test_waiting_threads_sleep_after_a_short_spin_by_default() -> None:
    environ: dict[str, str] = {}
    configure_environment(environ)
    assert environ == {"GOMP_SPINCOUNT": "1000"}


@pytest.mark.parametrize("setting", [{"OMP_WAIT_POLICY": "ACTIVE"}, {"GOMP_SPINCOUNT": "300000"}])
def test_a_users_wait_setting_is_kept(setting: dict[str, str]) -> None:
    environ = dict(setting)
    configure_environment(environ)
    assert environ == setting


@pytest.mark.parametrize(
    ("text", "cpus"),
    [("max 100000\n", None), ("150000 100000\n", 1.5), ("50000 100000", 0.5), ("garbage", None), ("1 0", None)],
)
def test_cgroup_quota_is_read_as_cpus(tmp_path: Path, text: str, cpus: float | None) -> None:
    cpu_max = tmp_path / "cpu.max"
    cpu_max.write_text(text)
    assert cgroup_cpu_limit(cpu_max) == cpus


def test_available_cpus_is_the_affinity_lowered_to_the_quota(tmp_path: Path) -> None:
    affinity = len(os.sched_getaffinity(0))
    assert available_cpus(tmp_path / "absent") == affinity
    cpu_max = tmp_path / "cpu.max"
    cpu_max.write_text("50000 100000")  # half a CPU: still one thread
    assert available_cpus(cpu_max) == 1
    cpu_max.write_text(f"{100000 * affinity + 1} 100000")  # a quota above the mask: the mask
    assert available_cpus(cpu_max) == affinity


def test_use_available_cpus_lowers_but_never_raises() -> None:
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(available_cpus() + 3)
        assert use_available_cpus({}) == available_cpus()
        torch.set_num_threads(1)
        assert use_available_cpus({}) == 1
        torch.set_num_threads(available_cpus() + 3)
        assert use_available_cpus({"OMP_NUM_THREADS": "8"}) == available_cpus() + 3  # the user's count stands
    finally:
        torch.set_num_threads(before)


def _gomp_spin_count(code: str, **extra: str) -> str:
    """libgomp's spin count in a fresh interpreter that runs ``code`` (OMP_DISPLAY_ENV prints it as torch loads)."""
    env = {name: value for name, value in os.environ.items() if name not in USER_SETTINGS}
    env.update(OMP_DISPLAY_ENV="VERBOSE", PYTHONPATH=str(REPO_ROOT), **extra)
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=True
    )
    lines = [line.strip() for line in result.stderr.splitlines() if line.strip().startswith("GOMP_SPINCOUNT")]
    assert lines, f"libgomp printed no environment; stderr:\n{result.stderr[-2000:]}"
    return lines[0]


def test_torch_alone_spins() -> None:
    assert _gomp_spin_count("import torch") == "GOMP_SPINCOUNT = '300000'"  # libgomp's own default


@pytest.mark.parametrize("entry", ["import flows.train_retrieval", "import mmtr.cli, torch"])
def test_entry_points_load_torch_with_a_short_spin(entry: str) -> None:
    assert _gomp_spin_count(entry) == "GOMP_SPINCOUNT = '1000'"


def test_entry_points_keep_a_users_spin_count() -> None:
    assert _gomp_spin_count("import flows.train_retrieval", GOMP_SPINCOUNT="20") == "GOMP_SPINCOUNT = '20'"
    assert _gomp_spin_count("import flows.train_retrieval", OMP_WAIT_POLICY="PASSIVE") == "GOMP_SPINCOUNT = '0'"
