"""One Prefect flow per DVC stage (``python -m flows.<stage>``), and :mod:`flows.pipeline`, which runs them all.

Importing the package sets the CPU threading policy (:mod:`common.threads`) before any stage module loads torch.
"""

from common.threads import configure_environment

configure_environment()
