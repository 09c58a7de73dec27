"""The synthetic dataset generator: layout, determinism, boxes, truthful captions, validation, atomicity, and
the optional second, Flickr30K-like corpus."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from PIL import Image

import corpora.synthetic.generator as generator_module
from common.checks import SettingError
from common.config import build
from common.errors import InputError
from common.files import read_lines
from corpora.adapters import read_corpus
from corpora.karpathy import KarpathyConfig, read_karpathy
from corpora.languages import Languages
from corpora.synthetic import GenerationSummary, SyntheticConfig, generate
from corpora.synthetic.config import FlickrLikeConfig, NoiseConfig, ObjectRange, SplitCounts
from corpora.synthetic.inventory import COLOUR_COVERS, COLOURS

SPLITS = ("train", "val", "test")
# No annotator noise here, so every caption must be true of its image (noise has tests of its own).
SMALL = SyntheticConfig(
    image_size=96,
    splits=SplitCounts(12, 4, 4),
    parallel_pairs=SplitCounts(200, 20, 20),
    noise=NoiseConfig(0.0, 0.0, 0.0),
    uncommon=0.3,  # the truth test below reads the uncommon words too
)
SEED = 3
LANGUAGES = Languages("en", ("de", "fr", "cs"))
Box = tuple[float, float, float, float]


def _digests(root: Path) -> dict[str, str]:
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, GenerationSummary]:
    root = tmp_path_factory.mktemp("synthetic") / "dataset"
    return root, generate(SMALL, root, seed=SEED, languages=LANGUAGES)


@pytest.fixture(scope="module")
def objects(small: tuple[Path, GenerationSummary]) -> dict[str, list[dict]]:
    """image_id -> its object rows."""
    by_image: dict[str, list[dict]] = {}
    for row in pq.read_table(small[0] / "objects.parquet").to_pylist():
        by_image.setdefault(row["image_id"], []).append(row)
    return by_image


def test_same_config_gives_identical_bytes_and_another_seed_differs(small, tmp_path: Path) -> None:
    root, _ = small
    generate(SMALL, tmp_path / "again", seed=SEED, languages=LANGUAGES)
    assert _digests(tmp_path / "again") == _digests(root)
    generate(SMALL, tmp_path / "other", seed=4, languages=LANGUAGES)
    other = _digests(tmp_path / "other")
    assert other.keys() == _digests(root).keys()
    changed = [name for name, digest in _digests(root).items() if other[name] != digest]
    assert {"objects.parquet", "task1/raw/train.de.gz", "parallel/en-cs/train.cs.gz"} <= set(changed)
    assert sum(name.startswith("images/") for name in changed) == 20


def test_adding_a_language_leaves_images_and_other_languages_unchanged(small, tmp_path: Path) -> None:
    root, _ = small
    generate(SMALL, tmp_path / "two", seed=SEED, languages=Languages("en", ("de",)))
    fewer = _digests(tmp_path / "two")
    same = [name for name, digest in _digests(root).items() if fewer.get(name) == digest]
    assert sorted(same) == sorted(set(fewer) - {"meta.json"})  # meta.json records the language list
    assert "task2/raw/train.3.de.gz" in fewer and "images/syn000020.png" in fewer
    assert not any(".fr." in name or ".cs." in name for name in fewer)


def test_layout_and_line_counts(small) -> None:
    root, summary = small
    sizes = {"train": 12, "val": 4, "test": 4}
    pairs = {"train": 200, "val": 20, "test": 20}
    listed: list[str] = []
    for split in SPLITS:
        names = read_lines(root / "task1" / "image_splits" / f"{split}.txt")
        assert names == read_lines(root / "task2" / "image_splits" / f"{split}_images.txt")
        assert len(names) == sizes[split]
        listed += names
        for lang in LANGUAGES.all:
            assert len(read_lines(root / "task1" / "raw" / f"{split}.{lang}.gz")) == sizes[split]
            for n in range(1, 6):
                assert len(read_lines(root / "task2" / "raw" / f"{split}.{n}.{lang}.gz")) == sizes[split]
            if lang != "en":
                for side in ("en", lang):
                    assert len(read_lines(root / "parallel" / f"en-{lang}" / f"{split}.{side}.gz")) == pairs[split]
    assert listed == [f"syn{number:06d}.png" for number in range(1, 21)]  # global numbering, corpus order
    assert sorted(path.name for path in (root / "images").iterdir()) == listed
    assert not (root / "task2" / "raw" / "train.6.en.gz").exists()
    assert summary.images == sizes and summary.captions == {lang: 20 * 6 for lang in LANGUAGES.all}
    assert summary.parallel_pairs == {"en-de": 240, "en-fr": 240, "en-cs": 240}
    assert {"item": "images", "key": "val", "count": 4} in summary.as_rows()
    assert not (root / "flickr").exists() and summary.flickr_images == {"train": 0, "val": 0, "test": 0}
    assert not any(str(row["item"]).startswith("flickr") for row in summary.as_rows())


def test_meta_records_config_inventories_and_counts(small, objects) -> None:
    root, summary = small
    text = (root / "meta.json").read_text(encoding="utf-8")
    meta = json.loads(text)
    assert text == json.dumps(meta, sort_keys=True, indent=2, ensure_ascii=False) + "\n"
    assert meta["config"]["seed"] == 3 and meta["config"]["languages"] == ["en", "de", "fr", "cs"]
    inventory = meta["inventory"]
    assert len(inventory["shapes"]) >= 8 and len(inventory["colours"]) >= 8
    assert set(inventory["sizes"]) == {"small", "big"}
    assert meta["counts"]["objects"] == summary.objects == sum(len(rows) for rows in objects.values())


def test_objects_have_boxes_inside_the_image_and_distinct_sizes(small, objects) -> None:
    root, _ = small
    assert sorted(objects) == [f"syn{number:06d}" for number in range(1, 21)]
    longest = {"small": [], "big": []}
    for rows in objects.values():
        assert 1 <= len(rows) <= SMALL.objects_per_image.max
        assert [row["object"] for row in rows] == list(range(len(rows)))
        for row in rows:
            assert 0 <= row["x0"] < row["x1"] <= 96 and 0 <= row["y0"] < row["y1"] <= 96, row
            assert row["label"] == row["shape"] and row["attributes"] == [row["colour"], row["size"]]
            longest[row["size"]].append(max(row["x1"] - row["x0"], row["y1"] - row["y0"]))
    assert longest["small"] and longest["big"] and max(longest["small"]) * 1.4 < min(longest["big"])
    schema = pq.read_schema(root / "objects.parquet")
    assert str(schema.field("x0").type) == "float" and str(schema.field("object").type) == "int32"


def test_images_show_each_object_in_its_colour_at_its_box(small, objects) -> None:
    root, _ = small
    for image_id, rows in objects.items():
        image = Image.open(root / "images" / f"{image_id}.png")
        assert image.format == "PNG" and image.mode == "RGB" and image.size == (96, 96)
        pixels = np.asarray(image, dtype=int)
        for row in rows:
            cx, cy = (row["x0"] + row["x1"]) / 2, (row["y0"] + row["y1"]) / 2
            covered = any(o is not row and o["x0"] <= cx <= o["x1"] and o["y0"] <= cy <= o["y1"] for o in rows)
            if not covered:
                assert np.abs(pixels[int(cy), int(cx)] - COLOURS[row["colour"]]).max() <= 20, (image_id, row)


# ---------------------------------------------------------------- captions are true of the boxes

_COLOUR = "|".join([*COLOURS, *COLOUR_COVERS])
_NP = rf"(a|an|the|two|three|four|five|six|seven|eight) (?:(small|big) )?(?:({_COLOUR}) )?(\w+)"
# Every other wording of a caption -> the one the parser reads (written out here, not taken from the grammar).
_CANONICAL = [
    (r"\b(?:large|huge)\b", "big"),
    (r"\b(?:little|tiny)\b", "small"),
    (r"\bviolet\b", "purple"),
    (r"\bcrimson\b", "red"),
    (r"\bgolden\b", "yellow"),
    (r"\blozenge(s?)\b", r"diamond\1"),
    (r"\balongside\b", "next to"),
    (r"^the picture portrays", "the picture shows"),
    (r"\bovals?\b", lambda m: "ellipses" if m.group(0).endswith("s") else "ellipse"),
    (r"\bplus signs?\b", lambda m: "crosses" if m.group(0).endswith("s") else "cross"),
    (r"\bfigure(s?)\b", r"shape\1"),
    (r"\bbeside\b", "next to"),
    (r"\bover\b", "above"),
    (r"\bunder\b", "below"),
    (r"(?<!to the )\b(left|right) of\b(?! the (?:picture|image))", r"to the \1 of"),
    (r"^the (?:image|drawing) shows", "the picture shows"),
    (r"^(?:an image|a drawing) of", "a picture of"),
    (r"on the (left|right) of the image", r"on the \1 side of the picture"),
    (r"in the centre of the image", "in the middle of the picture"),
    (r"(at the top|at the bottom|in the middle) of the image", r"\1 of the picture"),
    (r"(at the top|at the bottom|in the middle|on the left|on the right)(?! side| of)", r"\1 of the picture"),
    (r"on the (left|right) of the picture", r"on the \1 side of the picture"),
]
_RELATION = "to the left of|to the right of|above|below|next to"
_PLACE = r"at the top|at the bottom|on the left side|on the right side|in the middle"
_NUMBERS = {"a": 1, "an": 1, "the": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8}


def _holds_loosely(relation: str, a: Box, b: Box, size: int) -> bool:
    """An independent, looser reading of each relation than the generator's own."""
    return {
        "to the left of": a[2] <= b[0],
        "to the right of": b[2] <= a[0],
        "above": a[3] <= b[1],
        "below": b[3] <= a[1],
        "next to": min(a[3], b[3]) > max(a[1], b[1]) and max(b[0] - a[2], a[0] - b[2]) < 0.25 * size,
    }[relation]


