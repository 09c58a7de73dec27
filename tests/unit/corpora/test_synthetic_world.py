"""The built-in world's mechanisms: vague pivot captions settled by the image, paraphrase, register, noise.

German words and stems are written out here again, independently of the grammar modules' tables.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import random
import re
from pathlib import Path

import pytest

from common.files import read_lines
from corpora.languages import Languages
from corpora.synthetic import SyntheticConfig, generate
from corpora.synthetic.config import NoiseConfig, SplitCounts
from corpora.synthetic.dependence import image_dependent_words
from corpora.synthetic.describe import underspecify, vague_readings
from corpora.synthetic.grammars import GRAMMARS
from corpora.synthetic.grammars.common import Wording, formal, words
from corpora.synthetic.meaning import Exists, Mention, Related
from corpora.synthetic.noise import typo
from corpora.synthetic.scenes import Scene, SceneObject, sample_scene
from corpora.synthetic.streams import stream

LANGUAGES = Languages("en", ("de",))
WORLD = SyntheticConfig(image_size=96, splits=SplitCounts(150, 10, 60), parallel_pairs=SplitCounts(400, 10, 10))
GERMAN_COLOURS = {
    "rot": "red",
    "grün": "green",
    "blau": "blue",
    "gelb": "yellow",
    "orangefarben": "orange",
    "violett": "purple",
    "schwarz": "black",
    "weiß": "white",
}
GERMAN_SHAPES = {
    "Kreis": "circle",
    "Quadrat": "square",
    "Dreieck": "triangle",
    "Stern": "star",
    "Raute": "diamond",
    "Sechseck": "hexagon",
    "Kreuz": "cross",
    "Ellipse": "ellipse",
    "Oval": "ellipse",
    "Herz": "heart",
    "Fünfeck": "pentagon",
    "Pluszeichen": "cross",
}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    root = tmp_path_factory.mktemp("world") / "dataset"
    return root, generate(WORLD, root, seed=5, languages=LANGUAGES)


def _objects(root: Path) -> dict[str, list[dict]]:
    import pyarrow.parquet as pq

    rows: dict[str, list[dict]] = {}
    for row in pq.read_table(root / "objects.parquet").to_pylist():
        rows.setdefault(row["image_id"], []).append(row)
    return rows


def _lines_with_empty(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return handle.read().split("\n")[:-1]


def _scene(*labels: tuple[str, str, str]) -> Scene:
    objects = [
        SceneObject(
            shape, colour, size, (25.0 + 60 * i, 25.0), (15.0, 15.0), (10.0 + 60 * i, 10.0, 40.0 + 60 * i, 40.0)
        )
        for i, (shape, colour, size) in enumerate(labels)
    ]
    return Scene(224, tuple(objects))


# ---------------------------------------------------------------- vague pivot, exact target


def test_a_vague_reading_is_allowed_only_where_the_image_settles_it() -> None:
    alone = _scene(("circle", "blue", "big"), ("star", "red", "small"))
    assert vague_readings(alone, Mention("circle", "blue")) == ["colour", "shape"]
    two_dark_circles = _scene(("circle", "blue", "big"), ("circle", "black", "small"))
    assert vague_readings(two_dark_circles, Mention("circle", "blue")) == ["shape"]  # "a dark circle" fits both
    two_blue = _scene(("circle", "blue", "big"), ("star", "blue", "small"))
    assert vague_readings(two_blue, Mention("circle", "blue")) == ["colour"]  # "a blue shape" fits both
    assert vague_readings(two_blue, Mention("circle", "blue", "big")) == ["colour", "shape"]  # size tells them apart
    assert vague_readings(alone, Mention("star", "red")) == ["shape"]  # red has no cover term


def test_every_mention_the_image_settles_is_left_vague_with_the_configured_chance() -> None:
    scene = _scene(("circle", "blue", "big"), ("star", "red", "small"), ("square", "blue", "small"))
    # "a big dark circle" or "a big blue shape" (the other blue object is small); the star only "a red shape"
    meaning = Related(Mention("circle", "blue", "big"), "next_to", Mention("star", "red"))
    assert underspecify(random.Random(0), scene, meaning, 0.0) == meaning
    every = underspecify(random.Random(0), scene, meaning, 1.0)
    assert isinstance(every, Related) and every.subject.vague in ("colour", "shape") and every.landmark.vague == "shape"
    draws = 4000
    marked = [underspecify(random.Random(seed), scene, meaning, 0.3) for seed in range(draws)]
    subject = [m.subject.vague is not None for m in marked if isinstance(m, Related)]
    landmark = [m.landmark.vague is not None for m in marked if isinstance(m, Related)]
    both = sum(first and second for first, second in zip(subject, landmark, strict=True))
    # each mention on its own: 0.3 +- 4 standard errors (0.0072); both: 0.09, as for independent draws
    assert abs(sum(subject) / draws - 0.3) < 0.03 and abs(sum(landmark) / draws - 0.3) < 0.03
    assert abs(both / draws - 0.09) < 0.02


def test_the_pivot_says_the_cover_term_and_the_target_the_exact_words() -> None:
    blue = Exists((Mention("circle", "blue", vague="colour"),))
    red = Exists((Mention("circle", "red", vague="shape"),))
    vague = Wording(underspecify=True)
    assert GRAMMARS["en"].realise(blue, vague) == "There is a dark circle."
    assert GRAMMARS["en"].realise(red, vague) == "There is a red shape."
    assert GRAMMARS["en"].realise(blue) == "There is a blue circle."  # the pivot's words when it is not vague
    assert GRAMMARS["de"].realise(blue, vague) == "Es gibt einen dunklen Kreis."
    assert GRAMMARS["de"].realise(red) == "Es gibt einen roten Kreis."
    assert image_dependent_words(GRAMMARS["de"], blue, Wording()) == ["blauen"]
    # the shape decides the noun and, through its gender, the article and the ending ("eine rote Raute")
    assert image_dependent_words(GRAMMARS["de"], red, Wording()) == ["einen", "roten", "Kreis"]
    assert image_dependent_words(GRAMMARS["de"], red, vague) == []
    related = Related(Mention("star", "white", vague="colour"), "next_to", Mention("circle", "red"))
    assert image_dependent_words(GRAMMARS["de"], related, Wording()) == ["weißer"]


def test_image_dependent_words_are_recorded_exactly_where_the_pivot_is_vague(world) -> None:
    root, summary = world
    cover = re.compile(r"\b(dark|light|shapes?|figures?)\b")
    marked = 0
    for split in ("train", "val", "test"):
        english = read_lines(root / "task1" / "raw" / f"{split}.en.gz")
        german = read_lines(root / "task1" / "raw" / f"{split}.de.gz")
        dependent = _lines_with_empty(root / "task1" / "image_dependent" / f"{split}.de.gz")
        assert len(dependent) == len(german)
        assert not any(_lines_with_empty(root / "task1" / "image_dependent" / f"{split}.en.gz"))
        for en, de, words_ in zip(english, german, dependent, strict=True):
            assert bool(cover.search(en)) == bool(words_), (en, de, words_)
            assert all(word in de.rstrip(".").replace(",", "").split() for word in words_.split()), (de, words_)
            marked += bool(words_)
    assert marked == summary.vague_translations
    assert 0.25 * 220 <= marked <= 0.6 * 220  # each mention the image settles vague with chance 0.5


def test_contrastive_translations_are_each_true_of_their_own_image(world) -> None:
    root, summary = world
    objects = _objects(root)
    items = [json.loads(line) for line in read_lines(root / "task1" / "contrastive" / "test.en-de.jsonl")]
    assert len(items) == summary.contrastive_items["en-de"] >= 20
    for item in items:
        assert item["translations"][0] != item["translations"][1] and item["image_ids"][0] != item["image_ids"][1]
        assert re.search(r"\b(dark|light|shape)\b", item["source"]), item
        for image_id, translation in zip(item["image_ids"], item["translations"], strict=True):
            *_, adjective, noun = translation.rstrip(".").split()
            colour = next(c for stem, c in GERMAN_COLOURS.items() if adjective.startswith(stem))
            rows = objects[image_id]
            assert any(r["shape"] == GERMAN_SHAPES[noun] and r["colour"] == colour for r in rows), (item, rows)


# ---------------------------------------------------------------- paraphrase and register


def test_wording_takes_the_same_choices_again_and_the_first_choice_without_a_seed() -> None:
    slot = words("big", ("large", 1.0))
    wording = Wording(11)
    first = [wording.choose(slot) for _ in range(50)]
    again = wording.again()
    assert [again.choose(slot) for _ in range(50)] == first and set(first) == {"big", "large"}
    assert {Wording().choose(slot) for _ in range(10)} == {"big"}
    assert {Wording(3, paraphrase=0.0).choose(slot) for _ in range(10)} == {"big"}
    assert {Wording(3, register="parallel").choose(words("red", ("scarlet", 0.0, 5.0))) for _ in range(3)} == {
        "scarlet"
    }


def test_an_own_style_never_says_the_most_common_wording_where_the_register_offers_another() -> None:
    """Another corpus's annotators: "large", never "big"; a slot without another caption word keeps its word; the
    remaining choices keep their order and weights; ``again`` takes the same choices."""
    styled = Wording(11, own_style=True)
    assert {styled.choose(words("big", ("large", 0.35))) for _ in range(50)} == {"large"}
    assert {styled.choose(words("diamond", ("rhombus", 0.0, 0.5))) for _ in range(20)} == {"diamond"}
    assert {styled.choose(words("there")) for _ in range(5)} == {"there"}
    slot = words("a picture of", ("an image of", 0.4), ("a drawing of", 0.2))
    draws = [Wording(seed, own_style=True).choose(slot) for seed in range(3000)]
    assert set(draws) == {"an image of", "a drawing of"}
    assert draws.count("a drawing of") / len(draws) == pytest.approx(0.2 / 0.6, abs=0.03)  # 0.2 against 0.4
    styled = Wording(4, own_style=True)
    first = [styled.choose(slot) for _ in range(30)]
    again = styled.again()
    assert again.own_style and [again.choose(slot) for _ in range(30)] == first


def test_synonym_frequencies_follow_their_weights(world) -> None:
    root, _ = world
    texts = [line for n in range(1, 6) for line in read_lines(root / "task2" / "raw" / f"train.{n}.en.gz")]
    big, large = (sum(len(re.findall(rf"\b{w}\b", t)) for t in texts) for w in ("big", "large"))
    assert big + large > 200
    assert large / (big + large) == pytest.approx(0.35 / 1.35, abs=0.06)


def test_without_paraphrase_every_meaning_has_one_wording(tmp_path: Path) -> None:
    config = dataclasses.replace(WORLD, paraphrase=0.0, splits=SplitCounts(40, 0, 0))
    generate(config, tmp_path / "plain", seed=5, languages=LANGUAGES)
    texts = [
        line for n in range(1, 6) for line in read_lines(tmp_path / "plain" / "task2" / "raw" / f"train.{n}.en.gz")
    ]
    assert not any(re.search(r"\b(large|little|oval|beside|image|drawing|figure)\b", t) for t in texts)


def test_two_wordings_of_one_meaning_usually_differ() -> None:
    rng = stream(1, "wordings")
    from corpora.synthetic.describe import caption_meaning

    differ = 0
    for _ in range(300):
        meaning = caption_meaning(rng, sample_scene(rng, image_size=224, min_objects=1, max_objects=4))
        a, b = (GRAMMARS["en"].realise(meaning, Wording(rng.randrange(2**53))) for _ in range(2))
        differ += a != b
    assert differ / 300 >= 0.3  # a back-translation can change the wording of its source


def test_the_parallel_corpus_has_words_that_captions_never_use(world) -> None:
    root, _ = world
    parallel = " ".join(read_lines(root / "parallel" / "en-de" / "train.en.gz"))
    captions = " ".join(line for n in range(1, 6) for line in read_lines(root / "task2" / "raw" / f"train.{n}.en.gz"))
    captions += " ".join(read_lines(root / "task1" / "raw" / "train.en.gz"))
    register_words = ("rhombus", "beneath", "depicts", "scarlet", "upper part")
    assert all(word not in captions for word in register_words)
    assert sum(word in parallel for word in register_words) >= 4


def test_formal_parallel_sentences_say_the_formal_words_and_nothing_else_does() -> None:
    slot = words("red", formal("scarlet", 0.6), formal("crimson", 0.4, uncommon=True))
    said = [Wording(seed, register="parallel", formal=True).choose(slot) for seed in range(3000)]
    assert set(said) == {"scarlet", "crimson"}
    assert said.count("crimson") / len(said) == pytest.approx(0.4, abs=0.03)
    assert {Wording(seed, register="parallel").choose(slot) for seed in range(300)} == {"red"}  # plain sentences
    assert {Wording(seed, formal=True).choose(slot) for seed in range(300)} == {"red"}  # captions are never formal
    plain = words("big", ("large", 0.35, 0.4))  # a slot without formal words keeps its parallel weights
    assert {Wording(seed, register="parallel", formal=True).choose(plain) for seed in range(300)} == {"big", "large"}


def test_an_uncommon_share_of_caption_slots_say_their_uncommon_word() -> None:
    slot = words("red", formal("scarlet", 0.6), formal("crimson", 0.4, uncommon=True))
    said = [Wording(seed, uncommon=0.1).choose(slot) for seed in range(4000)]
    assert set(said) == {"red", "crimson"}
    assert said.count("crimson") / len(said) == pytest.approx(0.1, abs=0.015)
    plain = words("big", ("large", 0.35))  # slots without an uncommon word take the same choices as before
    assert [Wording(seed, uncommon=0.3).choose(plain) for seed in range(300)] == [
        Wording(seed).choose(plain) for seed in range(300)
    ]
    wording = Wording(8, uncommon=0.5)
    first = [wording.choose(slot) for _ in range(40)]
    replay = wording.again()
    assert replay.uncommon == 0.5 and [replay.choose(slot) for _ in range(40)] == first


FORMAL_PAIRS = {  # English words of a formal sentence (formal or uncommon) -> the German formal stem
    ("scarlet", "crimson"): "scharlachrot",
    ("amber", "golden"): "goldgelb",
    ("rhombus", "lozenge"): "Rhomb",
    ("enormous", "huge"): "riesig",
    ("minuscule", "tiny"): "winzig",
    ("depicts", "portrays"): "Darstellung",
    ("adjacent", "alongside"): "seitlich",
}


def test_a_formal_pair_says_its_formal_words_in_both_languages(world) -> None:
    """News text and its translation share their register: "scarlet" or "crimson" in the English exactly where the
    German says "scharlachrot" (so pre-training learns to translate the one into the other)."""
    root, _ = world
    english = read_lines(root / "parallel" / "en-de" / "train.en.gz")
    german = read_lines(root / "parallel" / "en-de" / "train.de.gz")
    for english_words, stem in FORMAL_PAIRS.items():
        in_english = [any(re.search(rf"\b{w}", line) for w in english_words) for line in english]  # "rhombuses" too
        in_german = [stem in line for line in german]
        assert in_english == in_german, (english_words, stem)
        if stem != "seitlich":  # few of the 400 pairs relate two objects as next to each other
            assert sum(in_english) >= 5, english_words
    formal_share = sum(any(stem in line for stem in FORMAL_PAIRS.values()) for line in german) / len(german)
    assert 0.1 < formal_share <= WORLD.formal  # a formal sentence without a slot that has a formal word looks plain


UNCOMMON = ("crimson", "golden", "lozenge", "huge", "tiny", "portrays", "alongside")
FORMAL_ONLY = ("scarlet", "amber", "rhombus", "enormous", "minuscule", "depicts", "adjacent", "beneath", "upper part")


def test_uncommon_words_are_the_long_tail_of_the_comparable_pivot_captions_only(tmp_path: Path) -> None:
    """``uncommon`` changes the English comparable captions alone: the translation captions (the MMT's fine-tuning
    data and test references) and the German captions stay the same bytes, and no caption says a formal-only word."""
    plain = dataclasses.replace(WORLD, parallel_pairs=SplitCounts(0, 0, 0))
    tail = dataclasses.replace(plain, uncommon=0.3)
    generate(plain, tmp_path / "plain", seed=5, languages=LANGUAGES)
    generate(tail, tmp_path / "tail", seed=5, languages=LANGUAGES)
    for split in ("train", "val", "test"):
        for lang in LANGUAGES.all:
            name = Path("task1") / "raw" / f"{split}.{lang}.gz"
            assert read_lines(tmp_path / "plain" / name) == read_lines(tmp_path / "tail" / name)
        for n in range(1, 6):
            name = Path("task2") / "raw" / f"{split}.{n}.de.gz"
            assert read_lines(tmp_path / "plain" / name) == read_lines(tmp_path / "tail" / name)

    def comparable(world: str) -> str:
        return " ".join(
            line
            for n in range(1, 6)
            for split in ("train", "val", "test")
            for line in read_lines(tmp_path / world / "task2" / "raw" / f"{split}.{n}.en.gz")
        )

    before, after = comparable("plain"), comparable("tail")
    count = lambda text, word: len(re.findall(rf"\b{word}\b", text))  # noqa: E731
    assert all(count(before, word) == 0 for word in UNCOMMON)
    assert all(count(after, word) > 0 for word in UNCOMMON if word != "alongside")
    assert not any(re.search(rf"\b{word}\b", before + after) for word in FORMAL_ONLY)
    crimson, red = count(after, "crimson"), count(after, "red")
    assert crimson + red > 100 and crimson / (crimson + red) == pytest.approx(0.3, abs=0.08)


# ---------------------------------------------------------------- annotator noise and look-alikes


def test_noise_changes_the_configured_share_of_comparable_captions_and_nothing_else(tmp_path: Path) -> None:
    clean = dataclasses.replace(WORLD, noise=NoiseConfig(0.0, 0.0, 0.0), parallel_pairs=SplitCounts(0, 0, 0))
    noisy = dataclasses.replace(clean, noise=NoiseConfig(0.1, 0.05, 0.1))
    generate(clean, tmp_path / "clean", seed=5, languages=LANGUAGES)
    summary = generate(noisy, tmp_path / "noisy", seed=5, languages=LANGUAGES)
    for lang in LANGUAGES.all:
        for split in ("train", "test"):
            name = Path("task1") / "raw" / f"{split}.{lang}.gz"
            assert read_lines(tmp_path / "clean" / name) == read_lines(tmp_path / "noisy" / name)
    changed = total = 0
    for lang in LANGUAGES.all:
        for n in range(1, 6):
            for split in ("train", "val", "test"):
                name = Path("task2") / "raw" / f"{split}.{n}.{lang}.gz"
                pairs = list(
                    zip(read_lines(tmp_path / "clean" / name), read_lines(tmp_path / "noisy" / name), strict=True)
                )
                changed += sum(a != b for a, b in pairs)
                total += len(pairs)
    assert changed == sum(summary.noisy_captions.values())
    assert summary.noisy_captions["wrong_colour"] / total == pytest.approx(
        0.1, abs=0.025
    )  # most mentions have a colour
    assert summary.noisy_captions["typo"] / total == pytest.approx(0.1, abs=0.025)
    assert 0 < summary.noisy_captions["missed_object"] / total <= 0.05  # only lists and counts can miss one


def test_a_typo_swaps_two_neighbouring_letters_of_one_long_word() -> None:
    rng = random.Random(2)
    text = "The picture shows a red circle."
    mistyped = typo(rng, text)
    assert mistyped is not None and mistyped != text and sorted(mistyped) == sorted(text)
    changed = [(a, b) for a, b in zip(text.split(), mistyped.split(), strict=True) if a != b]
    assert len(changed) == 1 and len(changed[0][0]) >= 5
    assert typo(rng, "A red box.") is None


def test_look_alikes_share_the_shape_or_the_colour_of_an_earlier_object() -> None:
    rng = stream(2, "look-alike")
    for _ in range(100):
        scene = sample_scene(rng, image_size=224, min_objects=2, max_objects=6, look_alike=1.0)
        for index, obj in enumerate(scene.objects[1:], start=1):
            earlier = scene.objects[:index]
            assert any(obj.shape == o.shape or obj.colour == o.colour for o in earlier), scene
