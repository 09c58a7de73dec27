"""CPU threads that share a busy machine fairly: waiting threads sleep, and a process takes no more cores than it has.

torch's CPU wheels run their parallel regions on GNU OpenMP (libgomp, which MKL's threading layer uses too). By
default libgomp's idle threads spin for about 300,000 iterations before they sleep. On cores that other work shares,
a parallel region then waits for a descheduled thread while its siblings burn the time slices that thread needs, and
a training step runs several times slower than its fair share of the machine would allow. ``GOMP_SPINCOUNT=1000``
(about 10 microseconds) keeps the short spin that carries a thread from one small parallel region to the next, and
puts it to sleep long before it burns a time slice; sleeping at once (``OMP_WAIT_POLICY=PASSIVE``) costs a lone
process more (docs/scaling.md, "A shared machine", has ``bench/contention.py``'s figures for each).

libgomp reads its environment once, when torch loads it, so :func:`configure_environment` must run before the first
``import torch`` of a process: the entry packages (:mod:`flows`, :mod:`mmtr`) call it on import, and every process
they start inherits the setting. A value the user set is kept: ``OMP_WAIT_POLICY=ACTIVE`` spins for a dedicated
machine, and any ``GOMP_SPINCOUNT`` (``300000`` is libgomp's own default) takes the spin count into the user's hands.

The thread count: libgomp starts one thread per CPU of the process's affinity mask, but a container or a batch job may
be given less CPU time than it sees CPUs (a cgroup quota). :func:`available_cpus` counts both, and
:func:`use_available_cpus` lowers torch's threads to it unless ``OMP_NUM_THREADS`` says otherwise.

This module imports nothing of torch: it has to be importable before torch is.
"""

from __future__ import annotations

import math
import os
from collections.abc import MutableMapping
from pathlib import Path

SPIN_COUNT = "1000"  # libgomp spins about 100,000 times a millisecond; its own default is 300,000
USER_SETTINGS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")  # either one means the user chose how threads wait
CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")  # cgroup v2: "<quota> <period>" in microseconds, or "max <period>"


def configure_environment(environ: MutableMapping[str, str] = os.environ) -> None:
    """Make OpenMP's waiting threads sleep after a short spin (``GOMP_SPINCOUNT``) unless the user chose a wait policy
    or a spin count. Call it before torch is imported; the processes started afterwards inherit it."""
    if not any(name in environ for name in USER_SETTINGS):
        environ["GOMP_SPINCOUNT"] = SPIN_COUNT


def cgroup_cpu_limit(cpu_max: Path = CGROUP_CPU_MAX) -> float | None:
    """The CPUs a cgroup v2 quota grants this process (``1.5`` for 150 ms per 100 ms), or None without a quota."""
    try:
        quota, period = cpu_max.read_text(encoding="ascii").split()[:2]
    except (OSError, ValueError):
        return None
    if quota == "max":
        return None
    try:
        return int(quota) / int(period)
    except (ValueError, ZeroDivisionError):
        return None


def available_cpus(cpu_max: Path = CGROUP_CPU_MAX) -> int:
    """The cores this process may use: its affinity mask, lowered to a cgroup CPU quota rounded up (at least 1)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    limit = cgroup_cpu_limit(cpu_max)
    if limit is not None:
        cpus = min(cpus, math.ceil(limit))
    return max(1, cpus)


def use_available_cpus(environ: MutableMapping[str, str] = os.environ) -> int:
    """Lower torch's CPU threads to :func:`available_cpus` (never raise them) unless ``OMP_NUM_THREADS`` is set;
    returns the thread count in force."""
    import torch

    if "OMP_NUM_THREADS" not in environ and torch.get_num_threads() > available_cpus():
        torch.set_num_threads(available_cpus())
    return torch.get_num_threads()
