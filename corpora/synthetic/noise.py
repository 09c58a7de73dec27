"""Annotator noise: a small share of human captions with a wrong colour, a missed object or a typo.

Real caption corpora hold such mistakes, and a translation of a wrong caption is wrong with it. Noise
draws come from their own random stream, so the captions it leaves alone are the same bytes as without it.
"""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Literal

from corpora.synthetic.config import NoiseConfig
from corpora.synthetic.inventory import COLOURS
from corpora.synthetic.meaning import Exists, Meaning, mentions, with_mentions
from corpora.synthetic.streams import integer, pick, pick_weighted

NoiseKind = Literal["wrong_colour", "missed_object", "typo"]
NOISE_KINDS: tuple[NoiseKind, ...] = ("wrong_colour", "missed_object", "typo")


def draw_noise(rng: random.Random, config: NoiseConfig) -> NoiseKind | None:
    """Which mistake the annotator of one caption makes, if any (one draw per caption)."""
    shares = [(kind, getattr(config, kind)) for kind in NOISE_KINDS]
    kind = pick_weighted(rng, [*shares, (None, max(0.0, 1.0 - sum(share for _, share in shares)))])
    return kind


def wrong_colour(rng: random.Random, meaning: Meaning) -> Meaning | None:
    """One coloured mention said with another colour ("a green circle" for a red one); None if none has a colour."""
    current = mentions(meaning)
    coloured = [i for i, mention in enumerate(current) if mention.colour is not None]
    if not coloured:
        return None
    index = pick(rng, coloured)
    colour = pick(rng, [c for c in COLOURS if c != current[index].colour])
    # said exactly: a vague "dark" would hide a wrong colour of the same cover
    wrong = replace(current[index], colour=colour, vague=None)
    return with_mentions(meaning, [wrong if i == index else m for i, m in enumerate(current)])


def missed_object(rng: random.Random, meaning: Meaning) -> Meaning | None:
    """A count one short ("two stars" for three) or a listed object left out; None for other meanings."""
    if not isinstance(meaning, Exists):
        return None
    counted = [i for i, item in enumerate(meaning.items) if item.count > 1]
    if counted:
        index = pick(rng, counted)
        items = [replace(m, count=m.count - 1) if i == index else m for i, m in enumerate(meaning.items)]
        return replace(meaning, items=tuple(items))
    if len(meaning.items) > 1:
        dropped = integer(rng, 0, len(meaning.items) - 1)
        return replace(meaning, items=tuple(m for i, m in enumerate(meaning.items) if i != dropped))
    return None


def typo(rng: random.Random, text: str) -> str | None:
    """Two neighbouring letters of one word of five or more letters swapped; None if no word is that long."""
    words = text.split(" ")
    long_words = [i for i, word in enumerate(words) if sum(ch.isalpha() for ch in word) >= 5]
    if not long_words:
        return None
    index = pick(rng, long_words)
    word = words[index]
    letters = [i for i in range(1, len(word) - 2) if word[i].isalpha() and word[i + 1].isalpha()]
    position = pick(rng, letters) if letters else 1
    if word[position] == word[position + 1]:
        return None  # swapping "ll" changes nothing
    words[index] = word[:position] + word[position + 1] + word[position] + word[position + 2 :]
    return " ".join(words)
