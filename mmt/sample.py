"""A seeded uniform sample of a stream too large to hold (the subword models' training text of a WMT corpus)."""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

Item = TypeVar("Item")


@dataclass(frozen=True)
class Sample(Generic[Item]):
    """What :func:`reservoir_sample` kept.

    Attributes:
        items: The kept items, in stream order.
        total: How many items the stream held.
    """

    items: list[Item]
    total: int


def reservoir_sample(items: Iterable[Item], size: int, *, seed: int) -> Sample[Item]:
    """A uniform sample of ``size`` items of a stream read once, in memory of ``size`` items (Algorithm R), the
    kept items in stream order. The same stream and seed give the same sample; a stream of at most ``size`` items
    is kept whole, as it is."""
    if size < 1:
        raise ValueError(f"sample size must be at least 1, got {size}")
    rng = random.Random(seed)
    kept: list[tuple[int, Item]] = []
    total = 0
    for total, item in enumerate(items, start=1):
        if total <= size:
            kept.append((total, item))
            continue
        slot = rng.randrange(total)  # item number `total` is kept with probability size / total
        if slot < size:
            kept[slot] = (total, item)
    kept.sort(key=lambda entry: entry[0])
    return Sample([item for _, item in kept], total)
