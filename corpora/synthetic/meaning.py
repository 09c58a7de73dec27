"""The language-independent meaning of one sentence, which every grammar realises in its language.

A caption or parallel pair is sampled once as one of these values and then realised per language, so
the translations of one meaning are parallel by construction. Samplers only build meanings that are
true of their scene (see ``describe.py``); grammars only decide how to say them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

Vagueness = Literal["colour", "shape"]
ExistsFrame = Literal["there_is", "picture_shows", "picture_of"]
LocatedFrame = Literal["subject_first", "place_first"]
RelatedFrame = Literal["clause", "phrase", "landmark_first"]


@dataclass(frozen=True)
class Mention:
    """A noun phrase: "a red circle", "the small star", "two blue squares".

    ``colour``/``size`` are None when the phrase does not mention them. ``count`` > 1 only appears in
    the items of :class:`Exists` with the ``there_is`` or ``picture_shows`` frame. ``definite`` is set
    only when the description fits exactly one object of the scene.

    ``vague`` names the attribute a language that underspecifies it (the pivot of the translation
    captions) says by its cover term: "a dark circle" for a blue one, "a red shape" for a red star. The
    sampler sets it only where the vague phrase fits the same objects as the exact one, so the image
    always tells what the exact word must be.
    """

    shape: str
    colour: str | None = None
    size: str | None = None
    count: int = 1
    definite: bool = False
    vague: Vagueness | None = None


@dataclass(frozen=True)
class Exists:
    """Existence: "There is a red circle and two blue stars." / "The picture shows ..." / "A picture of ..."."""

    items: tuple[Mention, ...]
    frame: ExistsFrame = "there_is"


@dataclass(frozen=True)
class Located:
    """A place in the picture: "A red circle is at the top of the picture." / "At the top ... there is ..."."""

    subject: Mention
    place: str
    frame: LocatedFrame = "subject_first"


@dataclass(frozen=True)
class Related:
    """A spatial relation: "A red circle is next to a blue star." / "A red circle next to a blue star." /
    "Next to the blue star there is a red circle." (the last frame only in the parallel corpus)."""

    subject: Mention
    relation: str
    landmark: Mention
    frame: RelatedFrame = "clause"


@dataclass(frozen=True)
class Compared:
    """A size comparison: "The red circle is bigger than the blue star." (parallel corpus only)."""

    subject: Mention
    other: Mention
    bigger: bool


@dataclass(frozen=True)
class Absent:
    """An absence: "The picture shows no green square." (parallel corpus only)."""

    missing: Mention


Meaning = Exists | Located | Related | Compared | Absent


def mentions(meaning: Meaning) -> list[Mention]:
    """The mentions of ``meaning`` in a fixed order (the order :func:`with_mentions` takes them back)."""
    match meaning:
        case Exists(items=items):
            return list(items)
        case Located(subject=subject):
            return [subject]
        case Related(subject=subject, landmark=landmark):
            return [subject, landmark]
        case Compared(subject=subject, other=other):
            return [subject, other]
        case Absent(missing=missing):
            return [missing]
    raise TypeError(f"not a meaning: {meaning!r}")


def with_mentions(meaning: Meaning, new: list[Mention]) -> Meaning:
    """``meaning`` with its mentions replaced, in the order of :func:`mentions`."""
    match meaning:
        case Exists():
            return replace(meaning, items=tuple(new))
        case Located():
            return replace(meaning, subject=new[0])
        case Related():
            return replace(meaning, subject=new[0], landmark=new[1])
        case Compared():
            return replace(meaning, subject=new[0], other=new[1])
        case Absent():
            return replace(meaning, missing=new[0])
    raise TypeError(f"not a meaning: {meaning!r}")
