"""Czech: lexicon and realiser with noun gender, hard-adjective agreement and prepositional case.

The shapes are masculine inanimate, feminine or neuter nouns. "vedle" and "nalevo/napravo od" govern
the genitive ("vedle červeného kruhu"), "nad"/"pod" the instrumental ("nad modrou hvězdou"). Numerals
2-4 take the nominative plural ("dva červené kruhy", verb "jsou"), 5 and more the genitive plural
("pět červených kruhů", verb "je"). Czech has no articles, so definiteness is not expressed.
"""

from __future__ import annotations

from typing import NamedTuple

from corpora.synthetic.grammars.common import Grammar, enumerate_phrases, sentence
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

RELATIONS: dict[str, tuple[str, str]] = {  # relation -> (preposition, case it governs)
    "left_of": ("nalevo od", "gen"),
    "right_of": ("napravo od", "gen"),
    "above": ("nad", "ins"),
    "below": ("pod", "ins"),
    "next_to": ("vedle", "gen"),
}

PLACES: dict[str, str] = {
    "top": "nahoře na obrázku",
    "bottom": "dole na obrázku",
    "left": "vlevo na obrázku",
    "right": "vpravo na obrázku",
    "middle": "uprostřed obrázku",
}


def noun_phrase(mention: Mention, case: str) -> str:
    """E.g. "červený kruh" (nom), "červeného kruhu" (gen), "modrou hvězdou" (ins), "pět červených kruhů".

    Args:
        mention: what to name; ``count`` > 1 is supported in the nominative and accusative only.
        case: "nom", "gen", "acc" or "ins".
    """
    noun = NOUNS[mention.shape]
    adjectives = [a for a in (mention.size, mention.colour) if a is not None]  # size before colour
    if mention.count == 1:
        words = [ADJECTIVES[a] + ENDINGS[case][noun.gender] for a in adjectives]
        return " ".join([*words, getattr(noun, case)])
    if case not in ("nom", "acc"):
        raise ValueError(f"numerals are only realised in the nominative and accusative, not {case!r}")
    form = "nom_plural" if mention.count < 5 else "gen_plural"  # "dva kruhy", but "pět kruhů"
    words = [ADJECTIVES[a] + ENDINGS[form][noun.gender] for a in adjectives]
    return " ".join([NUMBERS[mention.count][noun.gender], *words, getattr(noun, form)])


def _be(mention: Mention) -> str:
    """The verb "je" or "jsou" agreeing with a subject (numerals from 5 take the singular "je")."""
    return "jsou" if 2 <= mention.count <= 4 else "je"


def _with(phrase: str) -> str:
    """The preposition "s" becomes "se" before s, z, š, ž ("se zeleným kruhem")."""
    return ("se " if phrase[0] in "szšž" else "s ") + phrase


def realise(meaning: Meaning) -> str:
    """The Czech sentence for ``meaning``."""
    return sentence(_clause(meaning))


def _clause(meaning: Meaning) -> str:
    match meaning:
        case Exists(items=items, frame="there_is"):
            # The verb before a list agrees with the nearest item ("je kruh a dvě hvězdy").
            listed = enumerate_phrases([noun_phrase(item, "nom") for item in items], "a")
            return f"na obrázku {_be(items[0])} {listed}"
        case Exists(items=items, frame="picture_shows"):
            return "obrázek zachycuje " + enumerate_phrases([noun_phrase(item, "acc") for item in items], "a")
        case Exists(items=items, frame="picture_of"):
            return "obrázek " + _with(enumerate_phrases([noun_phrase(item, "ins") for item in items], "a"))
        case Located(subject=subject, place=place, frame=frame):
            if frame == "place_first":
                return f"{PLACES[place]} je {noun_phrase(subject, 'nom')}"
            return f"{noun_phrase(subject, 'nom')} je {PLACES[place]}"
        case Related(subject=subject, relation=relation, landmark=landmark, frame=frame):
            preposition, case = RELATIONS[relation]
            where = f"{preposition} {noun_phrase(landmark, case)}"
            if frame == "landmark_first":
                return f"{where} je {noun_phrase(subject, 'nom')}"
            verb = " je" if frame == "clause" else ""
            return f"{noun_phrase(subject, 'nom')}{verb} {where}"
        case Compared(subject=subject, other=other, bigger=bigger):
            comparative = "větší" if bigger else "menší"  # soft adjectives: one form for every gender
            return f"{noun_phrase(subject, 'nom')} je {comparative} než {noun_phrase(other, 'nom')}"
        case Absent(missing=missing):
            none = "žádn" + ENDINGS["nom"][NOUNS[missing.shape].gender]
            return f"na obrázku není {none} {noun_phrase(missing, 'nom')}"
    raise TypeError(f"not a meaning: {meaning!r}")


GRAMMAR = Grammar(code="cs", name="Czech", realise=realise)
