"""The error a user can mend: bad input data or a bad file, named with where it is and what was expected."""

from __future__ import annotations


class InputError(ValueError):
    """Bad input data: the message names the file (and line or row) and what was expected."""
