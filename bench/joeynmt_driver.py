"""JoeyNMT's training run (``python -m joeynmt train CONFIG --skip-test``) with timing lines for bench/peer_joeynmt.py.

Runs under the peer's own Python (a virtual environment holding joeynmt; see bench/peer_joeynmt.py), never
under the project's: it imports nothing from the project. It wraps three methods of JoeyNMT's TrainManager,
without changing what they do, to print one JSON line each on stdout, prefixed with ``PEER``:

- ``start``: when the training loop begins (data and model are built), the clock of the equal wall-time budget;
- ``train``: at each of JoeyNMT's logging points, the seconds and target tokens of the steps since the previous
  one, its own training-only figures (validation time excluded, as in its "Tokens per Sec" log line);
- ``validated``: after each validation, its step and the seconds it took; its greedy output is in
  ``<model_dir>/<step>.hyps``.

    <peer venv>/bin/python bench/joeynmt_driver.py CONFIG THREADS
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import torch
from joeynmt import training
from joeynmt.__main__ import main as joeynmt_main


def emit(kind: str, **fields: Any) -> None:
    print("PEER " + json.dumps({"kind": kind, "time": time.time(), **fields}), flush=True)


def instrument() -> None:
    manager = training.TrainManager
    train_and_validate, log_scores, validate = manager.train_and_validate, manager._log_scores, manager._validate

    def timed_train_and_validate(self: Any, *args: Any, **kwargs: Any) -> Any:
        emit("start")
        return train_and_validate(self, *args, **kwargs)

    def timed_log_scores(self: Any, epoch_no: int, elapsed_time: float, start_tokens: int, *args: Any) -> Any:
        emit("train", step=self.stats.steps, seconds=elapsed_time, tokens=self.stats.total_tokens - start_tokens)
        return log_scores(self, epoch_no, elapsed_time, start_tokens, *args)

    def timed_validate(self: Any, *args: Any, **kwargs: Any) -> Any:
        started = time.time()
        result = validate(self, *args, **kwargs)
        emit("validated", step=self.stats.steps, seconds=time.time() - started)
        return result

    manager.train_and_validate = timed_train_and_validate
    manager._log_scores = timed_log_scores
    manager._validate = timed_validate


if __name__ == "__main__":
    config, threads = sys.argv[1], int(sys.argv[2])
    torch.set_num_threads(threads)
    instrument()
    sys.argv = ["joeynmt", "train", config, "--skip-test"]
    joeynmt_main()
