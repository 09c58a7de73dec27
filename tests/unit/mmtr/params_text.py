"""Edits of the repository's params.yaml text that tests of the params reader share."""

from __future__ import annotations

import re

DUPLICATE_LINE = "    lr_decay_epoch: 99"


def with_a_duplicate_key(text: str) -> str:
    """``text`` with ``retrieval.train.lr_decay_epoch`` given a second time, as ``DUPLICATE_LINE``, right after the
    first (whatever value the file sets)."""
    given = re.search(r"^    lr_decay_epoch: \d+\n", text, flags=re.MULTILINE)
    assert given is not None, "params.yaml sets retrieval.train.lr_decay_epoch"
    return text.replace(given[0], f"{given[0]}{DUPLICATE_LINE}\n", 1)
