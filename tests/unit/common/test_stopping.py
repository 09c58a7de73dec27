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


def _worker_waits_for_the_stop(parent: stopping.SharedEvent, heard: stopping.SharedEvent) -> None:
    stopping.follow(parent)
    if stopping.requested.wait(timeout=60):
        heard.set()


def test_a_worker_process_that_follows_the_parents_event_hears_its_stop() -> None:
    import multiprocessing

    context = multiprocessing.get_context("spawn")  # what the process pools of the stages use
    parent, heard = context.Event(), context.Event()
    worker = context.Process(target=_worker_waits_for_the_stop, args=(parent, heard))
    worker.start()
    try:
        assert not heard.wait(timeout=1)  # nothing is stopping yet
        with pytest.raises(KeyboardInterrupt), stopping.cancel_on_interrupt(also=parent):
            raise KeyboardInterrupt
        assert heard.wait(timeout=30)
    finally:
        worker.join(timeout=30)
    assert worker.exitcode == 0
    with pytest.raises(ValueError), stopping.cancel_on_interrupt(also=(other := context.Event())):
        raise ValueError("a direction failed")
    assert not other.is_set()  # an ordinary error lets the workers end their work


def test_work_given_up_in_a_worker_reaches_the_parent_as_an_ordinary_error() -> None:
    expected = r"^fit epoch 3: given up, the process is stopping$"
    with pytest.raises(stopping.GivenUp, match=expected) as given_up, stopping.reported_as_error():
        stopping.check(_set(), "fit epoch 3")
    assert isinstance(given_up.value, Exception)  # what a process pool's result callbacks catch
    with pytest.raises(ValueError), stopping.reported_as_error():
        raise ValueError("a direction failed")  # other errors pass unchanged


def _set() -> threading.Event:
    event = threading.Event()
    event.set()
    return event
