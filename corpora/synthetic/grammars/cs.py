"""Czech: lexicon and realiser with noun gender, hard-adjective agreement and prepositional case.

The shapes are masculine inanimate, feminine or neuter nouns. "vedle" and "nalevo/napravo od" govern
the genitive ("vedle červeného kruhu"), "nad"/"pod" the instrumental ("nad modrou hvězdou"). Numerals
2-4 take the nominative plural ("dva červené kruhy", verb "jsou"), 5 and more the genitive plural
("pět červených kruhů", verb "je"). Czech has no articles, so definiteness is not expressed. Slots offer
their ways of saying a thing, most frequent first (see ``Wording``).
"""

from __future__ import annotations

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

MASCULINE, FEMININE, NEUTER = 0, 1, 2  # masculine here is always inanimate (shapes are things)


class Noun(NamedTuple):
    gender: int
    nom: str
    gen: str
    acc: str
    ins: str
    nom_plural: str  # = accusative plural for inanimate, feminine and neuter nouns
    gen_plural: str


NOUNS: dict[str, Noun] = {
    "circle": Noun(MASCULINE, "kruh", "kruhu", "kruh", "kruhem", "kruhy", "kruhů"),
    "square": Noun(MASCULINE, "čtverec", "čtverce", "čtverec", "čtvercem", "čtverce", "čtverců"),
    "triangle": Noun(
        MASCULINE, "trojúhelník", "trojúhelníku", "trojúhelník", "trojúhelníkem", "trojúhelníky", "trojúhelníků"
    ),
    "diamond": Noun(
        MASCULINE, "kosočtverec", "kosočtverce", "kosočtverec", "kosočtvercem", "kosočtverce", "kosočtverců"
    ),
    "hexagon": Noun(
        MASCULINE, "šestiúhelník", "šestiúhelníku", "šestiúhelník", "šestiúhelníkem", "šestiúhelníky", "šestiúhelníků"
    ),
    "pentagon": Noun(
        MASCULINE, "pětiúhelník", "pětiúhelníku", "pětiúhelník", "pětiúhelníkem", "pětiúhelníky", "pětiúhelníků"
    ),
    "cross": Noun(MASCULINE, "kříž", "kříže", "kříž", "křížem", "kříže", "křížů"),
    "star": Noun(FEMININE, "hvězda", "hvězdy", "hvězdu", "hvězdou", "hvězdy", "hvězd"),
    "ellipse": Noun(FEMININE, "elipsa", "elipsy", "elipsu", "elipsou", "elipsy", "elips"),
    "heart": Noun(NEUTER, "srdce", "srdce", "srdce", "srdcem", "srdce", "srdcí"),
    "ovál": Noun(MASCULINE, "ovál", "oválu", "ovál", "oválem", "ovály", "oválů"),
    "routa": Noun(FEMININE, "routa", "routy", "routu", "routou", "routy", "rout"),
    SHAPE_COVER: Noun(MASCULINE, "tvar", "tvaru", "tvar", "tvarem", "tvary", "tvarů"),
    "útvar": Noun(MASCULINE, "útvar", "útvaru", "útvar", "útvarem", "útvary", "útvarů"),
}

# shape (or the cover term) -> keys of NOUNS; shapes not listed have the one entry of their own name
NOUN_CHOICES: dict[str, tuple[Choice, ...]] = {
    "ellipse": words("ellipse", ("ovál", 0.35, 0.3)),
    "diamond": words("diamond", ("routa", 0.2, 0.1)),
    SHAPE_COVER: words(SHAPE_COVER, ("útvar", 0.3, 0.2)),
}

# Stems of hard adjectives ("červený" = "červen" + "ý"); all colour and size words here decline alike.
ADJECTIVES: dict[str, str] = {
    "red": "červen",
    "green": "zelen",
    "blue": "modr",
    "yellow": "žlut",
    "orange": "oranžov",
    "purple": "fialov",
    "black": "čern",
    "white": "bíl",
    "small": "mal",
    "big": "velk",
    "dark": "tmav",
    "light": "světl",
    "drobn": "drobn",
    "nachov": "nachov",
}

# colour, size or cover term -> keys of ADJECTIVES
ADJECTIVE_CHOICES: dict[str, tuple[Choice, ...]] = {
    "small": words("small", ("drobn", 0.25, 0.1)),
    "red": words("red", formal("nachov", 1.0)),
}

# Hard adjective endings: case -> (masculine inanimate, feminine, neuter)
ENDINGS: dict[str, tuple[str, str, str]] = {
    "nom": ("ý", "á", "é"),
    "gen": ("ého", "é", "ého"),
    "acc": ("ý", "ou", "é"),
    "ins": ("ým", "ou", "ým"),
    "nom_plural": ("é", "é", "á"),
    "gen_plural": ("ých", "ých", "ých"),
}

NUMBERS: dict[int, tuple[str, str, str]] = {  # nominative = accusative, by gender
    2: ("dva", "dvě", "dvě"),
    3: ("tři", "tři", "tři"),
    4: ("čtyři", "čtyři", "čtyři"),
    5: ("pět", "pět", "pět"),
    6: ("šest", "šest", "šest"),
    7: ("sedm", "sedm", "sedm"),
    8: ("osm", "osm", "osm"),
}

