"""Command lines that tests build for the stages and the `mmtr` command."""

from __future__ import annotations


def flags(**options: object) -> list[str]:
    """Command-line options, ``--<name> <value>`` in the order given (each value through ``str``)."""
    return [item for name, value in options.items() for item in (f"--{name}", str(value))]
