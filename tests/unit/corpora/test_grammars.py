"""The synthetic dataset's grammars: hand-checked phrases per language and agreement over the whole lexicon.

The expected genders and endings below are written out again on purpose, independently of the
grammar modules' own tables, so that a wrong table entry fails here instead of being compared to itself.
"""

from __future__ import annotations

import itertools
import re

import pytest

from corpora.synthetic import inventory
from corpora.synthetic.describe import caption_meaning, parallel_meaning
from corpora.synthetic.grammars import GRAMMARS, cs, de, en, fr
from corpora.synthetic.meaning import Absent, Compared, Exists, Located, Meaning, Mention, Related
from corpora.synthetic.scenes import sample_scene
from corpora.synthetic.streams import stream

SHAPES, COLOURS, SIZES = inventory.SHAPES, tuple(inventory.COLOURS), tuple(inventory.SIZES)


def _all_mentions() -> list[Mention]:
    """Every shape with every choice of colour/size (at least one of them), singular and indefinite."""
    choices = [(c, s) for c in (*COLOURS, None) for s in (*SIZES, None) if c or s]
    return [Mention(shape, colour, size) for shape in SHAPES for colour, size in choices]


def _sample_meanings(count: int) -> list[Meaning]:
    rng = stream(7, "grammar-test")
    meanings: list[Meaning] = []
    for index in range(count):
        scene = sample_scene(rng, image_size=224, min_objects=1, max_objects=8)
        meanings.append((caption_meaning if index % 2 else parallel_meaning)(rng, scene))
    return meanings


SAMPLED = _sample_meanings(2000)


@pytest.mark.parametrize("module", [en, de, fr, cs])
def test_every_grammar_covers_the_inventory(module) -> None:
    for concept in (*SHAPES, inventory.SHAPE_COVER):
        for choice in module.NOUN_CHOICES.get(concept, [concept]):
            assert getattr(choice, "word", choice) in module.NOUNS, (concept, choice)
    adjective_concepts = (*COLOURS, *SIZES, *inventory.COLOUR_COVERS)
    lexicon = getattr(module, "ADJECTIVES", None)  # English adjectives are words of their own, not stems
    for concept in adjective_concepts:
        for choice in module.ADJECTIVE_CHOICES.get(concept, [concept]):
            assert lexicon is None or getattr(choice, "word", choice) in lexicon, (concept, choice)
    assert set(module.RELATIONS) == set(inventory.RELATIONS)
    assert set(module.PLACES) == set(inventory.PLACES)
    assert set(module.NUMBERS) == set(range(2, inventory.MAX_OBJECTS + 1))


def test_registry_rows_match_their_modules() -> None:
    assert {code: grammar.code for code, grammar in GRAMMARS.items()} == {code: code for code in GRAMMARS}
    assert set(GRAMMARS) >= {"en", "de", "fr", "cs"}


@pytest.mark.parametrize("code", sorted(GRAMMARS))
def test_sentences_are_capitalised_single_spaced_and_of_caption_length(code: str) -> None:
    for meaning in SAMPLED:
        text = GRAMMARS[code].realise(meaning)
        assert text[0].isupper() and text.endswith(".") and not text.endswith(".."), text
        assert "  " not in text and "None" not in text, text
        assert 5 <= len(text.split()) <= 20, text


# ---------------------------------------------------------------- English


@pytest.mark.parametrize(
    ("mention", "expected"),
    [
        (Mention("circle", "orange"), "an orange circle"),
        (Mention("ellipse"), "an ellipse"),
        (Mention("ellipse", "red"), "a red ellipse"),
        (Mention("star", "white", "big"), "a big white star"),
        (Mention("cross", "green", count=2), "two green crosses"),
        (Mention("square", "black", definite=True), "the black square"),
    ],
)
def test_english_noun_phrases(mention: Mention, expected: str) -> None:
    assert en.noun_phrase(mention) == expected


def test_english_sentences() -> None:
    red, blue = Mention("circle", "red"), Mention("star", "blue")
    assert en.realise(Exists((Mention("circle", "red", count=2),))) == "There are two red circles."
    assert en.realise(Exists((red, Mention("heart", count=3, size="small")))) == (
        "There is a red circle and three small hearts."
    )
    assert en.realise(Related(red, "left_of", blue)) == "A red circle is to the left of a blue star."
    assert en.realise(Related(red, "above", blue, "landmark_first")) == "Above a blue star there is a red circle."
    assert en.realise(Absent(Mention("square", "green"))) == "The picture shows no green square."
    the_red, the_blue = Mention("circle", "red", definite=True), Mention("star", "blue", definite=True)
    assert en.realise(Compared(the_red, the_blue, True)) == "The red circle is bigger than the blue star."


# ---------------------------------------------------------------- German

