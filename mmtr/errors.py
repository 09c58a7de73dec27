"""The errors a user can mend, and how an entry point ends on one: a single line, ``<prog>: error: <message>``,
and exit status 2; with ``--debug`` (or ``MMTR_DEBUG=1``) the traceback as well.

The standard library only: the ``mmtr`` command builds its parser from here without loading torch or Prefect.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator
from typing import NoReturn

from common.errors import InputError, resource_fault

DEBUG_ENV = "MMTR_DEBUG"  # 1: user errors show their traceback too


class ParamsError(ValueError):
    """``params.yaml`` is invalid; the message starts with the file and the key path."""


# What a user can cause: bad params or input files, and a training run that diverged (its settings are the cause).
# Anything else is a bug and keeps its traceback.
USER_ERRORS = (ParamsError, InputError, FloatingPointError)


def add_debug_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--debug", action="store_true", help=f"show the traceback of an error too (or set {DEBUG_ENV}=1)"
    )


@contextlib.contextmanager
def user_errors(prog: str, *, debug: bool) -> Iterator[None]:
    """A user error inside ends the process with one line, ``<prog>: error: <message>``, and exit status 2 (with
    ``debug`` or ``MMTR_DEBUG=1`` it propagates, traceback and all); so does a resource fault (a full disk, a
    read-only or non-writable folder, a missing permission), named by its path and errno
    (:func:`common.errors.resource_fault`). Any other exception propagates as it is."""
    try:
        yield
    except USER_ERRORS as error:
        if debug or os.environ.get(DEBUG_ENV) == "1":
            raise
        _fail(prog, error)
    except Exception as error:
        fault = resource_fault(error)  # a full disk, a read-only folder, a missing permission: no bug of ours
        if fault is None or debug or os.environ.get(DEBUG_ENV) == "1":
            raise
        _fail(prog, fault)


def _fail(prog: str, error: Exception) -> NoReturn:
    print(f"{prog}: error: {error}", file=sys.stderr)
    raise SystemExit(2)