def _place_loosely(place: str, box: Box, size: int) -> bool:
    cx, cy = (box[0] + box[2]) / 2 / size, (box[1] + box[3]) / 2 / size
    return {
        "at the top": cy < 1 / 3,
        "at the bottom": cy > 2 / 3,
        "on the left side": cx < 1 / 3,
        "on the right side": cx > 2 / 3,
        "in the middle": 1 / 3 < cx < 2 / 3 and 1 / 3 < cy < 2 / 3,
    }[place]


def _referents(rows: list[dict], determiner: str, size: str | None, colour: str | None, noun: str) -> list[Box]:
    """Boxes that fit a parsed noun phrase ("shape" fits every shape, "dark" every dark colour); "the" must
    pick out exactly one object."""
    shape = noun[:-2] if noun.endswith("sses") else noun.rstrip("s") if determiner not in ("a", "an", "the") else noun
    colours = COLOUR_COVERS.get(colour or "", (colour,))
    fits = [
        r
        for r in rows
        if shape in ("shape", r["shape"]) and (colour is None or r["colour"] in colours) and size in (None, r["size"])
    ]
    if determiner == "the":
        assert len(fits) == 1, ("'the' is not unique", determiner, size, colour, noun)
    return [(r["x0"], r["y0"], r["x1"], r["y1"]) for r in fits]


