"""A stop that passes the main thread's wait for its shards reaches the worker threads' loops; an ordinary error
does not."""

from __future__ import annotations

import threading

import pytest

from common import stopping


def test_an_interrupt_in_the_wait_asks_the_workers_to_give_up_and_the_next_wait_starts_afresh() -> None:
    with pytest.raises(KeyboardInterrupt), stopping.cancel_on_interrupt():
        raise KeyboardInterrupt
    assert stopping.requested.is_set()
    with stopping.cancel_on_interrupt():
        assert not stopping.requested.is_set()  # an earlier run's stop is not this one's
    with pytest.raises(ValueError), stopping.cancel_on_interrupt():
        raise ValueError("a shard failed")
    assert not stopping.requested.is_set()  # the running shards end as before; the run fails after them


def test_check_raises_cancelled_naming_the_work_once_the_event_is_set() -> None:
    stop = threading.Event()
    stopping.check(None, "translating")
    stopping.check(stop, "translating")
    stop.set()
    with pytest.raises(stopping.Cancelled) as cancelled:
        stopping.check(stop, "extracting shard-00003")
    assert str(cancelled.value) == "extracting shard-00003: given up, the process is stopping"
    assert not isinstance(cancelled.value, Exception)  # no `except Exception` (a task's retry) takes it
