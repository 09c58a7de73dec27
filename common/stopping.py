"""A stopping process gives up the shards its worker threads run, between two batches.

A stop signal (SIGTERM, Ctrl-C) reaches the main thread alone, as an exception (Prefect's or
:class:`mmtr.processes.Stopped`) that unwinds it at once; a shard that a thread pool runs meanwhile would go on to
its end, and the process with it (a pool waits for its running work before the process may exit). The main thread
waits for its shards inside :func:`cancel_on_interrupt`, which sets :data:`requested` when such an exception passes;
a loop given it as its ``stop`` checks it between batches (:func:`check`) and ends by raising :class:`Cancelled`: the
process exits within one batch of work, and the shard, left unfinished, is done again by the next run.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

requested = threading.Event()  # set while this process is stopping


class Cancelled(BaseException):
    """Work given up because its process is stopping (a BaseException, like KeyboardInterrupt: no handler of
    ordinary errors swallows it and no retry starts the work again)."""


def check(stop: threading.Event | None, what: str) -> None:
    """Raise :class:`Cancelled` naming ``what`` when ``stop`` is set.

    Raises:
        Cancelled: ``stop`` is set.
    """
    if stop is not None and stop.is_set():
        raise Cancelled(f"{what}: given up, the process is stopping")


@contextlib.contextmanager
def cancel_on_interrupt() -> Iterator[None]:
    """Around the main thread's wait for the shards its worker threads run: an interrupt that passes (a stop
    signal's exception, KeyboardInterrupt; not an ordinary error, which ends the run after the running shards as
    before) sets :data:`requested` first."""
    requested.clear()  # a stop an earlier run of this process took (a test's) is not this one's
    try:
        yield
    except Exception:
        raise
    except BaseException:
        requested.set()
        raise