GERMAN_GENDER = {"circle": "m", "star": "m", "diamond": "f", "ellipse": "f"}  # every other shape is neuter
GERMAN_ARTICLE = {  # (article, case) -> masculine, feminine, neuter
    ("indefinite", "nom"): ("ein", "eine", "ein"),
    ("indefinite", "acc"): ("einen", "eine", "ein"),
    ("indefinite", "dat"): ("einem", "einer", "einem"),
    ("definite", "nom"): ("der", "die", "das"),
    ("definite", "acc"): ("den", "die", "das"),
    ("definite", "dat"): ("dem", "der", "dem"),
}
GERMAN_ENDING = {  # (article, case) -> adjective ending for masculine, feminine, neuter
    ("indefinite", "nom"): ("er", "e", "es"),
    ("indefinite", "acc"): ("en", "e", "es"),
    ("indefinite", "dat"): ("en", "en", "en"),
    ("definite", "nom"): ("e", "e", "e"),
    ("definite", "acc"): ("en", "e", "e"),
    ("definite", "dat"): ("en", "en", "en"),
    ("none", "nom"): ("er", "e", "es"),
    ("none", "acc"): ("en", "e", "es"),
    ("none", "dat"): ("em", "er", "em"),
}


@pytest.mark.parametrize(
    ("mention", "case", "expected"),
    [
        (Mention("circle", "red"), "nom", "ein roter Kreis"),
        (Mention("diamond", "red"), "nom", "eine rote Raute"),
        (Mention("triangle", "red"), "nom", "ein rotes Dreieck"),
        (Mention("circle", "red"), "acc", "einen roten Kreis"),
        (Mention("circle", "red"), "dat", "einem roten Kreis"),
        (Mention("diamond", "blue"), "dat", "einer blauen Raute"),
        (Mention("star", "red", "small"), "dat", "einem kleinen roten Stern"),
        (Mention("circle", "red", definite=True), "nom", "der rote Kreis"),
        (Mention("circle", "red", definite=True), "dat", "dem roten Kreis"),
        (Mention("ellipse", "white", definite=True), "acc", "die weiße Ellipse"),
        (Mention("heart", "yellow", definite=True), "dat", "dem gelben Herzen"),
        (Mention("circle", "red", count=2), "nom", "zwei rote Kreise"),
        (Mention("circle", "red", count=2), "dat", "zwei roten Kreisen"),
        (Mention("square", "orange"), "nom", "ein orangefarbenes Quadrat"),
    ],
)
def test_german_noun_phrases(mention: Mention, case: str, expected: str) -> None:
    assert de.noun_phrase(mention, case) == expected


@pytest.mark.parametrize(
    ("case", "masculine", "feminine", "neuter"),
    [("nom", "roter Kreis", "rote Raute", "rotes Dreieck"), ("dat", "rotem Kreis", "roter Raute", "rotem Dreieck")],
)
def test_german_strong_declension_without_article(case: str, masculine: str, feminine: str, neuter: str) -> None:
    shapes = ("circle", "diamond", "triangle")
    phrases = [de.noun_phrase(Mention(shape, "red"), case, article="none") for shape in shapes]
    assert phrases == [masculine, feminine, neuter]


def test_german_sentences() -> None:
    red_circle, blue_diamond = Mention("circle", "red"), Mention("diamond", "blue")
    assert de.realise(Related(Mention("star", "blue"), "next_to", red_circle)) == (
        "Ein blauer Stern ist neben einem roten Kreis."
    )
    assert de.realise(Related(red_circle, "above", blue_diamond)) == "Ein roter Kreis ist über einer blauen Raute."
    assert de.realise(Related(red_circle, "left_of", Mention("star", size="small"), "phrase")) == (
        "Ein roter Kreis links von einem kleinen Stern."
    )
    definite = Mention("circle", "red", definite=True)
    assert de.realise(Related(Mention("triangle", "white"), "left_of", definite, "landmark_first")) == (
        "Links vom roten Kreis ist ein weißes Dreieck."
    )
    assert de.realise(Exists((red_circle, blue_diamond))) == "Es gibt einen roten Kreis und eine blaue Raute."
    assert de.realise(Exists((red_circle,), "picture_of")) == "Ein Bild mit einem roten Kreis."
    assert de.realise(Located(red_circle, "top", "place_first")) == "Oben im Bild ist ein roter Kreis."
    assert de.realise(Absent(Mention("circle", "green"))) == "Das Bild zeigt keinen grünen Kreis."
    assert de.realise(Compared(definite, Mention("diamond", "blue", definite=True), True)) == (
        "Der rote Kreis ist größer als die blaue Raute."
    )


