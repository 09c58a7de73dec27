"""Test-wide fixtures: the optional shared real-data folder and an offline environment."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]

# Before anything imports prefect or transformers: no hub access, and Prefect state in a throwaway home.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="prefect-home-"))
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
# Readers' caches (verified feature stores, search galleries) in a throwaway folder, not the user's.
os.environ["MMTR_CACHE_DIR"] = tempfile.mkdtemp(prefix="mmtr-cache-")


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

    flows = REPO_ROOT / "tests" / "flows"
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if item.path.is_relative_to(flows):
            item.add_marker(pytest.mark.flow)
        if "gpu" in item.keywords and not torch.cuda.is_available():
            item.add_marker(skip)
