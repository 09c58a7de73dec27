"""German: lexicon and realiser with gender, case (nominative, accusative, dative) and adjective declension.

Adjectives take the weak ending after the definite article, the mixed ending after "ein"/"kein" and
the strong ending without an article (after numerals), e.g. "der rote Kreis", "ein roter Kreis",
"zwei rote Kreise"; every preposition used here governs the dative ("neben einem roten Kreis").
"""

from __future__ import annotations

import re
from typing import NamedTuple

from corpora.synthetic.grammars.common import Grammar, enumerate_phrases, sentence
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

RELATIONS: dict[str, str] = {  # each governs the dative here (location, not direction)
    "left_of": "links von",
    "right_of": "rechts von",
    "above": "über",
    "below": "unter",
    "next_to": "neben",
}

EXISTS_OPENINGS: dict[str, tuple[str, str]] = {  # frame -> (words, case of the listed items)
    "there_is": ("es gibt", "acc"),
    "picture_shows": ("das Bild zeigt", "acc"),
    "picture_of": ("ein Bild mit", "dat"),
}

PLACES: dict[str, str] = {
    "top": "oben im Bild",
    "bottom": "unten im Bild",
    "left": "links im Bild",
    "right": "rechts im Bild",
    "middle": "in der Mitte des Bildes",
}


def noun_phrase(mention: Mention, case: str, *, article: str | None = None) -> str:
    """E.g. ``("circle", red)`` in the dative -> "einem roten Kreis".

    Args:
        mention: what to name; ``count`` > 1 gives a numeral and no article ("zwei rote Kreise").
        case: "nom", "acc" or "dat".
        article: "definite", "indefinite", "kein" or "none"; by default taken from the mention.
    """
    noun = NOUNS[mention.shape]
    plural = mention.count > 1
    if article is None:
        article = "definite" if mention.definite else "none" if plural else "indefinite"
    column = PLURAL if plural else noun.gender
    ending = ENDINGS[(DECLENSION[article], case)][column]
    words = [] if article == "none" else [_article(article, case, column)]
    if plural and not mention.definite:
        words.append(NUMBERS[mention.count])
    words += [ADJECTIVES[a] + ending for a in (mention.size, mention.colour) if a is not None]
    if plural:
        words.append(noun.dative_plural if case == "dat" else noun.plural)
    else:
        words.append(noun.dative_singular if case == "dat" else noun.singular)
    return " ".join(words)


def _article(article: str, case: str, column: int) -> str:
    form = ARTICLES[(article, case)][column]
    if form is None:
        raise ValueError(f"the {article} article has no plural; use a numeral (article='none')")
    return form


def _contract(text: str) -> str:
    """Contract "von dem" to "vom", as standard German does with an unstressed article."""
    return re.sub(r"\bvon dem\b", "vom", text)


def realise(meaning: Meaning) -> str:
    """The German sentence for ``meaning``."""
    return sentence(_contract(_clause(meaning)))


def _clause(meaning: Meaning) -> str:
    match meaning:
        case Exists(items=items, frame=frame):
            opening, case = EXISTS_OPENINGS[frame]
            return f"{opening} " + enumerate_phrases([noun_phrase(item, case) for item in items], "und")
        case Located(subject=subject, place=place, frame=frame):
            if frame == "place_first":
                return f"{PLACES[place]} ist {noun_phrase(subject, 'nom')}"  # verb second, subject after it
            return f"{noun_phrase(subject, 'nom')} ist {PLACES[place]}"
        case Related(subject=subject, relation=relation, landmark=landmark, frame=frame):
            where = f"{RELATIONS[relation]} {noun_phrase(landmark, 'dat')}"
            if frame == "landmark_first":
                return f"{where} ist {noun_phrase(subject, 'nom')}"
            verb = " ist" if frame == "clause" else ""
            return f"{noun_phrase(subject, 'nom')}{verb} {where}"
        case Compared(subject=subject, other=other, bigger=bigger):
            comparative = "größer" if bigger else "kleiner"
            return f"{noun_phrase(subject, 'nom')} ist {comparative} als {noun_phrase(other, 'nom')}"
        case Absent(missing=missing):
            return f"das Bild zeigt {noun_phrase(missing, 'acc', article='kein')}"
    raise TypeError(f"not a meaning: {meaning!r}")


GRAMMAR = Grammar(code="de", name="German", realise=realise)
