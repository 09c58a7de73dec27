"""German: lexicon and realiser with gender, case (nominative, accusative, dative) and adjective declension.

Adjectives take the weak ending after the definite article, the mixed ending after "ein"/"kein" and
the strong ending without an article (after numerals), e.g. "der rote Kreis", "ein roter Kreis",
"zwei rote Kreise"; every preposition used here governs the dative ("neben einem roten Kreis").
"""

from __future__ import annotations

import re
from typing import NamedTuple

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

MASCULINE, FEMININE, NEUTER, PLURAL = 0, 1, 2, 3  # column of the article and ending tables


class Noun(NamedTuple):
    gender: int
    singular: str  # nominative = accusative singular
    dative_singular: str
    plural: str  # nominative = accusative plural
    dative_plural: str


NOUNS: dict[str, Noun] = {
    "circle": Noun(MASCULINE, "Kreis", "Kreis", "Kreise", "Kreisen"),
    "star": Noun(MASCULINE, "Stern", "Stern", "Sterne", "Sternen"),
    "diamond": Noun(FEMININE, "Raute", "Raute", "Rauten", "Rauten"),
    "ellipse": Noun(FEMININE, "Ellipse", "Ellipse", "Ellipsen", "Ellipsen"),
    "square": Noun(NEUTER, "Quadrat", "Quadrat", "Quadrate", "Quadraten"),
    "triangle": Noun(NEUTER, "Dreieck", "Dreieck", "Dreiecke", "Dreiecken"),
    "hexagon": Noun(NEUTER, "Sechseck", "Sechseck", "Sechsecke", "Sechsecken"),
    "pentagon": Noun(NEUTER, "Fünfeck", "Fünfeck", "Fünfecke", "Fünfecken"),
    "cross": Noun(NEUTER, "Kreuz", "Kreuz", "Kreuze", "Kreuzen"),
    "heart": Noun(NEUTER, "Herz", "Herzen", "Herzen", "Herzen"),  # irregular: "dem Herzen"
    "Rhombus": Noun(MASCULINE, "Rhombus", "Rhombus", "Rhomben", "Rhomben"),
    "Oval": Noun(NEUTER, "Oval", "Oval", "Ovale", "Ovalen"),
    "Pluszeichen": Noun(NEUTER, "Pluszeichen", "Pluszeichen", "Pluszeichen", "Pluszeichen"),
    SHAPE_COVER: Noun(FEMININE, "Form", "Form", "Formen", "Formen"),
    "Figur": Noun(FEMININE, "Figur", "Figur", "Figuren", "Figuren"),
}

# shape (or the cover term) -> keys of NOUNS; shapes not listed have the one entry of their own name
NOUN_CHOICES: dict[str, tuple[Choice, ...]] = {
    "diamond": words("diamond", formal("Rhombus", 1.0)),
    "ellipse": words("ellipse", ("Oval", 0.35, 0.3)),
    "cross": words("cross", ("Pluszeichen", 0.15, 0.1)),
    SHAPE_COVER: words(SHAPE_COVER, ("Figur", 0.3, 0.2)),
}

# Adjective stems. "orangefarben" and "violett" rather than "orange"/"lila", which standard German
# leaves undeclined ("ein lila Kreis") and which would break the ending tables.
ADJECTIVES: dict[str, str] = {
    "red": "rot",
    "green": "grün",
    "blue": "blau",
    "yellow": "gelb",
    "orange": "orangefarben",
    "purple": "violett",
    "black": "schwarz",
    "white": "weiß",
    "small": "klein",
    "big": "groß",
    "dark": "dunkl",  # "dunkel" drops its e before an ending: "ein dunkler Kreis"
    "light": "hell",
    "scharlachrot": "scharlachrot",
    "winzig": "winzig",
    "riesig": "riesig",
    "goldgelb": "goldgelb",
}

# colour, size or cover term -> keys of ADJECTIVES
ADJECTIVE_CHOICES: dict[str, tuple[Choice, ...]] = {
    "red": words("red", formal("scharlachrot", 1.0)),
    "yellow": words("yellow", formal("goldgelb", 1.0)),
    "small": words("small", formal("winzig", 1.0)),
    "big": words("big", formal("riesig", 1.0)),
}

NUMBERS: dict[int, str] = {2: "zwei", 3: "drei", 4: "vier", 5: "fünf", 6: "sechs", 7: "sieben", 8: "acht"}

# (article, case) -> (masculine, feminine, neuter, plural); None where the article has no plural.
ARTICLES: dict[tuple[str, str], tuple[str | None, ...]] = {
    ("definite", "nom"): ("der", "die", "das", "die"),
    ("definite", "acc"): ("den", "die", "das", "die"),
    ("definite", "dat"): ("dem", "der", "dem", "den"),
    ("indefinite", "nom"): ("ein", "eine", "ein", None),
    ("indefinite", "acc"): ("einen", "eine", "ein", None),
    ("indefinite", "dat"): ("einem", "einer", "einem", None),
    ("kein", "nom"): ("kein", "keine", "kein", "keine"),
    ("kein", "acc"): ("keinen", "keine", "kein", "keine"),
    ("kein", "dat"): ("keinem", "keiner", "keinem", "keinen"),
}

DECLENSION: dict[str, str] = {"definite": "weak", "indefinite": "mixed", "kein": "mixed", "none": "strong"}

