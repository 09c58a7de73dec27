"""Prefect tasks: thin wrappers that call the library packages and report (logs, artifacts); and what they and the
flows share for reporting: artifact keys and progress artifacts.

An artifact key names a series in the Prefect UI (Artifacts page: every version of one key, newest first). DVC
exports ``DVC_EXP_NAME`` to the stage commands of ``dvc exp run``: :func:`artifact_key` appends it, so an
experiment's tables never land in the baseline's series.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast
from uuid import UUID

from prefect.artifacts import create_progress_artifact

if TYPE_CHECKING:
    from prefect.tasks import TaskRunNameCallbackWithParameters

_KEY_CHARACTERS = re.compile(r"[^a-z0-9-]+")  # what Prefect allows in an artifact key


def artifact_key(name: str) -> str:
    """``name``, then the DVC experiment when one runs (``retrieval-san-mmt-f-all-exp-1a2b3``), in the characters
    Prefect allows in a key (lowercase letters, digits, dashes)."""
    experiment = os.environ.get("DVC_EXP_NAME")
    key = f"{name}-{experiment}" if experiment else name
    return _KEY_CHARACTERS.sub("-", key.lower()).strip("-")


def progress_artifact(description: str, key: str | None = None) -> UUID:
    """A new progress artifact at 0% (of the current task or flow run), by its id for ``update_progress_artifact``.

    Called from sync code, Prefect's sync API returns the id itself, not a coroutine; the check says so to mypy.
    """
    created = create_progress_artifact(progress=0.0, key=key, description=description)
    assert isinstance(created, UUID)
    return created


def named_by(namer: Callable[[dict[str, Any]], str]) -> TaskRunNameCallbackWithParameters:
    """``namer`` as a task's ``task_run_name``: Prefect calls it with the run's parameters by name (``parameters=``)
    and names the run what it returns (``train MMT en-de``), where it would otherwise say ``train_translation_system-
    626``. Prefect types the option as a protocol that a plain function does not match; the cast says it does."""
    return cast("TaskRunNameCallbackWithParameters", namer)
