"""A stopping process gives up the shards its worker threads run, between two batches.

A stop signal (SIGTERM, Ctrl-C) reaches the main thread alone, as an exception (Prefect's or
:class:`mmtr.processes.Stopped`) that unwinds it at once; a shard that a thread pool runs meanwhile would go on to
its end, and the process with it (a pool waits for its running work before the process may exit). The main thread
waits for its shards inside :func:`cancel_on_interrupt`, which sets :data:`requested` when such an exception passes;
a loop given it as its ``stop`` checks it between batches (:func:`check`) and ends by raising :class:`Cancelled`: the
process exits within one batch of work, and the shard, left unfinished, is done again by the next run.

Work in worker processes (a process pool's) hears of the stop through an event the parent shares with them: the
parent names it in :func:`cancel_on_interrupt`'s ``also``, and each worker calls :func:`follow` with it once, which
sets the worker's own :data:`requested` when the parent sets the event.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Protocol

requested = threading.Event()  # set while this process is stopping


class SharedEvent(Protocol):
    """An event a parent process shares with its workers (``multiprocessing``'s)."""

    def set(self) -> None: ...

    def wait(self, timeout: float | None = None) -> bool: ...


class Cancelled(BaseException):
    """Work given up because its process is stopping (a BaseException, like KeyboardInterrupt: no handler of
    ordinary errors swallows it and no retry starts the work again)."""


class GivenUp(Exception):
    """:class:`Cancelled` as a worker process reports it to its parent: an ordinary error, because a process pool
    hands its results to callbacks that catch ``Exception`` alone (concurrent.futures', Prefect's); a BaseException
    there ends the pool's manager thread, and the workers then wait for work the parent's exit waits for them to end."""


@contextlib.contextmanager
def reported_as_error() -> Iterator[None]:
    """Around the work a worker process runs for its parent: :class:`Cancelled` leaves it as :class:`GivenUp`."""
    try:
        yield
    except Cancelled as cancelled:
        raise GivenUp(str(cancelled)) from None


def check(stop: threading.Event | None, what: str) -> None:
    """Raise :class:`Cancelled` naming ``what`` when ``stop`` is set.

    Raises:
        Cancelled: ``stop`` is set.
    """
    if stop is not None and stop.is_set():
        raise Cancelled(f"{what}: given up, the process is stopping")


@contextlib.contextmanager
def cancel_on_interrupt(also: SharedEvent | None = None) -> Iterator[None]:
    """Around the main thread's wait for the work its worker threads or processes run: an interrupt that passes (a
    stop signal's exception, KeyboardInterrupt; not an ordinary error, which ends the run after the running work as
    before) sets :data:`requested` first, and ``also``, the event the worker processes :func:`follow`."""
    requested.clear()  # a stop an earlier run of this process took (a test's) is not this one's
    try:
        yield
    except Exception:
        raise
    except BaseException:
        requested.set()
        if also is not None:
            also.set()
        raise


def follow(parent: SharedEvent) -> None:
    """In a worker process, once at its start: set :data:`requested` when the parent sets ``parent`` (a thread waits
    for it; the process's work checks :data:`requested` between batches)."""
    requested.clear()

    def relay() -> None:
        parent.wait()
        requested.set()

    threading.Thread(target=relay, name="stop-relay", daemon=True).start()