def _check_caption(text: str, rows: list[dict], size: int) -> str:
    """Parse one English caption, assert what it says holds for ``rows``, and return its form."""
    sentence = text[0].lower() + text[1:-1]
    for pattern, canonical in _CANONICAL:
        sentence = re.sub(pattern, canonical, sentence)
    if match := re.fullmatch(rf"{_NP}(?: is)? ({_RELATION}) {_NP}", sentence):
        subjects, landmarks = _referents(rows, *match.groups()[:4]), _referents(rows, *match.groups()[5:])
        relation = match.group(5)
        assert any(_holds_loosely(relation, a, b, size) for a in subjects for b in landmarks if a != b), text
        return "relation"
    if match := re.fullmatch(rf"{_NP} is ({_PLACE}) of the picture|({_PLACE}) of the picture there is {_NP}", sentence):
        groups = match.groups()
        subject, place = (groups[:4], groups[4]) if groups[0] else (groups[6:], groups[5])
        assert any(_place_loosely(place, box, size) for box in _referents(rows, *subject)), text
        return "place"
    if match := re.fullmatch(r"(?:there (?:is|are)|the picture shows|a picture of) (.+)", sentence):
        for item in re.split(r", | and ", match.group(1)):
            parsed = re.fullmatch(_NP, item)
            assert parsed, (text, item)
            assert len(_referents(rows, *parsed.groups())) == _NUMBERS[parsed.group(1)], text  # counts are exact
        return "existence"
    raise AssertionError(f"caption in no known form: {text!r}")


