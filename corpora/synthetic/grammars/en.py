"""English: lexicon and realiser (a/an by the next word's first letter, plural nouns after numerals)."""

from __future__ import annotations

from corpora.synthetic.grammars.common import Grammar, enumerate_phrases, sentence
from corpora.synthetic.meaning import Absent, Compared, Exists, Located, Meaning, Mention, Related

# shape -> (singular, plural)
NOUNS: dict[str, tuple[str, str]] = {
    "circle": ("circle", "circles"),
    "square": ("square", "squares"),
    "triangle": ("triangle", "triangles"),
    "star": ("star", "stars"),
    "diamond": ("diamond", "diamonds"),
    "hexagon": ("hexagon", "hexagons"),
    "cross": ("cross", "crosses"),
    "ellipse": ("ellipse", "ellipses"),
    "heart": ("heart", "hearts"),
    "pentagon": ("pentagon", "pentagons"),
}

ADJECTIVES: dict[str, str] = {
    "red": "red",
    "green": "green",
    "blue": "blue",
    "yellow": "yellow",
    "orange": "orange",
    "purple": "purple",
    "black": "black",
    "white": "white",
    "small": "small",
    "big": "big",
}

NUMBERS: dict[int, str] = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight"}

RELATIONS: dict[str, str] = {
    "left_of": "to the left of",
    "right_of": "to the right of",
    "above": "above",
    "below": "below",
    "next_to": "next to",
}

PLACES: dict[str, str] = {
    "top": "at the top of the picture",
    "bottom": "at the bottom of the picture",
    "left": "on the left side of the picture",
    "right": "on the right side of the picture",
    "middle": "in the middle of the picture",
}


def noun_phrase(mention: Mention, *, determiner: str | None = None) -> str:
    """Name a mention: "a small red circle", "the blue star", "two green squares"; ``determiner`` overrides ("no")."""
    plural = mention.count > 1
    words = [ADJECTIVES[a] for a in (mention.size, mention.colour) if a is not None]  # size before colour
    words.append(NOUNS[mention.shape][1 if plural else 0])
    if determiner is None:
        determiner = "the" if mention.definite else NUMBERS[mention.count] if plural else "a"
    if determiner == "a" and words[0][0] in "aeiou":  # no word of the lexicon starts with a "you" sound
        determiner = "an"
    return " ".join([determiner, *words])


def _be(mention: Mention) -> str:
    return "are" if mention.count > 1 else "is"


def realise(meaning: Meaning) -> str:
    """The English sentence for ``meaning``."""
    match meaning:
        case Exists(items=items, frame=frame):
            listed = enumerate_phrases([noun_phrase(item) for item in items], "and")
            if frame == "there_is":
                # The verb agrees with the nearest item ("There is a star and two circles").
                return sentence(f"there {_be(items[0])} {listed}")
            opening = "the picture shows" if frame == "picture_shows" else "a picture of"
            return sentence(f"{opening} {listed}")
        case Located(subject=subject, place=place, frame=frame):
            if frame == "place_first":
                return sentence(f"{PLACES[place]} there is {noun_phrase(subject)}")
            return sentence(f"{noun_phrase(subject)} is {PLACES[place]}")
        case Related(subject=subject, relation=relation, landmark=landmark, frame=frame):
            if frame == "landmark_first":
                return sentence(f"{RELATIONS[relation]} {noun_phrase(landmark)} there is {noun_phrase(subject)}")
            verb = " is" if frame == "clause" else ""
            return sentence(f"{noun_phrase(subject)}{verb} {RELATIONS[relation]} {noun_phrase(landmark)}")
        case Compared(subject=subject, other=other, bigger=bigger):
            comparative = "bigger" if bigger else "smaller"
            return sentence(f"{noun_phrase(subject)} is {comparative} than {noun_phrase(other)}")
        case Absent(missing=missing):
            return sentence(f"the picture shows {noun_phrase(missing, determiner='no')}")
    raise TypeError(f"not a meaning: {meaning!r}")


GRAMMAR = Grammar(code="en", name="English", realise=realise)
