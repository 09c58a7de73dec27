"""Test-wide fixtures: the optional shared real-data folder and an offline environment."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from common.threads import available_cpus, configure_environment

REPO_ROOT = Path(__file__).resolve().parents[1]

# Before anything imports torch: OpenMP's waiting threads sleep (common.threads), in this process and the stage
# processes the tests start.
configure_environment()
# Before anything imports prefect or transformers: no hub access, and Prefect state in a throwaway home.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="prefect-home-"))
if "PYTEST_XDIST_WORKER" in os.environ:  # a worker inherits the controller's environment: a home of its own
    os.environ["PREFECT_HOME"] = tempfile.mkdtemp(prefix="prefect-home-")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
# Readers' caches (verified feature stores, search galleries) in a throwaway folder, not the user's.
os.environ["MMTR_CACHE_DIR"] = tempfile.mkdtemp(prefix="mmtr-cache-")
# Under pytest-xdist the workers share the cores: each worker's torch (and the stage processes it starts, through
# OMP_NUM_THREADS) takes its share of them instead of all of them, so that no thread pool waits on a busy core.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
_WORKER_THREADS = max(1, available_cpus() // _WORKERS) if _WORKERS > 1 else None
if _WORKER_THREADS is not None:
    os.environ["OMP_NUM_THREADS"] = str(_WORKER_THREADS)


def _shared_data_root() -> Path:
    configured = os.environ.get("MMTR_SHARED_DATA")
    return Path(configured) if configured else REPO_ROOT.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The folder of real data beside the checkout (``../shared/data``); skips when it is absent."""
    root = _shared_data_root()
    if not root.is_dir():
        pytest.skip(f"real data folder {root} is absent (set MMTR_SHARED_DATA to point at a copy)")
    return root


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test under tests/flows `flow`; skip `gpu` tests on machines without CUDA instead of failing."""
    import torch

    if _WORKER_THREADS is not None:
        torch.set_num_threads(_WORKER_THREADS)
    flows = REPO_ROOT / "tests" / "flows"
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if item.path.is_relative_to(flows):
            item.add_marker(pytest.mark.flow)
        if "gpu" in item.keywords and not torch.cuda.is_available():
            item.add_marker(skip)
