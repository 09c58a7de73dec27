"""Named random streams derived from one seed, and the few draws the generator needs.

Each purpose (the images, the translation captions, the comparable captions of one language, one
parallel corpus split) gets its own generator, so adding a language or changing one count leaves
every other file unchanged. The draws are built on ``random.Random.random()`` alone because that is
the one method whose sequence Python promises to keep across versions.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from typing import TypeVar

import numpy as np

T = TypeVar("T")


def _key(seed: int, names: tuple[str | int, ...]) -> int:
    text = "/".join([str(seed), *map(str, names)])
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:16], "big")


def stream(seed: int, *names: str | int) -> random.Random:
    """A scalar random generator for one named purpose, e.g. ``stream(0, "comparable", "de", 1)``."""
    return random.Random(_key(seed, names))


def array_stream(seed: int, *names: str | int) -> np.random.Generator:
    """A numpy generator (PCG64) for one named purpose, for array draws such as pixel noise."""
    return np.random.Generator(np.random.PCG64(_key(seed, names)))


def chance(rng: random.Random, probability: float) -> bool:
    return rng.random() < probability


def uniform(rng: random.Random, low: float, high: float) -> float:
    return low + (high - low) * rng.random()


def integer(rng: random.Random, low: int, high: int) -> int:
    """A whole number in ``low..high``, both included."""
    return low + min(int(rng.random() * (high - low + 1)), high - low)


def pick(rng: random.Random, items: Sequence[T]) -> T:
    return items[integer(rng, 0, len(items) - 1)]


def pick_weighted(rng: random.Random, weighted: Sequence[tuple[T, float]]) -> T:
    """One item of ``(item, weight)`` pairs, with probability proportional to its weight."""
    target = rng.random() * sum(weight for _, weight in weighted)
    for item, weight in weighted:
        target -= weight
        if target < 0:
            return item
    return weighted[-1][0]


def shuffled(rng: random.Random, items: Sequence[T]) -> list[T]:
    """A new list with the items in random order (Fisher-Yates)."""
    result = list(items)
    for last in range(len(result) - 1, 0, -1):
        other = integer(rng, 0, last)
        result[last], result[other] = result[other], result[last]
    return result