def test_english_captions_are_true_of_the_boxes(small, objects) -> None:
    root, _ = small
    forms: list[str] = []
    texts: list[str] = []
    for split in SPLITS:
        image_ids = [name.removesuffix(".png") for name in read_lines(root / "task1" / "image_splits" / f"{split}.txt")]
        files = [root / "task1" / "raw" / f"{split}.en.gz"]
        files += [root / "task2" / "raw" / f"{split}.{n}.en.gz" for n in range(1, 6)]
        for path in files:
            for image_id, text in zip(image_ids, read_lines(path), strict=True):
                forms.append(_check_caption(text, objects[image_id], SMALL.image_size))
                texts.append(text)
    assert len(forms) == 120
    uncommon = sum(
        len(re.findall(r"\b(crimson|golden|lozenges?|huge|tiny|alongside|portrays)\b", text)) for text in texts
    )
    assert uncommon >= 5  # the long tail was read and checked too
    assert forms.count("relation") >= 10 and forms.count("place") >= 5 and forms.count("existence") >= 10


def test_comparable_captions_differ_from_each_other_and_from_the_translation(small) -> None:
    root, _ = small
    for lang in LANGUAGES.all:
        captions = [read_lines(root / "task1" / "raw" / f"train.{lang}.gz")]
        captions += [read_lines(root / "task2" / "raw" / f"train.{n}.{lang}.gz") for n in range(1, 6)]
        per_image = list(zip(*captions, strict=True))
        assert sum(len(set(texts)) >= 4 for texts in per_image) >= 10, lang


def test_parallel_corpus_uses_frames_that_captions_do_not(small) -> None:
    root, _ = small
    english = read_lines(root / "parallel" / "en-de" / "train.en.gz")
    german = read_lines(root / "parallel" / "en-de" / "train.de.gz")
    assert any(" than " in text for text in english) and any(" als " in text for text in german)
    assert any(text.startswith("The picture shows no ") for text in english)
    captions = set(read_lines(root / "task1" / "raw" / "train.en.gz"))
    assert len(set(english) & captions) < len(english) / 4


# ---------------------------------------------------------------- validation and atomic output


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"image_size": 63}, r"image_size: got 63, allowed: 64 to 4096"),
        ({"splits": SplitCounts(0, 1, 1)}, r"splits\.train: got 0, allowed: 1 to"),
        ({"splits": SplitCounts(1, -1, 1)}, r"splits\.val: got -1, allowed: 0 to"),
        ({"parallel_pairs": SplitCounts(1, -5, 1)}, r"parallel_pairs\.val: got -5, allowed: 0 to"),
        ({"comparable_per_image": 0}, r"comparable_per_image: got 0, allowed: 1 to 20"),
    ],
)
def test_config_errors_name_the_field_and_value(change: dict, message: str) -> None:
    with pytest.raises(SettingError, match=message):
        dataclasses.replace(SMALL, **change)


@pytest.mark.parametrize(
    ("low", "high", "message"),
    [(0, 2, r"min: got 0, allowed: 1 to 8"), (1, 9, r"max: got 9, allowed: 1 to 8"), (3, 2, r"max: got 2, allowed: 3")],
)
def test_object_range_is_checked(low: int, high: int, message: str) -> None:
    with pytest.raises(SettingError, match=message):
        ObjectRange(low, high)


@pytest.mark.parametrize(
    ("languages", "message"),
    [
        (
            Languages("en", ("de", "it")),
            r"languages: no grammar for \['it'\]; available grammars: \['cs', 'de', 'en', 'fr'\]",
        ),
        (Languages("it", ("de",)), r"no grammar for \['it'\]"),
    ],
)
def test_languages_without_a_grammar_are_refused_before_writing(
    tmp_path: Path, languages: Languages, message: str
) -> None:
    with pytest.raises(InputError, match=message):
        generate(SMALL, tmp_path / "out", seed=SEED, languages=languages)
    assert not (tmp_path / "out").exists()


