"""The application around the pipeline: the ``mmtr`` command line, the ``params.yaml`` reader, the papers'
profiles, what every stage entry point shares, the Prefect UI card of a stage run and the local Prefect server.

The stage flows themselves live in :mod:`flows`, one module per DVC stage. Importing the package sets the CPU
threading policy (:mod:`common.threads`) before any command loads torch, for this process and those it starts.
"""

from importlib.metadata import PackageNotFoundError, version

from common.threads import configure_environment

configure_environment()

try:
    __version__ = version("mmtr")
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"
