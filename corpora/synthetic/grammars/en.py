"""English: lexicon and realiser (a/an by the next word's first letter, plural nouns after numerals).

Every slot offers its ways of saying a thing, most frequent first (see ``Wording``): "an oval" for "an
ellipse", "large" for "big", "beside" for "next to". Formal words ("rhombus", "scarlet", "depicts") belong to the
parallel corpus's formal sentences only; the uncommon ones among them ("lozenge", "crimson", "portrays") are also
the comparable captions' long tail. English has two formal words where German has one ("scarlet" and "crimson" for
"scharlachrot"), so a round trip through the formal German of an uncommon word can come back as the other one.
"""

from __future__ import annotations

from corpora.synthetic.grammars.common import (
    PLAIN,
    Choice,
    Grammar,
    Wording,
    attribute_words,
    enumerate_phrases,
    formal,
    noun_word,
    sentence,
    words,
)
from corpora.synthetic.inventory import SHAPE_COVER
from corpora.synthetic.meaning import Absent, Compared, Exists, Located, Meaning, Mention, Related

# noun (singular) -> plural
NOUNS: dict[str, str] = {
    "circle": "circles",
    "square": "squares",
    "triangle": "triangles",
    "star": "stars",
    "diamond": "diamonds",
    "rhombus": "rhombuses",
    "lozenge": "lozenges",
    "hexagon": "hexagons",
    "cross": "crosses",
    "plus sign": "plus signs",
    "ellipse": "ellipses",
    "oval": "ovals",
    "heart": "hearts",
    "pentagon": "pentagons",
    "shape": "shapes",
    "figure": "figures",
}

# shape (or the cover term) -> its nouns; shapes not listed have one noun of their own name
NOUN_CHOICES: dict[str, tuple[Choice, ...]] = {
    "diamond": words("diamond", formal("rhombus", 0.6), formal("lozenge", 0.4, uncommon=True)),
    "cross": words("cross", ("plus sign", 0.15, 0.1)),
    "ellipse": words("ellipse", ("oval", 0.35, 0.3)),
    SHAPE_COVER: words("shape", ("figure", 0.3, 0.2)),
}

# colour, size or cover term -> its adjectives; the others are said by their own name
ADJECTIVE_CHOICES: dict[str, tuple[Choice, ...]] = {
    "red": words("red", formal("scarlet", 0.6), formal("crimson", 0.4, uncommon=True)),
    "yellow": words("yellow", formal("amber", 0.6), formal("golden", 0.4, uncommon=True)),
    "purple": words("purple", ("violet", 0.25, 0.3)),
    "big": words("big", ("large", 0.35, 0.4), formal("enormous", 0.6), formal("huge", 0.4, uncommon=True)),
    "small": words("small", ("little", 0.25, 0.15), formal("minuscule", 0.6), formal("tiny", 0.4, uncommon=True)),
}

NUMBERS: dict[int, str] = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight"}

RELATIONS: dict[str, tuple[Choice, ...]] = {
    "left_of": words("to the left of", ("left of", 0.3, 0.1)),
    "right_of": words("to the right of", ("right of", 0.3, 0.1)),
    "above": words("above", ("over", 0.3, 0.2)),
    "below": words("below", ("under", 0.4, 0.2), formal("beneath", 1.0)),
    "next_to": words(
        "next to", ("beside", 0.4, 0.3), formal("adjacent to", 0.6), formal("alongside", 0.4, uncommon=True)
    ),
}

PLACES: dict[str, tuple[Choice, ...]] = {
    "top": words(
        "at the top of the picture",
        ("at the top of the image", 0.4),
        ("at the top", 0.3),
        formal("in the upper part of the picture", 1.0),
    ),
    "bottom": words(
        "at the bottom of the picture",
        ("at the bottom of the image", 0.4),
        ("at the bottom", 0.3),
        formal("in the lower part of the picture", 1.0),
    ),
    "left": words("on the left side of the picture", ("on the left of the image", 0.4), ("on the left", 0.3)),
    "right": words("on the right side of the picture", ("on the right of the image", 0.4), ("on the right", 0.3)),
    "middle": words("in the middle of the picture", ("in the centre of the image", 0.4), ("in the middle", 0.3)),
}

SHOWS: tuple[Choice, ...] = words(
    "the picture shows",
    ("the image shows", 0.4),
    ("the drawing shows", 0.2),
    formal("the picture depicts", 0.6),
    formal("the picture portrays", 0.4, uncommon=True),
)
THERE: tuple[Choice, ...] = words("there")
PICTURE_OF: tuple[Choice, ...] = words("a picture of", ("an image of", 0.4), ("a drawing of", 0.25))
BIGGER: tuple[Choice, ...] = words("bigger", ("larger", 0.5))
SMALLER: tuple[Choice, ...] = words("smaller", formal("tinier", 1.0))


def noun_phrase(mention: Mention, wording: Wording = PLAIN, *, determiner: str | None = None) -> str:
    """Name a mention: "a small red circle", "the blue star", "two green squares"; ``determiner`` overrides ("no")."""
    plural = mention.count > 1
    adjectives = attribute_words(mention, wording, ADJECTIVE_CHOICES)  # size before colour
    noun = noun_word(mention, wording, NOUN_CHOICES)
    phrase = [*adjectives, NOUNS[noun] if plural else noun]
    if determiner is None:
        determiner = "the" if mention.definite else NUMBERS[mention.count] if plural else "a"
    if determiner == "a" and phrase[0][0] in "aeiou":  # no word of the lexicon starts with a "you" sound
        determiner = "an"
    return " ".join([determiner, *phrase])


def _be(mention: Mention) -> str:
    return "are" if mention.count > 1 else "is"


def realise(meaning: Meaning, wording: Wording = PLAIN) -> str:
    """The English sentence for ``meaning``."""
    match meaning:
        case Exists(items=items, frame=frame):
            said = wording.choose({"there_is": THERE, "picture_shows": SHOWS, "picture_of": PICTURE_OF}[frame])
            listed = enumerate_phrases([noun_phrase(item, wording) for item in items], "and")
            if frame == "there_is":
                # The verb agrees with the nearest item ("There is a star and two circles").
                return sentence(f"{said} {_be(items[0])} {listed}")
            return sentence(f"{said} {listed}")
        case Located(subject=subject, place=place, frame=frame):
            where = wording.choose(PLACES[place])
            if frame == "place_first":
                return sentence(f"{where} there is {noun_phrase(subject, wording)}")
            return sentence(f"{noun_phrase(subject, wording)} is {where}")
        case Related(subject=subject, relation=relation, landmark=landmark, frame=frame):
            how = wording.choose(RELATIONS[relation])
            if frame == "landmark_first":
                landmark_phrase = noun_phrase(landmark, wording)
                return sentence(f"{how} {landmark_phrase} there is {noun_phrase(subject, wording)}")
            verb = " is" if frame == "clause" else ""
            subject_phrase = noun_phrase(subject, wording)
            return sentence(f"{subject_phrase}{verb} {how} {noun_phrase(landmark, wording)}")
        case Compared(subject=subject, other=other, bigger=bigger):
            comparative = wording.choose(BIGGER if bigger else SMALLER)
            return sentence(f"{noun_phrase(subject, wording)} is {comparative} than {noun_phrase(other, wording)}")
        case Absent(missing=missing):
            opening = wording.choose(SHOWS)
            return sentence(f"{opening} {noun_phrase(missing, wording, determiner='no')}")
    raise TypeError(f"not a meaning: {meaning!r}")


GRAMMAR = Grammar(code="en", name="English", realiser=realise)
