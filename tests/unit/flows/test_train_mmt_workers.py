"""train_mmt trains its two directions in a process pool: the workers must log the library's epoch lines."""

from __future__ import annotations

import logging
import multiprocessing
from concurrent.futures import ProcessPoolExecutor

import torch

from flows.train_mmt import _start_worker


def _worker_state() -> tuple[int, int]:
    return logging.getLogger("mmt.train").getEffectiveLevel(), torch.get_num_threads()


def test_direction_workers_log_epoch_lines_at_info() -> None:
    context = multiprocessing.get_context("spawn")  # a fresh interpreter, as Prefect's process pool starts
    with ProcessPoolExecutor(1, mp_context=context) as bare:
        level, _ = bare.submit(_worker_state).result()
    assert level == logging.WARNING  # what a worker gets without the initializer: INFO epoch lines dropped
    with ProcessPoolExecutor(1, mp_context=context, initializer=_start_worker, initargs=(1,)) as pool:
        level, threads = pool.submit(_worker_state).result()
    assert (level, threads) == (logging.INFO, 1)
