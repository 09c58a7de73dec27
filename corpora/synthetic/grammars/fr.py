"""French: lexicon and realiser with gender and number agreement, adjective placement and elision.

Colour adjectives follow the noun and size adjectives precede it ("un petit carré rouge"). Phrases are
built with full forms ("de le cercle") and a final spelling pass applies elision and contraction
("du cercle", "de l'étoile", "d'un cercle"), so no realiser branch has to remember them.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from corpora.synthetic.grammars.common import Grammar, enumerate_phrases, sentence
from corpora.synthetic.meaning import Absent, Compared, Exists, Located, Meaning, Mention, Related


class Noun(NamedTuple):
    feminine: bool
    singular: str
    plural: str


NOUNS: dict[str, Noun] = {
    "circle": Noun(False, "cercle", "cercles"),
    "square": Noun(False, "carré", "carrés"),
    "triangle": Noun(False, "triangle", "triangles"),
    "star": Noun(True, "étoile", "étoiles"),
    "diamond": Noun(False, "losange", "losanges"),
    "hexagon": Noun(False, "hexagone", "hexagones"),
    "cross": Noun(True, "croix", "croix"),
    "ellipse": Noun(True, "ellipse", "ellipses"),
    "heart": Noun(False, "cœur", "cœurs"),
    "pentagon": Noun(False, "pentagone", "pentagones"),
}


class Adjective(NamedTuple):
    forms: tuple[str, str, str, str]  # masculine singular, feminine singular, masculine plural, feminine plural
    before_noun: bool


ADJECTIVES: dict[str, Adjective] = {
    "red": Adjective(("rouge", "rouge", "rouges", "rouges"), False),
    "green": Adjective(("vert", "verte", "verts", "vertes"), False),
    "blue": Adjective(("bleu", "bleue", "bleus", "bleues"), False),
    "yellow": Adjective(("jaune", "jaune", "jaunes", "jaunes"), False),
    "orange": Adjective(("orange", "orange", "orange", "orange"), False),  # a noun of a fruit: invariable
    "purple": Adjective(("violet", "violette", "violets", "violettes"), False),
    "black": Adjective(("noir", "noire", "noirs", "noires"), False),
    "white": Adjective(("blanc", "blanche", "blancs", "blanches"), False),
    "small": Adjective(("petit", "petite", "petits", "petites"), True),
    "big": Adjective(("grand", "grande", "grands", "grandes"), True),
}

NUMBERS: dict[int, str] = {2: "deux", 3: "trois", 4: "quatre", 5: "cinq", 6: "six", 7: "sept", 8: "huit"}

RELATIONS: dict[str, str] = {
    "left_of": "à gauche de",
    "right_of": "à droite de",
    "above": "au-dessus de",
    "below": "sous",
    "next_to": "à côté de",
}

PLACES: dict[str, str] = {
    "top": "en haut de l'image",
    "bottom": "en bas de l'image",
    "left": "à gauche de l'image",
    "right": "à droite de l'image",
    "middle": "au milieu de l'image",
}

EXISTS_OPENINGS: dict[str, str] = {
    "there_is": "il y a",
    "picture_shows": "l'image montre",
    "picture_of": "une image avec",
}

_VOWEL_START = re.compile(r"^(?:[aeiouàâéèêëîïôûœ]|hexagone)", re.IGNORECASE)  # "hexagone" has a mute h


def noun_phrase(mention: Mention, *, determiner: str | None = None) -> str:
    """E.g. "un petit carré rouge", "la grande étoile bleue", "deux croix blanches" (before elision).

    Args:
        mention: what to name; ``count`` > 1 gives a numeral.
        determiner: overrides the article, e.g. "aucun" (agreed in gender here).
    """
    noun = NOUNS[mention.shape]
    plural = mention.count > 1
    slot = int(noun.feminine) + 2 * int(plural)
    if determiner is None:
        determiner = ("la" if noun.feminine else "le") if mention.definite else None
        determiner = determiner or (NUMBERS[mention.count] if plural else "une" if noun.feminine else "un")
    elif determiner == "aucun" and noun.feminine:
        determiner = "aucune"
    before = [ADJECTIVES[a].forms[slot] for a in (mention.size, mention.colour) if a and ADJECTIVES[a].before_noun]
    after = [ADJECTIVES[a].forms[slot] for a in (mention.size, mention.colour) if a and not ADJECTIVES[a].before_noun]
    return " ".join([determiner, *before, noun.plural if plural else noun.singular, *after])


def spell(text: str) -> str:
    """Apply elision and contraction: "le étoile" -> "l'étoile", "de le" -> "du", "que un" -> "qu'un"."""
    words = text.split()
    out: list[str] = []
    position = 0
    while position < len(words):
        word = words[position]
        following = words[position + 1] if position + 1 < len(words) else ""
        if word.lower() in ("le", "la") and _VOWEL_START.match(following):
            word, position = word[0] + "'" + following, position + 1  # elide before contracting: "de l'hexagone"
        previous = out[-1].lower() if out else ""
        if previous in ("de", "que", "ne") and _VOWEL_START.match(word):
            out[-1] = out[-1][:-1] + "'" + word
        elif previous == "de" and word in ("le", "les"):
            out[-1] = out[-1][0] + ("u" if word == "le" else "es")
        elif previous == "à" and word in ("le", "les"):
            out[-1] = ("A" if out[-1][0].isupper() else "a") + ("u" if word == "le" else "ux")
        else:
            out.append(word)
        position += 1
    return " ".join(out)


def realise(meaning: Meaning) -> str:
    """The French sentence for ``meaning``."""
    return sentence(spell(_clause(meaning)))


def _clause(meaning: Meaning) -> str:
    match meaning:
        case Exists(items=items, frame=frame):
            return f"{EXISTS_OPENINGS[frame]} " + enumerate_phrases([noun_phrase(item) for item in items], "et")
        case Located(subject=subject, place=place, frame=frame):
            if frame == "place_first":
                return f"{PLACES[place]}, il y a {noun_phrase(subject)}"
            return f"{noun_phrase(subject)} est {PLACES[place]}"
        case Related(subject=subject, relation=relation, landmark=landmark, frame=frame):
            where = f"{RELATIONS[relation]} {noun_phrase(landmark)}"
            if frame == "landmark_first":
                return f"{where}, il y a {noun_phrase(subject)}"
            verb = " est" if frame == "clause" else ""
            return f"{noun_phrase(subject)}{verb} {where}"
        case Compared(subject=subject, other=other, bigger=bigger):
            comparative = ADJECTIVES["big" if bigger else "small"].forms[int(NOUNS[subject.shape].feminine)]
            return f"{noun_phrase(subject)} est plus {comparative} que {noun_phrase(other)}"
        case Absent(missing=missing):
            return f"l'image ne montre {noun_phrase(missing, determiner='aucun')}"
    raise TypeError(f"not a meaning: {meaning!r}")


GRAMMAR = Grammar(code="fr", name="French", realise=realise)