def test_a_failed_run_leaves_nothing_and_keeps_an_earlier_dataset(tmp_path: Path, monkeypatch) -> None:
    calls = 0

    def failing_render(*args, **kwargs):
        nonlocal calls
        calls += 1
        if calls == 5:
            raise RuntimeError("killed while rendering")
        return real_render(*args, **kwargs)

    real_render = generator_module.render
    monkeypatch.setattr(generator_module, "render", failing_render)
    with pytest.raises(RuntimeError, match="killed"):
        generate(SMALL, tmp_path / "fresh", seed=SEED, languages=LANGUAGES)
    assert list(tmp_path.iterdir()) == []  # neither the folder nor a temporary sibling

    (tmp_path / "kept").mkdir()
    (tmp_path / "kept" / "marker.txt").write_text("earlier run")
    calls = 0
    with pytest.raises(RuntimeError, match="killed"):
        generate(SMALL, tmp_path / "kept", seed=SEED, languages=LANGUAGES)
    assert [path.name for path in (tmp_path / "kept").iterdir()] == ["marker.txt"]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["kept"]


def test_progress_reports_every_fifty_images_and_the_end(tmp_path: Path) -> None:
    reports: list[tuple[int, int]] = []
    config = SyntheticConfig(image_size=96, splits=SplitCounts(110, 0, 0), parallel_pairs=SplitCounts(0, 0, 0))
    generate(
        config,
        tmp_path / "out",
        seed=SEED,
        languages=LANGUAGES,
        progress=lambda done, total: reports.append((done, total)),
    )
    assert reports == [(50, 110), (100, 110), (110, 110)]
    assert read_lines(tmp_path / "out" / "task1" / "image_splits" / "val.txt") == []


# ---------------------------------------------------------------- the second, Flickr30K-like corpus

FLICKR_SPLITS = {"train": 6, "val": 2, "test": 3}
WITH_FLICKR = dataclasses.replace(SMALL, flickr=FlickrLikeConfig(SplitCounts(**FLICKR_SPLITS), captions_per_image=3))
FLICKR_IDS = [f"flk{number:06d}" for number in range(1, 12)]


@pytest.fixture(scope="module")
def flickr(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, GenerationSummary]:
    """SMALL (same seed and languages) plus the second corpus: the dataset folder and the summary."""
    root = tmp_path_factory.mktemp("synthetic") / "dataset"
    return root, generate(WITH_FLICKR, root, seed=SEED, languages=LANGUAGES)


@pytest.fixture(scope="module")
def flickr_objects(flickr: tuple[Path, GenerationSummary]) -> dict[str, list[dict]]:
    by_image: dict[str, list[dict]] = {}
    for row in pq.read_table(flickr[0] / "flickr" / "objects.parquet").to_pylist():
        by_image.setdefault(row["image_id"], []).append(row)
    return by_image


def test_second_corpus_is_off_by_default() -> None:
    assert SyntheticConfig().flickr == FlickrLikeConfig(SplitCounts(0, 0, 0), captions_per_image=5)
    assert not FlickrLikeConfig().enabled and FlickrLikeConfig(SplitCounts(1, 0, 0)).enabled


def test_karpathy_adapter_reads_the_second_corpus(flickr) -> None:
    root, _ = flickr
    corpus = read_corpus(
        "karpathy",
        KarpathyConfig(captions_per_image=3),
        root / "flickr" / "dataset_flickr30k.json",
        image_root=root / "flickr" / "images",
        languages=LANGUAGES,
        dataset="flickr30k",
    )
    images = corpus.images.to_pydict()
    assert images["image_id"] == FLICKR_IDS
    assert {split: images["split"].count(split) for split in SPLITS} == FLICKR_SPLITS
    assert set(images["width"]) == set(images["height"]) == {96}  # read from the files the entries name
    captions = corpus.captions.to_pydict()
    assert captions["image_id"] == [image_id for image_id in FLICKR_IDS for _ in range(3)]
    assert set(captions["lang"]) == {"en"} and set(captions["kind"]) == {"comparable"}


def test_second_corpus_has_exactly_the_configured_captions_and_readable_images(flickr) -> None:
    root, _ = flickr
    folder = root / "flickr"
    every_caption = read_karpathy(
        folder / "dataset_flickr30k.json", dataset="flickr30k", image_root=None, captions_per_image=None
    )
    assert every_caption.captions.num_rows == 11 * 3  # no image has more than captions_per_image
    data = json.loads((folder / "dataset_flickr30k.json").read_text(encoding="utf-8"))
    assert data["dataset"] == "flickr30k" and [entry["imgid"] for entry in data["images"]] == list(range(11))
    first = data["images"][0]
    assert first["filename"] == "flk000001.png" and first["sentids"] == [0, 1, 2]
    assert first["sentences"][0]["tokens"] == re.findall(r"\w+", first["sentences"][0]["raw"].lower())
    assert sorted(path.name for path in (folder / "images").iterdir()) == [
        entry["filename"] for entry in data["images"]
    ]
    for entry in data["images"]:
        image = Image.open(folder / "images" / entry["filename"])
        assert image.format == "PNG" and image.mode == "RGB" and image.size == (96, 96)


