"""What a translation can only get right by looking at the image, recorded for evaluation (never for training).

Where the pivot caption says a cover term ("a dark circle", "a red shape"), the target caption names the
exact colour or shape, and in languages with gender the article and adjective endings agree with it. The
words of the target caption that would change if the vague attribute took another value the cover term
allows are its *image-dependent words*. The contrastive items pair one vague pivot sentence with two images
that settle it differently (after CoMMuTE, Futeral et al. 2023).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from difflib import SequenceMatcher

from corpora.synthetic.describe import vague_readings
from corpora.synthetic.grammars.common import Grammar, Wording
from corpora.synthetic.inventory import COLOUR_COVERS, SHAPES, colour_cover
from corpora.synthetic.meaning import Exists, Meaning, Mention, mentions, with_mentions
from corpora.synthetic.scenes import Scene

_STRIP = ".,"


def tokens(text: str) -> list[str]:
    """Whitespace tokens without the sentence's closing period or list commas."""
    return [token.strip(_STRIP) for token in text.split() if token.strip(_STRIP)]


def alternatives(mention: Mention) -> list[Mention]:
    """The mentions the vague phrase of ``mention`` could also stand for (other colours of its cover, other shapes)."""
    if mention.vague == "colour" and mention.colour is not None:
        cover = colour_cover(mention.colour)
        return [replace(mention, colour=c) for c in COLOUR_COVERS[cover or ""] if c != mention.colour]
    if mention.vague == "shape":
        return [replace(mention, shape=s) for s in SHAPES if s != mention.shape]
    return []


def image_dependent_words(grammar: Grammar, meaning: Meaning, wording: Wording) -> list[str]:
    """The words of ``grammar``'s sentence for ``meaning`` that depend on what the image shows.

    The sentence is realised again with each vague attribute set to each value its cover term allows, with
    the same choices of words (``wording.again()``); a word of the true sentence that any of these changes
    or drops is image-dependent. A language that underspecifies (the pivot) has none.
    """
    if wording.underspecify:
        return []
    true = tokens(grammar.realise(meaning, wording.again()))
    changed: set[int] = set()
    current = mentions(meaning)
    for index, mention in enumerate(current):
        for other in alternatives(mention):
            swapped = with_mentions(meaning, [other if i == index else m for i, m in enumerate(current)])
            said = tokens(grammar.realise(swapped, wording.again()))
            for tag, start, end, _, _ in SequenceMatcher(None, true, said, autojunk=False).get_opcodes():
                if tag in ("replace", "delete"):
                    changed.update(range(start, end))
    return [true[i] for i in sorted(changed)]


@dataclass(frozen=True)
class ContrastiveItem:
    """One vague pivot sentence and two images; ``translations[k]`` is the right one with ``image_ids[k]``."""

    source: str
    image_ids: tuple[str, str]
    translations: tuple[str, str]


def contrastive_items(
    scenes: Iterable[tuple[str, Scene]], pivot: Grammar, target: Grammar, *, limit: int
) -> list[ContrastiveItem]:
    """Up to ``limit`` items from these images: "There is a dark circle." with a blue circle and a black one.

    Every object that a cover term names alone in its scene ("a dark circle" where it is the only dark
    circle, "a red shape" where it is the only red object) gives a candidate; candidates with the same
    pivot sentence and different translations are paired in image order, each image at most once per
    sentence. Sentences take the first choice of every word, so the two translations differ only where
    the image decides.
    """
    vague_says = Wording(underspecify=True)
    exact_says = Wording()
    by_source: dict[str, list[tuple[str, str]]] = {}
    for image_id, scene in scenes:
        for obj in scene.objects:
            exact = Mention(obj.shape, obj.colour)
            for vagueness in vague_readings(scene, exact):
                meaning = Exists((replace(exact, vague=vagueness),), "there_is")
                source = pivot.realise(meaning, vague_says)
                by_source.setdefault(source, []).append((image_id, target.realise(meaning, exact_says)))
    items: list[ContrastiveItem] = []
    for source in sorted(by_source):
        items.extend(_pairs(source, by_source[source]))
    items.sort(key=lambda item: (item.image_ids, item.source))
    return items[:limit]


def _pairs(source: str, candidates: Sequence[tuple[str, str]]) -> list[ContrastiveItem]:
    """Pair each unused candidate with the next unused one of another translation (and another image)."""
    used: set[int] = set()
    items: list[ContrastiveItem] = []
    for first, (image_a, translation_a) in enumerate(candidates):
        if first in used:
            continue
        for second in range(first + 1, len(candidates)):
            image_b, translation_b = candidates[second]
            if second not in used and translation_b != translation_a and image_b != image_a:
                used.update((first, second))
                items.append(ContrastiveItem(source, (image_a, image_b), (translation_a, translation_b)))
                break
    return items
