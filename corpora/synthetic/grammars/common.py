"""What every grammar shares: the ``Grammar`` record, the ``Wording`` of one sentence, and spelling helpers."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple, TypeVar

from corpora.synthetic.inventory import SHAPE_COVER, colour_cover
from corpora.synthetic.meaning import Meaning, Mention

T = TypeVar("T")
Register = Literal["caption", "parallel"]


class Choice(NamedTuple):
    """One way to say something, with how often captions, plain parallel text and formal parallel text use it.

    A weight of 0 keeps a word out of a style. Formal words (``formal("rhombus", 0.6)``: caption and plain weights
    0) are said only by the parallel corpus's formal sentences, a sentence and its translation alike, as news text
    and its translation share their register. An ``uncommon`` formal word ("crimson", "lozenge") is also the long
    tail of the comparable captions: an annotator now and then reaches for it (``Wording.uncommon``).
    """

    word: str
    caption: float = 1.0
    parallel: float = 1.0
    formal: float = 0.0
    uncommon: bool = False


class Wording:
    """How one sentence is worded: which choice every slot takes, and whether vague mentions stay vague.

    Every :meth:`choose` consumes exactly one draw, whatever the slot offers, so two realisations of
    meanings with the same structure and the same ``seed`` take the same choices slot by slot. That lets
    the generator realise a meaning again with one attribute changed and see which words depend on it.

    Args:
        seed: seeds the choices; None takes the first choice of every slot (one wording per meaning).
        register: which weights apply.
        paraphrase: multiplies the weight of every choice but the first (0: always the first).
        underspecify: realise a vague mention by its cover term ("a dark circle"), as the pivot language does.
        own_style: word as annotators of another corpus do: a slot's most common choice is never said where the
            register offers another, and the others keep their order ("large", never "big"; "the image shows",
            never "the picture shows"); with a seed only.
        formal: a parallel sentence in the formal style: every slot that has formal words says one of them.
        uncommon: a caption's chance, per slot that has an uncommon word, of saying one (the comparable captions'
            long tail; 0 for the translation captions).
    """

    def __init__(
        self,
        seed: int | None = None,
        *,
        register: Register = "caption",
        paraphrase: float = 1.0,
        underspecify: bool = False,
        own_style: bool = False,
        formal: bool = False,
        uncommon: float = 0.0,
    ) -> None:
        self.seed, self.register, self.paraphrase, self.underspecify = seed, register, paraphrase, underspecify
        self.own_style, self.formal, self.uncommon = own_style, formal, uncommon
        self._rng = None if seed is None else random.Random(seed)

    def choose(self, choices: Sequence[Choice]) -> str:
        """The word of one slot (its first choice without a seed)."""
        if self._rng is None:
            return choices[0].word
        draw = self._rng.random()
        rare = [choice for choice in choices if choice.uncommon] if self.register == "caption" and self.uncommon else []
        if rare:
            # the one draw decides both whether and which: the slot's other choices keep their shares of the rest
            if draw < self.uncommon:
                return _pick([choice.formal for choice in rare], rare, draw / self.uncommon)
            draw = (draw - self.uncommon) / (1.0 - self.uncommon)
        if self.register == "parallel" and self.formal and any(choice.formal > 0 for choice in choices):
            return _pick([choice.formal for choice in choices], choices, draw)
        if self.own_style:
            others = [choice for choice in choices[1:] if self._register_weight(choice) > 0]
            choices = others or choices
        return _pick([self._weight(index, choice) for index, choice in enumerate(choices)], choices, draw)

    def choose_item(self, items: Sequence[tuple[T, Choice]]) -> T:
        """Like :meth:`choose` for slots whose options are not words (a noun entry, a whole frame)."""
        word = self.choose([choice for _, choice in items])
        return next(item for item, choice in items if choice.word == word)

    def again(self) -> Wording:
        """A fresh wording with the same settings that will take the same choices from the start."""
        return Wording(
            self.seed,
            register=self.register,
            paraphrase=self.paraphrase,
            underspecify=self.underspecify,
            own_style=self.own_style,
            formal=self.formal,
            uncommon=self.uncommon,
        )

    def _register_weight(self, choice: Choice) -> float:
        return choice.caption if self.register == "caption" else choice.parallel

    def _weight(self, index: int, choice: Choice) -> float:
        weight = self._register_weight(choice)
        return weight if index == 0 else weight * self.paraphrase


def _pick(weights: Sequence[float], choices: Sequence[Choice], draw: float) -> str:
    """The choice that ``draw`` (in [0, 1)) falls on when the choices share [0, 1) by ``weights``."""
    target = draw * sum(weights)
    for choice, weight in zip(choices, weights, strict=True):
        target -= weight
        if target < 0:
            return choice.word
    return next(choice.word for choice, weight in zip(choices, weights, strict=True) if weight > 0)


PLAIN = Wording()  # first choices, nothing vague: the canonical sentence of a meaning


@dataclass(frozen=True)
class Grammar:
    """One language: its ISO 639-1 code, its English name and its realiser (meaning, wording -> sentence)."""

    code: str
    name: str
    realiser: Callable[[Meaning, Wording], str]

    def realise(self, meaning: Meaning, wording: Wording = PLAIN) -> str:
        return self.realiser(meaning, wording)


def words(*choices: str | tuple[str, float] | tuple[str, float, float] | Choice) -> tuple[Choice, ...]:
    """Shorthand for a slot: ``words("big", ("large", 0.3), formal("huge", 1.0))``; the first word is the most
    frequent."""
    return tuple(c if isinstance(c, Choice) else Choice(c) if isinstance(c, str) else Choice(*c) for c in choices)


def formal(word: str, weight: float, *, uncommon: bool = False) -> Choice:
    """A word of the parallel corpus's formal sentences only (and, ``uncommon``, of the comparable captions' long
    tail), with its weight among the slot's formal words."""
    return Choice(word, caption=0.0, parallel=0.0, formal=weight, uncommon=uncommon)


def noun_word(mention: Mention, wording: Wording, choices: dict[str, tuple[Choice, ...]]) -> str:
    """The lexicon key of the noun that names ``mention``'s shape: the hypernym where the mention is vague about its
    shape and the wording underspecifies, one of ``choices`` for shapes with synonyms, the shape's own name
    otherwise."""
    shape = SHAPE_COVER if mention.vague == "shape" and wording.underspecify else mention.shape
    return wording.choose(choices.get(shape, (Choice(shape),)))


def attribute_words(mention: Mention, wording: Wording, choices: dict[str, tuple[Choice, ...]]) -> list[str]:
    """The lexicon keys that say ``mention``'s size and colour, size first (the ones it names): the colour's
    cover term where the mention is vague and the wording underspecifies, one of ``choices`` for slots with
    synonyms, the attribute's own name otherwise."""
    said = []
    for attribute, value in (("size", mention.size), ("colour", mention.colour)):
        if value is None:
            continue
        if attribute == "colour" and mention.vague == "colour" and wording.underspecify:
            value = colour_cover(value) or value
        said.append(wording.choose(choices.get(value, (Choice(value),))))
    return said


def sentence(text: str) -> str:
    """Capitalise the first letter (only that one: nouns and accents stay as written) and end with a period."""
    text = " ".join(text.split())
    return text[:1].upper() + text[1:] + "."


def enumerate_phrases(phrases: Sequence[str], conjunction: str) -> str:
    """Join as "a, b and c": commas between the items, the conjunction before the last (no serial comma)."""
    if len(phrases) == 1:
        return phrases[0]
    return ", ".join(phrases[:-1]) + f" {conjunction} " + phrases[-1]
