"""One Prefect test server for the whole session; flows and DVC stage processes all talk to it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from prefect.settings import PREFECT_API_URL, PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings
from prefect.testing.utilities import prefect_test_harness


@pytest.fixture(scope="session")
def prefect_api_url() -> Iterator[str]:
    """Start the harness once (~15 s); the heartbeat thread is off so each flow costs ~0.2 s, not ~1 s."""
    with prefect_test_harness(server_startup_timeout=90), temporary_settings({PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
        yield str(PREFECT_API_URL.value())
