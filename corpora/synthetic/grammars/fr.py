"""French: lexicon and realiser with gender and number agreement, adjective placement and elision.

Colour adjectives follow the noun and size adjectives precede it ("un petit carré rouge"). Phrases are
built with full forms ("de le cercle") and a final spelling pass applies elision and contraction
("du cercle", "de l'étoile", "d'un cercle"), so no realiser branch has to remember them. Slots offer
their ways of saying a thing, most frequent first (see ``Wording``).
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
    "rhombe": Noun(False, "rhombe", "rhombes"),
    "ovale": Noun(False, "ovale", "ovales"),
    "rond": Noun(False, "rond", "ronds"),
    SHAPE_COVER: Noun(True, "forme", "formes"),
    "figure": Noun(True, "figure", "figures"),
}

# shape (or the cover term) -> keys of NOUNS; shapes not listed have the one entry of their own name
NOUN_CHOICES: dict[str, tuple[Choice, ...]] = {
    "diamond": words("diamond", formal("rhombe", 1.0)),
    "ellipse": words("ellipse", ("ovale", 0.35, 0.3)),
    "circle": words("circle", ("rond", 0.2, 0.05)),
    SHAPE_COVER: words(SHAPE_COVER, ("figure", 0.3, 0.2)),
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
    "dark": Adjective(("foncé", "foncée", "foncés", "foncées"), False),
    "light": Adjective(("clair", "claire", "clairs", "claires"), False),
    "gros": Adjective(("gros", "grosse", "gros", "grosses"), True),
    "mauve": Adjective(("mauve", "mauve", "mauves", "mauves"), False),
    "écarlate": Adjective(("écarlate", "écarlate", "écarlates", "écarlates"), False),
}

# colour, size or cover term -> keys of ADJECTIVES
ADJECTIVE_CHOICES: dict[str, tuple[Choice, ...]] = {
    "big": words("big", ("gros", 0.3, 0.1)),
    "purple": words("purple", ("mauve", 0.2, 0.1)),
    "red": words("red", formal("écarlate", 1.0)),
}

NUMBERS: dict[int, str] = {2: "deux", 3: "trois", 4: "quatre", 5: "cinq", 6: "six", 7: "sept", 8: "huit"}

RELATIONS: dict[str, tuple[Choice, ...]] = {
    "left_of": words("à gauche de"),
    "right_of": words("à droite de"),
    "above": words("au-dessus de"),
    "below": words("sous", ("en dessous de", 0.3, 0.3)),
    "next_to": words("à côté de", ("près de", 0.3, 0.2)),
}

PLACES: dict[str, tuple[Choice, ...]] = {
    "top": words("en haut de l'image", ("en haut", 0.3), formal("dans la partie supérieure de l'image", 1.0)),
    "bottom": words("en bas de l'image", ("en bas", 0.3), formal("dans la partie inférieure de l'image", 1.0)),
    "left": words("à gauche de l'image", ("sur la gauche", 0.3)),
    "right": words("à droite de l'image", ("sur la droite", 0.3)),
    "middle": words("au milieu de l'image", ("au centre de l'image", 0.4)),
}

EXISTS_OPENINGS: dict[str, tuple[Choice, ...]] = {
    "there_is": words("il y a", ("on voit", 0.4, 0.1)),
    "picture_shows": words("l'image montre", ("le dessin montre", 0.3), formal("l'image représente", 1.0)),
    "picture_of": words("une image avec", ("un dessin avec", 0.3)),
}

_VOWEL_START = re.compile(r"^(?:[aeiouàâéèêëîïôûœ]|hexagone)", re.IGNORECASE)  # "hexagone" has a mute h


def noun_phrase(mention: Mention, wording: Wording = PLAIN, *, determiner: str | None = None) -> str:
    """E.g. "un petit carré rouge", "la grande étoile bleue", "deux croix blanches" (before elision).

    Args:
        mention: what to name; ``count`` > 1 gives a numeral.
        determiner: overrides the article, e.g. "aucun" (agreed in gender here).
    """
    adjectives = [ADJECTIVES[key] for key in attribute_words(mention, wording, ADJECTIVE_CHOICES)]
    noun = NOUNS[noun_word(mention, wording, NOUN_CHOICES)]
    plural = mention.count > 1
    slot = int(noun.feminine) + 2 * int(plural)
    if determiner is None:
        determiner = ("la" if noun.feminine else "le") if mention.definite else None
        determiner = determiner or (NUMBERS[mention.count] if plural else "une" if noun.feminine else "un")
    elif determiner == "aucun" and noun.feminine:
        determiner = "aucune"
    before = [adjective.forms[slot] for adjective in adjectives if adjective.before_noun]
    after = [adjective.forms[slot] for adjective in adjectives if not adjective.before_noun]
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


def realise(meaning: Meaning, wording: Wording = PLAIN) -> str:
    """The French sentence for ``meaning``."""
    return sentence(spell(_clause(meaning, wording)))


def _clause(meaning: Meaning, wording: Wording) -> str:
    match meaning:
        case Exists(items=items, frame=frame):
            opening = wording.choose(EXISTS_OPENINGS[frame])
            return f"{opening} " + enumerate_phrases([noun_phrase(item, wording) for item in items], "et")
        case Located(subject=subject, place=place, frame=frame):
            where = wording.choose(PLACES[place])
            if frame == "place_first":
                return f"{where}, il y a {noun_phrase(subject, wording)}"
            return f"{noun_phrase(subject, wording)} est {where}"
        case Related(subject=subject, relation=relation, landmark=landmark, frame=frame):
            where = f"{wording.choose(RELATIONS[relation])} {noun_phrase(landmark, wording)}"
            if frame == "landmark_first":
                return f"{where}, il y a {noun_phrase(subject, wording)}"
            verb = " est" if frame == "clause" else ""
            return f"{noun_phrase(subject, wording)}{verb} {where}"
        case Compared(subject=subject, other=other, bigger=bigger):
            first = noun_phrase(subject, wording)
            feminine = first.split()[0] == "la"  # the subject is definite: its article tells its gender
            comparative = ADJECTIVES["big" if bigger else "small"].forms[int(feminine)]
            return f"{first} est plus {comparative} que {noun_phrase(other, wording)}"
        case Absent(missing=missing):
            return f"l'image ne montre {noun_phrase(missing, wording, determiner='aucun')}"
    raise TypeError(f"not a meaning: {meaning!r}")


GRAMMAR = Grammar(code="fr", name="French", realiser=realise)
