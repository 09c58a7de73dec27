"""What every stage entry point shares: argument parsing, run tags and clean error exits."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from common import distributed
from common.errors import InputError
from common.runtime import resolve_device
from common.threads import use_available_cpus
from mmtr import processes
from mmtr.commit import commit_date, git_commit
from mmtr.errors import ParamsError, add_debug_flag, user_errors
from mmtr.params import DistributedParams, Params, RunnerParams, load_params
from mmtr.run_card import run_card_hook

PIPELINE_RUN_ENV = "MMTR_PIPELINE_RUN_ID"  # set by flows.pipeline so every stage run of one `dvc repro` shares a tag

Result = TypeVar("Result")


def stage_parser(stage: str, description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"python -m flows.{stage}", description=description)
    parser.add_argument("--params", default="params.yaml", help="the params file (default: params.yaml)")
    add_debug_flag(parser)
    return parser


def check_prefect_api() -> None:
    """With ``PREFECT_API_URL`` set, a server must answer before any work starts (else Prefect fails half-way with
    chained tracebacks, after DVC has already removed the stage's outputs).

    Raises:
        InputError: no server answers at that address within 5 seconds.
    """
    url = os.environ.get("PREFECT_API_URL")
    if not url:
        return
    import httpx

    try:
        httpx.get(f"{url.rstrip('/')}/health", timeout=5.0).raise_for_status()
    except httpx.HTTPError as error:
        raise InputError(
            f"PREFECT_API_URL={url}: no Prefect server answers ({type(error).__name__}); start one "
            f"(prefect server start) or unset PREFECT_API_URL to run without one"
        ) from None


def run_tags(stage: str) -> list[str]:
    """Tags of a stage's flow run: the stage; the DVC stage that ran it (``DVC_STAGE``, e.g.
    ``train_retrieval@san-mmt_f-all``), the DVC experiment (``DVC_EXP_NAME``, set by ``dvc exp run``), the git
    commit of the code (``+dirty`` with uncommitted changes), and the pipeline run it belongs to when launched by
    one: so an experiment's runs are told apart from the baseline's in the Prefect UI. The pipeline's own writes
    (dvc.lock, metrics, a regenerated dvc.yaml) do not make the commit dirty (:mod:`mmtr.commit`)."""
    tags = [f"stage:{stage}"]
    if dvc_stage := os.environ.get("DVC_STAGE"):
        tags.append(f"dvc:{dvc_stage}")
    if experiment := os.environ.get("DVC_EXP_NAME"):
        tags.append(f"exp:{experiment}")
    if commit := git_commit():
        tags.append(f"commit:{commit}")
    if pipeline_run := os.environ.get(PIPELINE_RUN_ENV):
        tags.append(f"pipeline:{pipeline_run}")
    return tags


def run_name(stage: str) -> str:
    """A stage's flow-run name in the Prefect UI: the DVC stage (``train_retrieval@san-mmt_f-all``) when DVC runs
    it, else the stage's own name (instead of Prefect's random ``hissing-quail``)."""
    return os.environ.get("DVC_STAGE") or stage


FlowT = TypeVar("FlowT")


def named(flow: FlowT, params_file: str | None = None) -> FlowT:
    """``flow`` with its runs named by :func:`run_name`; given the stage's params file, each run also gets its run
    card (:func:`mmtr.run_card.run_card_markdown`) as an artifact when it starts."""
    stage = run_name(flow.name)  # type: ignore[attr-defined]
    hooks = [run_card_hook(stage, params_file, git_commit(), commit_date())] if params_file else []
    return flow.with_options(flow_run_name=stage, on_running=hooks)  # type: ignore[attr-defined, no-any-return]


def task_runner(runner: RunnerParams) -> object:
    """ThreadPool locally; an existing Dask cluster through prefect-dask when an address is configured.

    Raises:
        InputError: runner.kind dask without the ``dask`` extra installed.
    """
    if runner.kind == "dask":
        try:
            from prefect_dask import DaskTaskRunner
        except ImportError as error:  # an optional part: the `dask` extra
            raise InputError(
                f"runner.kind: dask needs prefect-dask and dask.distributed ({error}): pip install 'mmtr[dask]'"
            ) from None
        return DaskTaskRunner(address=runner.address)
    from prefect.task_runners import ThreadPoolTaskRunner

    return ThreadPoolTaskRunner(max_workers=runner.max_workers)


def run_stage(
    parser: argparse.ArgumentParser,
    argv: Sequence[str] | None,
    body: Callable[[argparse.Namespace, Params], Result],
    *,
    data_parallel: str | None = None,
) -> Result | None:
    """Parse ``argv``, load params and run ``body``; bad params or input, and a training that diverged (its settings
    are the usual cause), end the process with the message alone and exit status 2.

    ``data_parallel``: the stage's module (``flows.train_retrieval``) when it trains data-parallel. With more than
    one process in params.yaml's `distributed`, the stage starts itself under torchrun and exits with its status;
    under torchrun, rank 0 runs ``body`` (Prefect, every write) and the other ranks follow its training calls
    (:func:`common.distributed.serve_rank_zero`), returning None.

    SIGTERM or SIGINT ends the process in order with exit status 128 + the signal's number: a running flow run is
    marked crashed, torchrun and its workers are stopped (:mod:`mmtr.processes`), exit handlers run (a temporary
    Prefect server stops).
    """
    try:
        with processes.stop_signals():
            return _run_stage(parser, argv, body, data_parallel)
    except processes.Stopped as stopped:
        print(f"{parser.prog}: {stopped}", file=sys.stderr)
        raise SystemExit(stopped.exit_status) from None


def _run_stage(
    parser: argparse.ArgumentParser,
    argv: Sequence[str] | None,
    body: Callable[[argparse.Namespace, Params], Result],
    data_parallel: str | None,
) -> Result | None:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    use_available_cpus()  # a container's CPU quota, not the host's core count
    with user_errors(parser.prog, debug=args.debug):
        params = load_params(args.params)
        if os.environ.get("DVC_STAGE"):
            check_dag_current(params, args.params)
        if data_parallel is not None and params.distributed.processes > 1:
            if not distributed.under_torchrun():
                raise SystemExit(processes.run(torchrun_command(params.distributed, data_parallel, argv)))
            distributed.start(str(resolve_device(params.device)))
            try:
                if not distributed.is_rank_zero():
                    distributed.serve_rank_zero()
                    return None
                show_library_progress()
                check_prefect_api()
                try:
                    return body(args, params)
                finally:
                    distributed.release_other_ranks()
            finally:
                distributed.stop()
        show_library_progress()
        check_prefect_api()
        return body(args, params)
    raise AssertionError("unreachable: user_errors exits or re-raises")


def check_dag_current(params: Params, params_file: str) -> None:
    """Under `dvc repro`: dvc.yaml (in the working directory DVC runs the stage in) must be the one ``params_file``
    gives, or a settings edit that adds or narrows stages would run against the old DAG.

    Raises:
        ParamsError: dvc.yaml differs from what `mmtr dag` would write.
    """
    from mmtr.dvc_yaml import stale_dvc_yaml

    if stale_dvc_yaml(params, Path("dvc.yaml"), params_file):
        raise ParamsError(
            f"dvc.yaml was not generated from {params_file} as it is now (a setting that shapes the DAG changed, or "
            f"dvc.yaml was edited by hand): run `mmtr dag --params {params_file}`, then `dvc repro` again"
        )


def torchrun_command(settings: DistributedParams, module: str, argv: Sequence[str]) -> list[str]:
    """The torchrun command line that runs ``python -m <module> <argv>`` as ``settings`` asks: one machine with a
    private rendezvous (``--standalone``), or one of ``nnodes`` meeting at ``rdzv_endpoint`` (the same command on
    each; the rendezvous id is the DVC stage, so the machines of one stage find each other)."""
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc-per-node={settings.nproc_per_node}",
        f"--nnodes={settings.nnodes}",
    ]
    if settings.nnodes == 1:
        command.append("--standalone")
    else:
        rendezvous = os.environ.get("DVC_STAGE") or module
        command += ["--rdzv-backend=c10d", f"--rdzv-endpoint={settings.rdzv_endpoint}", f"--rdzv-id={rendezvous}"]
    return [*command, "-m", module, *argv]


def show_library_progress() -> None:
    """The library's INFO records (training progress, reuse of earlier work) on the console and in the Prefect UI.

    Prefect attaches its handlers to the loggers pyproject.toml names (``logging.extra_loggers``) but leaves their
    level at the root's WARNING. Each process sets it: a stage's main process, and the workers of a process pool
    (whose records would otherwise stop at WARNING, leaving their training silent).
    """
    from prefect.settings import PREFECT_LOGGING_EXTRA_LOGGERS

    for name in PREFECT_LOGGING_EXTRA_LOGGERS.value():
        logging.getLogger(name).setLevel(logging.INFO)
