"""Retrieval run names: ``<model>-<variant>-<role>``."""

from __future__ import annotations


def split_run(name: str) -> tuple[str, str, str]:
    """``san-mmt_f-all`` -> (``san``, ``mmt_f``, ``all``): model, variant and role names have no hyphen."""
    parts = name.split("-")
    if len(parts) != 3:
        raise ValueError(f"{name!r} is not a run name <model>-<variant>-<role>")
    model, variant, role = parts
    return model, variant, role
