"""train_mmt trains its two directions in a process pool: the workers must log the library's epoch lines, and leave
stop signals to the stage."""

from __future__ import annotations

import logging
import multiprocessing
import signal
from concurrent.futures import ProcessPoolExecutor

import torch

from flows.train_mmt import _start_worker


def _worker_state() -> tuple[int, int, bool]:
    ignores_stops = all(signal.getsignal(signum) == signal.SIG_IGN for signum in (signal.SIGTERM, signal.SIGINT))
    return logging.getLogger("mmt.train").getEffectiveLevel(), torch.get_num_threads(), ignores_stops


def test_direction_workers_log_epoch_lines_at_info() -> None:
    context = multiprocessing.get_context("spawn")  # a fresh interpreter, as Prefect's process pool starts
    with ProcessPoolExecutor(1, mp_context=context) as bare:
        level, _, _ = bare.submit(_worker_state).result()
    assert level == logging.WARNING  # what a worker gets without the initializer: INFO epoch lines dropped
    stop = context.Event()
    with ProcessPoolExecutor(1, mp_context=context, initializer=_start_worker, initargs=(1, stop)) as pool:
        level, threads, ignores_stops = pool.submit(_worker_state).result()
    assert (level, threads, ignores_stops) == (logging.INFO, 1, True)