# (declension, case) -> adjective ending for (masculine, feminine, neuter, plural)
ENDINGS: dict[tuple[str, str], tuple[str, str, str, str]] = {
    ("weak", "nom"): ("e", "e", "e", "en"),
    ("weak", "acc"): ("en", "e", "e", "en"),
    ("weak", "dat"): ("en", "en", "en", "en"),
    ("mixed", "nom"): ("er", "e", "es", "en"),
    ("mixed", "acc"): ("en", "e", "es", "en"),
    ("mixed", "dat"): ("en", "en", "en", "en"),
    ("strong", "nom"): ("er", "e", "es", "e"),
    ("strong", "acc"): ("en", "e", "es", "e"),
    ("strong", "dat"): ("em", "er", "em", "en"),
}

RELATIONS: dict[str, tuple[Choice, ...]] = {  # each governs the dative here (location, not direction)
    "left_of": words("links von", ("links neben", 0.3, 0.1)),
    "right_of": words("rechts von", ("rechts neben", 0.3, 0.1)),
    "above": words("über", ("oberhalb von", 0.25, 0.4)),
    "below": words("unter", ("unterhalb von", 0.25, 0.4)),
    "next_to": words("neben", formal("seitlich von", 1.0)),
}

EXISTS_OPENINGS: dict[str, tuple[str, tuple[Choice, ...]]] = {  # frame -> (case of the listed items, openings)
    "there_is": ("acc", words("es gibt", ("man sieht", 0.4, 0.1))),
    "picture_shows": (
        "acc",
        words(
            "das Bild zeigt",
            ("die Abbildung zeigt", 0.3, 0.3),
            ("die Zeichnung zeigt", 0.2),
            formal("die Darstellung zeigt", 1.0),
        ),
    ),
    "picture_of": ("dat", words("ein Bild mit", ("eine Zeichnung mit", 0.3))),
}

PLACES: dict[str, tuple[Choice, ...]] = {
    "top": words("oben im Bild", ("im oberen Teil des Bildes", 0.3, 0.5), ("oben", 0.2)),
    "bottom": words("unten im Bild", ("im unteren Teil des Bildes", 0.3, 0.5), ("unten", 0.2)),
    "left": words("links im Bild", ("auf der linken Seite des Bildes", 0.3, 0.5), ("links", 0.2)),
    "right": words("rechts im Bild", ("auf der rechten Seite des Bildes", 0.3, 0.5), ("rechts", 0.2)),
    "middle": words("in der Mitte des Bildes", ("in der Bildmitte", 0.4), formal("mittig", 1.0)),
}


def noun_phrase(mention: Mention, case: str, wording: Wording = PLAIN, *, article: str | None = None) -> str:
    """E.g. ``("circle", red)`` in the dative -> "einem roten Kreis".

    Args:
        mention: what to name; ``count`` > 1 gives a numeral and no article ("zwei rote Kreise").
        case: "nom", "acc" or "dat".
        article: "definite", "indefinite", "kein" or "none"; by default taken from the mention.
    """
    adjectives = attribute_words(mention, wording, ADJECTIVE_CHOICES)
    noun = NOUNS[noun_word(mention, wording, NOUN_CHOICES)]
    plural = mention.count > 1
    if article is None:
        article = "definite" if mention.definite else "none" if plural else "indefinite"
    column = PLURAL if plural else noun.gender
    ending = ENDINGS[(DECLENSION[article], case)][column]
    said = [] if article == "none" else [_article(article, case, column)]
    if plural and not mention.definite:
        said.append(NUMBERS[mention.count])
    said += [ADJECTIVES[a] + ending for a in adjectives]
    if plural:
        said.append(noun.dative_plural if case == "dat" else noun.plural)
    else:
        said.append(noun.dative_singular if case == "dat" else noun.singular)
    return " ".join(said)


def _article(article: str, case: str, column: int) -> str:
    form = ARTICLES[(article, case)][column]
    if form is None:
        raise ValueError(f"the {article} article has no plural; use a numeral (article='none')")
    return form


def _contract(text: str) -> str:
    """Contract "von dem" to "vom", as standard German does with an unstressed article."""
    return re.sub(r"\bvon dem\b", "vom", text)


def realise(meaning: Meaning, wording: Wording = PLAIN) -> str:
    """The German sentence for ``meaning``."""
    return sentence(_contract(_clause(meaning, wording)))


def _clause(meaning: Meaning, wording: Wording) -> str:
    match meaning:
        case Exists(items=items, frame=frame):
            case, openings = EXISTS_OPENINGS[frame]
            opening = wording.choose(openings)
            return f"{opening} " + enumerate_phrases([noun_phrase(item, case, wording) for item in items], "und")
        case Located(subject=subject, place=place, frame=frame):
            where = wording.choose(PLACES[place])
            if frame == "place_first":
                return f"{where} ist {noun_phrase(subject, 'nom', wording)}"  # verb second, subject after it
            return f"{noun_phrase(subject, 'nom', wording)} ist {where}"
        case Related(subject=subject, relation=relation, landmark=landmark, frame=frame):
            where = f"{wording.choose(RELATIONS[relation])} {noun_phrase(landmark, 'dat', wording)}"
            if frame == "landmark_first":
                return f"{where} ist {noun_phrase(subject, 'nom', wording)}"
            verb = " ist" if frame == "clause" else ""
            return f"{noun_phrase(subject, 'nom', wording)}{verb} {where}"
        case Compared(subject=subject, other=other, bigger=bigger):
            comparative = "größer" if bigger else "kleiner"
            first = noun_phrase(subject, "nom", wording)
            return f"{first} ist {comparative} als {noun_phrase(other, 'nom', wording)}"
        case Absent(missing=missing):
            opening = wording.choose(EXISTS_OPENINGS["picture_shows"][1])
            return f"{opening} {noun_phrase(missing, 'acc', wording, article='kein')}"
    raise TypeError(f"not a meaning: {meaning!r}")


GRAMMAR = Grammar(code="de", name="German", realiser=realise)
