"""What every layer shares: file IO and atomic writes (:mod:`common.files`), our checkpoint files
(:mod:`common.checkpoints`), the user-error type (:mod:`common.errors`), typed config built from plain mappings
(:mod:`common.config`, :mod:`common.checks`), device and precision (:mod:`common.runtime`) and data-parallel
training helpers (:mod:`common.distributed`).

It imports no other package of the project, and neither Prefect, DVC nor YAML.
"""
