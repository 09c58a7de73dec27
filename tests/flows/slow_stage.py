"""``python -m tests.flows.slow_stage <stage> <arguments>``: a sharded stage (`features`, `synthesize`) whose every
batch takes :data:`BATCH_SECONDS` longer, as a real extractor's or translator's does on a CPU, each batch announced
with a :data:`BATCH_LINE` on stdout: so that a test's signal lands in the middle of a shard."""

from __future__ import annotations

import functools
import importlib
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

BATCH_SECONDS = 2.0
BATCH_LINE = "slow stage: batch started"


def slowed(function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def slow(*args: Any, **kwargs: Any) -> Any:
        print(BATCH_LINE, flush=True)
        time.sleep(BATCH_SECONDS)
        return function(*args, **kwargs)

    return slow


def main(argv: Sequence[str]) -> None:
    stage, arguments = argv[0], list(argv[1:])
    if stage == "features":
        from features.compact import CompactExtractor

        CompactExtractor.extract = slowed(CompactExtractor.extract)  # type: ignore[method-assign]
    elif stage == "synthesize":
        from mmt import translator

        translator.beam_search = slowed(translator.beam_search)  # type: ignore[assignment]
    else:
        raise SystemExit(f"slow_stage: no slow edition of stage {stage!r}")
    importlib.import_module(f"flows.{stage}").main(arguments)


if __name__ == "__main__":
    main(sys.argv[1:])