def test_second_corpus_ids_and_pictures_are_disjoint_from_the_first(flickr, flickr_objects) -> None:
    root, _ = flickr
    first = {path.stem for path in (root / "images").iterdir()}
    assert len(first) == 20 and first.isdisjoint(FLICKR_IDS)
    assert first.isdisjoint(flickr_objects)
    digests = _digests(root)
    first_pictures = {digest for name, digest in digests.items() if name.startswith("images/")}
    second_pictures = {digest for name, digest in digests.items() if name.startswith("flickr/images/")}
    assert len(second_pictures) == 11 and first_pictures.isdisjoint(second_pictures)  # own streams, new scenes


def test_second_corpus_objects_and_captions_describe_its_own_images(flickr, flickr_objects) -> None:
    root, summary = flickr
    assert sorted(flickr_objects) == FLICKR_IDS
    assert pq.read_schema(root / "flickr" / "objects.parquet") == pq.read_schema(root / "objects.parquet")
    assert summary.flickr_objects == sum(len(rows) for rows in flickr_objects.values())
    data = json.loads((root / "flickr" / "dataset_flickr30k.json").read_text(encoding="utf-8"))
    for entry in data["images"]:
        texts = [sentence["raw"] for sentence in entry["sentences"]]
        for text in texts:  # English (the pivot) and true of this image's boxes
            _check_caption(text, flickr_objects[entry["filename"].removesuffix(".png")], WITH_FLICKR.image_size)
    distinct = [len({sentence["raw"] for sentence in entry["sentences"]}) for entry in data["images"]]
    assert sum(count >= 2 for count in distinct) >= 8  # independent descriptions, not one repeated


def test_second_corpus_in_its_own_style_avoids_the_first_corpus_most_common_words(flickr, tmp_path: Path) -> None:
    """Annotators of another corpus (generate.flickr.own_style): none of the first choices that have a caption
    alternative ("big", "picture", "next to"...), captions still true of their images, the first corpus unchanged."""
    styled = dataclasses.replace(WITH_FLICKR, flickr=dataclasses.replace(WITH_FLICKR.flickr, own_style=True))
    generate(styled, tmp_path / "styled", seed=SEED, languages=LANGUAGES)
    data = json.loads((tmp_path / "styled" / "flickr" / "dataset_flickr30k.json").read_text(encoding="utf-8"))
    objects: dict[str, list[dict]] = {}
    for row in pq.read_table(tmp_path / "styled" / "flickr" / "objects.parquet").to_pylist():
        objects.setdefault(row["image_id"], []).append(row)
    texts = []
    for entry in data["images"]:
        for sentence in entry["sentences"]:
            _check_caption(sentence["raw"], objects[entry["filename"].removesuffix(".png")], WITH_FLICKR.image_size)
            texts.append(sentence["raw"].lower())
    said = " ".join(texts)
    assert not re.search(r"\b(big|small|picture|ellipse|next to|above|below|purple)\b", said)
    assert re.search(r"\b(large|little)\b", said) and re.search(r"\b(image|drawing)\b", said)
    plain = json.loads((flickr[0] / "flickr" / "dataset_flickr30k.json").read_text(encoding="utf-8"))
    assert re.search(r"\b(big|small|picture)\b", " ".join(s["raw"] for e in plain["images"] for s in e["sentences"]))
    first = {name: digest for name, digest in _digests(tmp_path / "styled").items() if not name.startswith("flickr/")}
    original = {name: digest for name, digest in _digests(flickr[0]).items() if not name.startswith("flickr/")}
    del first["meta.json"], original["meta.json"]
    assert first == original


def test_second_corpus_captions_are_in_the_pivot_language(tmp_path: Path) -> None:
    config = SyntheticConfig(
        image_size=96,
        splits=SplitCounts(1, 0, 0),
        parallel_pairs=SplitCounts(0, 0, 0),
        flickr=FlickrLikeConfig(SplitCounts(3, 0, 0)),
    )
    summary = generate(config, tmp_path / "out", seed=SEED, languages=Languages("de", ("en",)))
    corpus = read_karpathy(
        tmp_path / "out" / "flickr" / "dataset_flickr30k.json", dataset="flickr30k", image_root=None, lang="de"
    )
    for text in corpus.captions.column("text").to_pylist():
        with pytest.raises(AssertionError, match="caption in no known form"):  # German, not English
            _check_caption(text, [], 96)
    assert summary.flickr_captions == {"de": 15}