@pytest.mark.parametrize(("article", "case"), sorted(GERMAN_ENDING))
def test_german_article_and_endings_agree_with_gender_for_every_phrase(article: str, case: str) -> None:
    for mention in _all_mentions():
        gender = "mfn".index(GERMAN_GENDER.get(mention.shape, "n"))
        words = de.noun_phrase(mention, case, article=article).split()
        if article != "none":
            assert words.pop(0) == GERMAN_ARTICLE[(article, case)][gender], (mention, case)
        *adjectives, noun = words
        assert noun[0].isupper() and all(adjective.islower() for adjective in adjectives), words
        assert all(a.endswith(GERMAN_ENDING[(article, case)][gender]) for a in adjectives), (mention, case, words)
        assert len(adjectives) == (mention.colour is not None) + (mention.size is not None)


def test_german_nouns_are_capitalised_in_every_sentence() -> None:
    nouns = {form.lower() for noun in de.NOUNS.values() for form in noun[1:]}
    for meaning in SAMPLED:
        text = de.realise(meaning)
        assert not [word for word in text.split() if word.strip(".,").lower() in nouns and word.islower()], text


# ---------------------------------------------------------------- French

FRENCH_FEMININE = {"star", "cross", "ellipse"}


@pytest.mark.parametrize(
    ("mention", "expected"),
    [
        (Mention("square", "red", "small"), "un petit carré rouge"),
        (Mention("star", "blue", "big"), "une grande étoile bleue"),
        (Mention("cross", "white"), "une croix blanche"),
        (Mention("circle", "white"), "un cercle blanc"),
        (Mention("star", "purple"), "une étoile violette"),
        (Mention("heart", "purple"), "un cœur violet"),
        (Mention("ellipse", "orange"), "une ellipse orange"),
        (Mention("star", "white", "small", count=2), "deux petites étoiles blanches"),
        (Mention("circle", "orange", count=3), "trois cercles orange"),
        (Mention("cross", "green", count=2), "deux croix vertes"),
    ],
)
def test_french_noun_phrases(mention: Mention, expected: str) -> None:
    assert fr.spell(fr.noun_phrase(mention)) == expected


def test_french_sentences_elide_and_contract() -> None:
    white_circle = Mention("circle", "white")
    assert fr.realise(Related(Mention("square", "red"), "next_to", white_circle)) == (
        "Un carré rouge est à côté d'un cercle blanc."
    )
    assert fr.realise(Related(white_circle, "left_of", Mention("circle", "red"), "phrase")) == (
        "Un cercle blanc à gauche d'un cercle rouge."
    )
    assert fr.realise(Related(white_circle, "above", Mention("star", "blue"))) == (
        "Un cercle blanc est au-dessus d'une étoile bleue."
    )
    definite = {shape: Mention(shape, "red", definite=True) for shape in ("circle", "cross", "hexagon", "star")}
    landmarks = {shape: fr.realise(Related(white_circle, "next_to", mention)) for shape, mention in definite.items()}
    assert landmarks["circle"].endswith("à côté du cercle rouge.")
    assert landmarks["cross"].endswith("à côté de la croix rouge.")
    assert landmarks["hexagon"].endswith("à côté de l'hexagone rouge.")
    assert landmarks["star"].endswith("à côté de l'étoile rouge.")
    assert fr.realise(Related(white_circle, "above", definite["star"], "landmark_first")) == (
        "Au-dessus de l'étoile rouge, il y a un cercle blanc."
    )
    assert fr.realise(Located(Mention("cross", "white"), "top")) == "Une croix blanche est en haut de l'image."
    assert fr.realise(Exists((white_circle,), "picture_shows")) == "L'image montre un cercle blanc."
    assert fr.realise(Absent(Mention("star", "green"))) == "L'image ne montre aucune étoile verte."
    assert fr.realise(Compared(definite["cross"], definite["star"], False)) == (
        "La croix rouge est plus petite que l'étoile rouge."
    )
    assert fr.realise(Compared(definite["circle"], Mention("ellipse", "blue", definite=True), True)) == (
        "Le cercle rouge est plus grand que l'ellipse bleue."
    )


@pytest.mark.parametrize("relation", inventory.RELATIONS)
def test_french_never_leaves_an_uncontracted_or_unelided_article(relation: str) -> None:
    forbidden = re.compile(r"\b(?:de|à) les?\b|\b(?:de|que|le|la) [aeiouéèêàâîôûœh]", re.IGNORECASE)
    for mention, definite in itertools.product(_all_mentions(), (False, True)):
        landmark = Mention(mention.shape, mention.colour, mention.size, definite=definite)
        for frame in ("clause", "landmark_first"):
            text = fr.realise(Related(Mention("circle", "red"), relation, landmark, frame))
            assert not forbidden.search(text), text
    for meaning in SAMPLED:
        assert not forbidden.search(fr.realise(meaning)), fr.realise(meaning)


