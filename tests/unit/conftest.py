"""Unit tests run tiny models: one intra-op thread is fastest for them, and a busy shared core cannot stall
a thread pool (tiny convolutions and LSTM steps at 2 threads were seen running 10-100x slower). Module-scoped,
so module fixtures that train models run at the same thread count as the tests that retrain them (results
are deterministic for a given thread count, not across counts)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(autouse=True, scope="module")
def one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