def test_writing_the_second_corpus_leaves_the_first_byte_identical(small, flickr) -> None:
    without, with_flickr = _digests(small[0]), _digests(flickr[0])
    first_corpus = {name: digest for name, digest in with_flickr.items() if not name.startswith("flickr/")}
    del without["meta.json"], first_corpus["meta.json"]  # meta.json records the config and counts
    assert first_corpus == without
    assert len([name for name in with_flickr if name.startswith("flickr/")]) == 11 + 2


def test_second_corpus_is_deterministic_for_a_seed(flickr, tmp_path: Path) -> None:
    root, _ = flickr
    generate(WITH_FLICKR, tmp_path / "again", seed=SEED, languages=LANGUAGES)
    assert _digests(tmp_path / "again") == _digests(root)
    generate(WITH_FLICKR, tmp_path / "other", seed=SEED + 1, languages=LANGUAGES)
    other = _digests(tmp_path / "other")
    changed = [name for name, digest in _digests(root).items() if name.startswith("flickr/") and other[name] != digest]
    assert len(changed) == 11 + 2


def test_second_corpus_counts_in_summary_rows_and_meta(flickr) -> None:
    root, summary = flickr
    assert summary.flickr_images == FLICKR_SPLITS and summary.flickr_captions == {"en": 33}
    assert summary.images == {"train": 12, "val": 4, "test": 4}
    rows = summary.as_rows()
    assert {"item": "flickr images", "key": "val", "count": 2} in rows
    assert {"item": "flickr captions", "key": "en", "count": 33} in rows
    meta = json.loads((root / "meta.json").read_text(encoding="utf-8"))
    assert meta["counts"]["flickr"] == {
        "images": FLICKR_SPLITS,
        "objects": summary.flickr_objects,
        "captions": {"en": 33},
    }
    assert meta["config"]["flickr"] == {"splits": FLICKR_SPLITS, "captions_per_image": 3, "own_style": False}


def test_progress_counts_the_images_of_both_corpora(tmp_path: Path) -> None:
    reports: list[tuple[int, int]] = []
    config = SyntheticConfig(
        image_size=64,
        splits=SplitCounts(30, 0, 0),
        parallel_pairs=SplitCounts(0, 0, 0),
        flickr=FlickrLikeConfig(SplitCounts(20, 3, 2)),
    )
    generate(
        config,
        tmp_path / "out",
        seed=SEED,
        languages=LANGUAGES,
        progress=lambda done, total: reports.append((done, total)),
    )
    assert reports == [(50, 55), (55, 55)]


def test_a_run_that_fails_in_the_second_corpus_leaves_nothing(tmp_path: Path, monkeypatch) -> None:
    calls = 0

    def failing_render(*args, **kwargs):
        nonlocal calls
        calls += 1
        if calls == 22:  # the second corpus's second image
            raise RuntimeError("killed while rendering")
        return real_render(*args, **kwargs)

    real_render = generator_module.render
    monkeypatch.setattr(generator_module, "render", failing_render)
    with pytest.raises(RuntimeError, match="killed"):
        generate(WITH_FLICKR, tmp_path / "fresh", seed=SEED, languages=LANGUAGES)
    assert calls == 22 and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"splits": {"train": 0, "val": 5, "test": 5}}, r"flickr\.splits\.train: got 0, allowed: at least 1 when"),
        ({"splits": {"train": 5, "val": -1, "test": 0}}, r"flickr\.splits\.val: got -1, allowed: 0 to"),
        (
            {"splits": {"train": 5, "val": 0, "test": 0}, "captions_per_image": 0},
            r"flickr\.captions_per_image: got 0, allowed: 1 to 20",
        ),
        ({"captions_per_image": 21}, r"flickr\.captions_per_image: got 21, allowed: 1 to 20"),
    ],
)
def test_second_corpus_config_errors_name_their_keys(section: dict, message: str) -> None:
    with pytest.raises(SettingError, match=message):
        build(SyntheticConfig, {"flickr": section})