def test_french_articles_and_colours_agree_with_gender() -> None:
    for mention in _all_mentions():
        words = fr.noun_phrase(mention).split()
        feminine = mention.shape in FRENCH_FEMININE
        assert words[0] == ("une" if feminine else "un"), words
        if mention.colour is not None:
            forms = {"green": ("vert", "verte"), "white": ("blanc", "blanche"), "purple": ("violet", "violette")}
            if mention.colour in forms:
                assert words[-1] == forms[mention.colour][feminine], words
        if mention.size is not None:
            assert words[1] in (("petit", "grand") if not feminine else ("petite", "grande")), words


# ---------------------------------------------------------------- Czech

CZECH_GENDER = {"star": "f", "ellipse": "f", "heart": "n"}  # every other shape is masculine inanimate
CZECH_ENDING = {  # case -> adjective ending for masculine inanimate, feminine, neuter
    "nom": ("ý", "á", "é"),
    "gen": ("ého", "é", "ého"),
    "acc": ("ý", "ou", "é"),
    "ins": ("ým", "ou", "ým"),
}


@pytest.mark.parametrize(
    ("mention", "case", "expected"),
    [
        (Mention("circle", "red"), "nom", "červený kruh"),
        (Mention("star", "blue"), "nom", "modrá hvězda"),
        (Mention("heart", "white"), "nom", "bílé srdce"),
        (Mention("circle", "red"), "gen", "červeného kruhu"),
        (Mention("star", "blue"), "ins", "modrou hvězdou"),
        (Mention("star", "blue"), "acc", "modrou hvězdu"),
        (Mention("square", "black", "small"), "ins", "malým černým čtvercem"),
        (Mention("heart", "yellow"), "gen", "žlutého srdce"),
        (Mention("circle", "red", count=2), "nom", "dva červené kruhy"),
        (Mention("star", "red", count=2), "nom", "dvě červené hvězdy"),
        (Mention("heart", "red", count=3), "acc", "tři červená srdce"),
        (Mention("circle", "red", count=5), "nom", "pět červených kruhů"),
        (Mention("star", "green", count=6), "acc", "šest zelených hvězd"),
    ],
)
def test_czech_noun_phrases(mention: Mention, case: str, expected: str) -> None:
    assert cs.noun_phrase(mention, case) == expected


def test_czech_sentences() -> None:
    red_circle, blue_star = Mention("circle", "red"), Mention("star", "blue")
    assert cs.realise(Related(blue_star, "next_to", red_circle)) == "Modrá hvězda je vedle červeného kruhu."
    assert cs.realise(Related(red_circle, "above", blue_star)) == "Červený kruh je nad modrou hvězdou."
    assert cs.realise(Related(red_circle, "left_of", Mention("heart", "white"), "phrase")) == (
        "Červený kruh nalevo od bílého srdce."
    )
    below = Related(red_circle, "below", blue_star, "landmark_first")
    assert cs.realise(below) == "Pod modrou hvězdou je červený kruh."
    assert cs.realise(Exists((Mention("circle", "red", count=2),))) == "Na obrázku jsou dva červené kruhy."
    assert cs.realise(Exists((Mention("circle", "red", count=5),))) == "Na obrázku je pět červených kruhů."
    assert cs.realise(Exists((blue_star,), "picture_shows")) == "Obrázek zachycuje modrou hvězdu."
    assert cs.realise(Exists((Mention("circle", "green"), blue_star), "picture_of")) == (
        "Obrázek se zeleným kruhem a modrou hvězdou."
    )
    assert cs.realise(Exists((red_circle,), "picture_of")) == "Obrázek s červeným kruhem."
    assert cs.realise(Absent(Mention("ellipse", "green"))) == "Na obrázku není žádná zelená elipsa."
    assert cs.realise(Compared(red_circle, blue_star, False)) == "Červený kruh je menší než modrá hvězda."


@pytest.mark.parametrize("case", sorted(CZECH_ENDING))
def test_czech_adjectives_agree_with_gender_and_case(case: str) -> None:
    for mention in _all_mentions():
        gender = "mfn".index(CZECH_GENDER.get(mention.shape, "m"))
        *adjectives, _ = cs.noun_phrase(mention, case).split()
        assert adjectives and all(a.endswith(CZECH_ENDING[case][gender]) for a in adjectives), (mention, case)


@pytest.mark.parametrize("count", range(2, inventory.MAX_OBJECTS + 1))
def test_czech_numerals_choose_plural_or_genitive_and_the_verb(count: int) -> None:
    for shape in SHAPES:
        text = cs.realise(Exists((Mention(shape, "red", count=count),)))
        verb, numeral, adjective = text.split()[2:5]
        assert verb == ("jsou" if count <= 4 else "je"), text
        assert adjective.endswith("ých" if count >= 5 else ("á" if CZECH_GENDER.get(shape) == "n" else "é")), text
        if count == 2:
            assert numeral == ("dva" if shape not in CZECH_GENDER else "dvě"), text