RELATIONS: dict[str, tuple[tuple[Choice, ...], str]] = {  # relation -> (prepositions, case they govern)
    "left_of": (words("nalevo od", ("vlevo od", 0.4, 0.2)), "gen"),
    "right_of": (words("napravo od", ("vpravo od", 0.4, 0.2)), "gen"),
    "above": (words("nad"), "ins"),
    "below": (words("pod"), "ins"),
    "next_to": (words("vedle", ("u", 0.2, 0.1)), "gen"),
}

PLACES: dict[str, tuple[Choice, ...]] = {
    "top": words("nahoře na obrázku", ("v horní části obrázku", 0.3, 0.5)),
    "bottom": words("dole na obrázku", ("v dolní části obrázku", 0.3, 0.5)),
    "left": words("vlevo na obrázku", ("na levé straně obrázku", 0.3, 0.5)),
    "right": words("vpravo na obrázku", ("na pravé straně obrázku", 0.3, 0.5)),
    "middle": words("uprostřed obrázku", ("ve středu obrázku", 0.3, 0.3)),
}

SHOWS: tuple[Choice, ...] = words("obrázek zachycuje", ("obrázek ukazuje", 0.4), ("kresba zachycuje", 0.2))


def noun_phrase(mention: Mention, case: str, wording: Wording = PLAIN) -> str:
    """E.g. "červený kruh" (nom), "červeného kruhu" (gen), "modrou hvězdou" (ins), "pět červených kruhů".

    Args:
        mention: what to name; ``count`` > 1 is supported in the nominative and accusative only.
        case: "nom", "gen", "acc" or "ins".
        wording: the choices of words (a vague mention may be said by its cover term).
    """
    return _phrase(mention, case, wording)[0]


def _phrase(mention: Mention, case: str, wording: Wording) -> tuple[str, Noun]:
    """The noun phrase and the noun it was built on (whose gender a determiner before it agrees with)."""
    adjectives = attribute_words(mention, wording, ADJECTIVE_CHOICES)  # size first
    noun = NOUNS[noun_word(mention, wording, NOUN_CHOICES)]
    if mention.count == 1:
        said = [ADJECTIVES[a] + ENDINGS[case][noun.gender] for a in adjectives]
        return " ".join([*said, getattr(noun, case)]), noun
    if case not in ("nom", "acc"):
        raise ValueError(f"numerals are only realised in the nominative and accusative, not {case!r}")
    form = "nom_plural" if mention.count < 5 else "gen_plural"  # "dva kruhy", but "pět kruhů"
    said = [ADJECTIVES[a] + ENDINGS[form][noun.gender] for a in adjectives]
    return " ".join([NUMBERS[mention.count][noun.gender], *said, getattr(noun, form)]), noun


def _be(mention: Mention) -> str:
    """The verb "je" or "jsou" agreeing with a subject (numerals from 5 take the singular "je")."""
    return "jsou" if 2 <= mention.count <= 4 else "je"


def _with(phrase: str) -> str:
    """The preposition "s" becomes "se" before s, z, š, ž ("se zeleným kruhem")."""
    return ("se " if phrase[0] in "szšž" else "s ") + phrase


def realise(meaning: Meaning, wording: Wording = PLAIN) -> str:
    """The Czech sentence for ``meaning``."""
    return sentence(_clause(meaning, wording))


def _clause(meaning: Meaning, wording: Wording) -> str:
    match meaning:
        case Exists(items=items, frame="there_is"):
            # The verb before a list agrees with the nearest item ("je kruh a dvě hvězdy").
            listed = enumerate_phrases([noun_phrase(item, "nom", wording) for item in items], "a")
            return f"na obrázku {_be(items[0])} {listed}"
        case Exists(items=items, frame="picture_shows"):
            opening = wording.choose(SHOWS)
            return f"{opening} " + enumerate_phrases([noun_phrase(item, "acc", wording) for item in items], "a")
        case Exists(items=items, frame="picture_of"):
            listed = enumerate_phrases([noun_phrase(item, "ins", wording) for item in items], "a")
            return "obrázek " + _with(listed)
        case Located(subject=subject, place=place, frame=frame):
            where = wording.choose(PLACES[place])
            if frame == "place_first":
                return f"{where} je {noun_phrase(subject, 'nom', wording)}"
            return f"{noun_phrase(subject, 'nom', wording)} je {where}"
        case Related(subject=subject, relation=relation, landmark=landmark, frame=frame):
            prepositions, case = RELATIONS[relation]
            preposition = wording.choose(prepositions)
            where = f"{preposition} {noun_phrase(landmark, case, wording)}"
            if frame == "landmark_first":
                return f"{where} je {noun_phrase(subject, 'nom', wording)}"
            verb = " je" if frame == "clause" else ""
            return f"{noun_phrase(subject, 'nom', wording)}{verb} {where}"
        case Compared(subject=subject, other=other, bigger=bigger):
            comparative = "větší" if bigger else "menší"  # soft adjectives: one form for every gender
            first = noun_phrase(subject, "nom", wording)
            return f"{first} je {comparative} než {noun_phrase(other, 'nom', wording)}"
        case Absent(missing=missing):
            phrase, noun = _phrase(missing, "nom", wording)
            return f"na obrázku není žádn{ENDINGS['nom'][noun.gender]} {phrase}"
    raise TypeError(f"not a meaning: {meaning!r}")


GRAMMAR = Grammar(code="cs", name="Czech", realiser=realise)
