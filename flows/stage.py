"""What every stage entry point shares: argument parsing, run tags and clean error exits."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn, TypeVar

from corpora.io import InputError
from flows.params import Params, ParamsError, RunnerParams, load_params

PIPELINE_RUN_ENV = "MMTR_PIPELINE_RUN_ID"  # set by flows.pipeline so every stage run of one `dvc repro` shares a tag

Result = TypeVar("Result")


def stage_parser(stage: str, description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"python -m flows.{stage}", description=description)
    parser.add_argument("--params", default="params.yaml", help="the params file (default: params.yaml)")
    return parser


def run_tags(stage: str) -> list[str]:
    """Tags of a stage's flow run: the stage, and the pipeline run it belongs to when launched by one."""
    tags = [f"stage:{stage}"]
    if pipeline_run := os.environ.get(PIPELINE_RUN_ENV):
        tags.append(f"pipeline:{pipeline_run}")
    return tags


def task_runner(runner: RunnerParams) -> object:
    """ThreadPool locally; an existing Dask cluster through prefect-dask when an address is configured."""
    if runner.kind == "dask":
        from prefect_dask import DaskTaskRunner

        return DaskTaskRunner(address=runner.address)
    from prefect.task_runners import ThreadPoolTaskRunner

    return ThreadPoolTaskRunner(max_workers=runner.max_workers)


def run_stage(
    parser: argparse.ArgumentParser,
    argv: Sequence[str] | None,
    body: Callable[[argparse.Namespace, Params], Result],
) -> Result:
    """Parse ``argv``, load params and run ``body``; bad params or input, and a training that diverged (its settings
    are the usual cause), end the process with the message alone and exit status 2."""
    args = parser.parse_args(argv)
    _show_library_progress()
    try:
        return body(args, load_params(args.params))
    except (ParamsError, InputError, FloatingPointError) as error:  # bad params or input; training that diverged
        _fail(parser.prog, error)


def _show_library_progress() -> None:
    """The library's INFO records (training progress, reuse of earlier work) on the console and in the Prefect UI.

    Prefect attaches its handlers to the loggers pyproject.toml names (``logging.extra_loggers``) but leaves their
    level at the root's WARNING.
    """
    from prefect.settings import PREFECT_LOGGING_EXTRA_LOGGERS

    for name in PREFECT_LOGGING_EXTRA_LOGGERS.value():
        logging.getLogger(name).setLevel(logging.INFO)


def _fail(prog: str, error: Exception) -> NoReturn:
    print(f"{prog}: error: {error}", file=sys.stderr)
    raise SystemExit(2)
