"""Roots are walls: a path a data file names (an image list line, a Karpathy entry, a SCAN id, a Hugging Face path
column or data file, a prepared images table read by features, export and report) stays inside its declared folder.

Each hostile case points at a real image outside the image folder (``<tmp>/outside/evil.png``), so that a reader that
followed the path would find a file and record it. The refusal is one line naming the data file and line (or entry),
the path as ``repr`` shows it and the root; no file outside the root is opened. ``prepare.images_outside_root``
allows paths that lead out; a link that stays inside the root is followed. A decompression bomb is a bad image
wherever images are opened outside the feature stage.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from common.errors import InputError
from common.paths import inside_root
from corpora import tables
from corpora.hf_captions import HfColumns, HfConfig, read_hf
from corpora.karpathy import read_karpathy
from corpora.multi30k import Multi30kSplit, read_multi30k
from corpora.scan_captions import read_scan_captions
from features.compact import builtin_training_set
from features.extractors import image_jobs
from report.samples import differing_examples, thumbnail
from tests.unit.corpora.test_multi30k import write_layout

HINT = " (set prepare.images_outside_root: true to allow paths outside it)"
SPLITS = {"train": Multi30kSplit(task1="train", task2="train")}


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Path]]:
    """Every file Pillow opens during the test (resolved), to show that nothing outside the root was read."""
    seen: list[Path] = []
    original = Image.open

    def spy(file: Any, *args: Any, **kwargs: Any) -> Image.Image:
        if isinstance(file, (str, Path)):
            seen.append(Path(file).resolve())
        return original(file, *args, **kwargs)

    monkeypatch.setattr(Image, "open", spy)
    yield seen


@pytest.fixture
def world(tmp_path: Path) -> dict[str, Path]:
    """An image folder with one image, and a real image outside it that a hostile path points at."""
    images, outside = tmp_path / "images", tmp_path / "outside"
    images.mkdir()
    outside.mkdir()
    Image.new("RGB", (4, 3)).save(images / "a1.png")
    Image.new("RGB", (9, 7)).save(outside / "evil.png")
    return {"root": tmp_path, "images": images, "outside": outside, "evil": outside / "evil.png"}


def _outside_nothing(opened: list[Path], world: dict[str, Path]) -> None:
    assert all(not path.is_relative_to(world["outside"].resolve()) for path in opened), opened


def _multi30k(world: dict[str, Path], second_line: str, **options: Any) -> tuple[Any, Path]:
    text = world["root"] / "text"
    write_layout(text, names={"train": ["a1.png", second_line]}, task1_langs=("en",), task2_langs=("en",))
    corpus = read_multi30k(text, languages=["en"], splits=SPLITS, image_root=world["images"], **options)
    return corpus, text / "task1" / "image_splits" / "train.txt"


# --- the library function ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("relative", "message"),
    [
        ("../x.png", "f.txt:3: path '../x.png' climbs out of {root} through '..'"),
        ("a/../../x.png", "f.txt:3: path 'a/../../x.png' climbs out of {root} through '..'"),
        ("/etc/passwd", "f.txt:3: path '/etc/passwd' is absolute; it must be relative to {root}"),
        ("a\x00.png", "f.txt:3: path 'a\\x00.png' holds a NUL character"),
        ("\u202egnp.exe", None),  # shown escaped when refused elsewhere; a plain name here (inside the root)
    ],
)
def test_inside_root_spelling(tmp_path: Path, relative: str, message: str | None) -> None:
    if message is None:
        assert inside_root(tmp_path, relative, "f.txt:3") == tmp_path / relative
        return
    with pytest.raises(InputError) as error:
        inside_root(tmp_path, relative, "f.txt:3")
    assert str(error.value) == message.format(root=tmp_path)


def test_inside_root_keeps_dotdot_that_stays_inside_and_escapes_bidi_in_messages(tmp_path: Path) -> None:
    assert inside_root(tmp_path, "a/../b.png", "f.txt:1") == tmp_path / "a/../b.png"
    with pytest.raises(InputError) as error:
        inside_root(tmp_path, "../\u202egnp.exe", "f.txt:1")
    assert "'../\\u202egnp.exe'" in str(error.value)  # a right-to-left override cannot reorder the message


# --- prepare: Multi30K image lists ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("../outside/evil.png", "climbs out of {images} through '..'"),
        ("a/../../outside/evil.png", "climbs out of {images} through '..'"),
        ("{evil}", "is absolute; it must be relative to {images}"),
    ],
)
def test_image_list_line_leaving_the_root_is_refused(
    world: dict[str, Path], opened: list[Path], line: str, reason: str
) -> None:
    line = line.format(**world)
    with pytest.raises(InputError) as error:
        _multi30k(world, line)
    listing = world["root"] / "text" / "task1" / "image_splits" / "train.txt"
    assert str(error.value) == f"{listing}:2: path {line!r} {reason.format(**world)}{HINT}"
    _outside_nothing(opened, world)


@pytest.mark.parametrize("link", ["file", "folder"])
def test_symlink_leading_out_of_the_image_folder_is_refused(
    world: dict[str, Path], opened: list[Path], link: str
) -> None:
    if link == "file":
        (world["images"] / "evil.png").symlink_to(world["evil"])
        line = "evil.png"
    else:
        (world["images"] / "shared").symlink_to(world["outside"], target_is_directory=True)
        line = "shared/evil.png"
    with pytest.raises(InputError) as error:
        _multi30k(world, line)
    listing = world["root"] / "text" / "task1" / "image_splits" / "train.txt"
    target = str(world["evil"].resolve())
    assert str(error.value) == (
        f"{listing}:2: path {line!r} is a symbolic link (or passes through one) to {target!r}, outside "
        f"{world['images']}{HINT}"
    )
    _outside_nothing(opened, world)


def test_symlink_that_stays_inside_is_followed(world: dict[str, Path]) -> None:
    (world["images"] / "sub").mkdir()
    Image.new("RGB", (5, 2)).save(world["images"] / "sub" / "real.png")
    (world["images"] / "alias.png").symlink_to(world["images"] / "sub" / "real.png")
    corpus, _ = _multi30k(world, "alias.png")
    rows = corpus.images.to_pydict()
    assert (rows["path"], rows["width"], rows["height"]) == (["a1.png", "alias.png"], [4, 5], [3, 2])


@pytest.mark.parametrize("how", ["dotdot", "symlink"])
def test_opt_in_allows_paths_outside_the_root(world: dict[str, Path], how: str) -> None:
    line = "../outside/evil.png"
    if how == "symlink":
        (world["images"] / "evil.png").symlink_to(world["evil"])
        line = "evil.png"
    corpus, _ = _multi30k(world, line, outside_allowed=True)
    rows = corpus.images.to_pydict()
    assert (rows["path"][1], rows["width"][1], rows["height"][1]) == (line, 9, 7)


# --- prepare: Karpathy JSON, SCAN ids --------------------------------------------------------------------------


def _karpathy(world: dict[str, Path], entry: dict[str, Any]) -> Path:
    sentences = [{"raw": f"caption {n}", "tokens": ["caption"]} for n in range(5)]
    path = world["root"] / "dataset.json"
    path.write_text(json.dumps({"images": [{**entry, "split": "train", "sentences": sentences}]}), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        ({"filepath": "../outside", "filename": "evil.png", "cocoid": 7}, None),
        ({"filename": "{evil}"}, "filename {name!r} is a path, not a file name (the folder goes in 'filepath')"),
        ({"filename": "../outside/evil.png"}, "filename {name!r} is a path, not a file name (the folder goes in "),
    ],
)
def test_karpathy_entry_leaving_the_root_is_refused(
    world: dict[str, Path], opened: list[Path], entry: dict[str, Any], reason: str | None
) -> None:
    entry = {key: value.format(**world) if isinstance(value, str) else value for key, value in entry.items()}
    path = _karpathy(world, entry)
    with pytest.raises(InputError) as error:
        read_karpathy(path, dataset="coco", image_root=world["images"])
    if reason is None:
        expected = (
            f"{path}: images[0] (evil.png): path '../outside/evil.png' climbs out of {world['images']} through '..'"
        )
        assert str(error.value) == expected + HINT
    else:
        assert str(error.value).startswith(f"{path}: images[0]: " + reason.format(name=entry["filename"]))
    _outside_nothing(opened, world)


@pytest.mark.parametrize(
    ("image_id", "reason"),
    [("../outside/evil", "climbs out of the image folder through '..'"), ("/etc/passwd", "is absolute")],
)
def test_scan_id_that_would_leave_the_image_folder_is_refused(tmp_path: Path, image_id: str, reason: str) -> None:
    (tmp_path / "train_caps.txt").write_text("".join(f"caption {n}\n" for n in range(4)), encoding="utf-8")
    (tmp_path / "train_ids.txt").write_text(f"1\n{image_id}\n", encoding="utf-8")
    with pytest.raises(InputError) as error:
        read_scan_captions(tmp_path, splits={"train": "train"}, dataset="scan", captions_per_image=2)
    message = str(error.value)
    assert message.startswith(f"{tmp_path / 'train_ids.txt'}:2: path {image_id!r} {reason}") and message.endswith(HINT)


# --- prepare: Hugging Face datasets ----------------------------------------------------------------------------

HF_COLUMNS = HfColumns(image="image_path", caption="text", image_id=None, language=None, kind=None)


def test_hf_path_column_leaving_the_root_is_refused(world: dict[str, Path], opened: list[Path]) -> None:
    source = world["root"] / "hf"
    (source / "data").mkdir(parents=True)
    rows = {"image_path": ["a1.png", "../outside/evil.png"], "text": ["a caption", "another caption"]}
    pq.write_table(pa.table(rows), source / "data" / "train-00000-of-00001.parquet")
    config = HfConfig(columns=HF_COLUMNS, splits={"train": "train"})
    with pytest.raises(InputError) as error:
        read_hf(str(source), config, image_root=world["images"], dataset="toy")
    assert str(error.value) == (
        f"{source}: split train: row 1: path '../outside/evil.png' climbs out of {world['images']} through '..'{HINT}"
    )
    _outside_nothing(opened, world)


def test_hf_parquet_file_linked_from_outside_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere.parquet"
    pq.write_table(pa.table({"image_path": ["a.png"], "text": ["a caption"]}), elsewhere)
    source = tmp_path / "hf"
    (source / "data").mkdir(parents=True)
    (source / "data" / "train-00000-of-00001.parquet").symlink_to(elsewhere)
    with pytest.raises(InputError) as error:
        read_hf(str(source), HfConfig(columns=HF_COLUMNS, splits={"train": "train"}), image_root=None, dataset="toy")
    linked = source / "data" / "train-00000-of-00001.parquet"
    assert str(error.value) == (
        f"{linked}: path 'data/train-00000-of-00001.parquet' is a symbolic link (or passes through one) to "
        f"{str(elsewhere.resolve())!r}, outside {source}"
    )


@pytest.mark.parametrize("layout", ["dataset", "dict"])
def test_hf_save_to_disk_data_file_outside_the_folder_is_refused(tmp_path: Path, layout: str) -> None:
    datasets = pytest.importorskip("datasets")
    rows = datasets.Dataset.from_dict({"image_path": ["a.png"], "text": ["a caption"]})
    source = tmp_path / "hf"
    if layout == "dict":
        datasets.DatasetDict({"train": rows}).save_to_disk(str(source))
        folder = source / "train"
    else:
        rows.save_to_disk(str(source))
        folder = source
    state = folder / "state.json"
    data = json.loads(state.read_text(encoding="utf-8"))
    arrow = folder / data["_data_files"][0]["filename"]
    shutil.copy(arrow, tmp_path / "stolen.arrow")  # a readable file is there: without the check it would be read
    data["_data_files"][0]["filename"] = "../" * len(folder.relative_to(tmp_path).parts) + "stolen.arrow"
    state.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(InputError) as error:
        read_hf(str(source), HfConfig(columns=HF_COLUMNS, splits={"train": "train"}), image_root=None, dataset="toy")
    name = data["_data_files"][0]["filename"]
    assert str(error.value) == f"{state}: _data_files[0]: path {name!r} climbs out of {folder} through '..'"


def test_hf_dataset_dict_split_outside_the_folder_is_refused(tmp_path: Path) -> None:
    source = tmp_path / "hf"
    source.mkdir()
    (source / "dataset_dict.json").write_text(json.dumps({"splits": ["../elsewhere"]}), encoding="utf-8")
    with pytest.raises(InputError) as error:
        read_hf(str(source), HfConfig(columns=HF_COLUMNS, splits={"train": "train"}), image_root=None, dataset="toy")
    assert str(error.value) == (
        f"{source / 'dataset_dict.json'}: splits[0]: path '../elsewhere' climbs out of {source} through '..'"
    )


# --- later stages: features, export, report, the built-in training list ----------------------------------------


def _images_table(paths: list[str]) -> pa.Table:
    return tables.images_table(
        {
            "image_id": [Path(path).stem for path in paths],
            "split": ["train"] * len(paths),
            "path": paths,
            "width": [None] * len(paths),
            "height": [None] * len(paths),
            "dataset": ["toy"] * len(paths),
        }
    )


def test_features_refuse_a_prepared_path_leaving_the_image_folder(world: dict[str, Path]) -> None:
    table = _images_table(["a1.png", "../outside/evil.png"])
    with pytest.raises(InputError) as error:
        image_jobs(table, world["images"], None, source="prepared/images.parquet")
    assert str(error.value) == (
        f"prepared/images.parquet: image 'evil': path '../outside/evil.png' climbs out of {world['images']} "
        f"through '..'{HINT}"
    )
    jobs = image_jobs(table, world["images"], None, outside_allowed=True)
    assert Path(jobs[1].path).resolve() == world["evil"].resolve()


def test_builtin_training_list_cannot_leave_its_image_folder(tmp_path: Path) -> None:
    listing = tmp_path / "task1" / "image_splits" / "train.txt"
    listing.parent.mkdir(parents=True)
    listing.write_text("a.png\n\n../../secret.png\n", encoding="utf-8")
    (tmp_path / "objects.parquet").write_bytes(b"")
    with pytest.raises(InputError) as error:
        builtin_training_set(tmp_path)
    assert str(error.value) == (
        f"{listing}:3: path '../../secret.png' climbs out of {tmp_path / 'images'} through '..'"
    )


def test_export_refuses_to_embed_an_image_outside_the_folder(world: dict[str, Path], opened: list[Path]) -> None:
    from corpora.dataset_card import CardInfo
    from corpora.hf_dataset import export_variant

    images = _images_table(["a1.png", "../outside/evil.png"])
    captions = tables.captions_table(
        {
            "caption_id": ["a1#en#c1", "evil#en#c1"],
            "image_id": ["a1", "evil"],
            "split": ["train", "train"],
            "lang": ["en", "en"],
            "text": ["a caption", "another caption"],
            "origin": ["human", "human"],
            "system": [None, None],
            "hop": [0, 0],
            "parent_id": [None, None],
            "kind": ["comparable", "comparable"],
        },
        images=images,
    )
    card = CardInfo("none", "the human captions", "toy", "toy", False, "en", (), {})
    out = world["root"] / "export"
    with pytest.raises(InputError) as error:
        export_variant(captions, images, out, card=card, image_root=world["images"], with_images=True, source="cap")
    assert str(error.value) == (
        f"cap: images table: path '../outside/evil.png' climbs out of {world['images']} through '..'{HINT}"
    )
    assert not out.exists()
    _outside_nothing(opened, world)


def test_report_refuses_a_sample_image_linked_from_outside(tmp_path: Path, opened: list[Path]) -> None:
    from tests.unit.report.test_samples import _write

    synthesized, prepared, images = _write(tmp_path)
    outside = tmp_path / "outside"
    (images / "pics").rename(outside)
    (images / "pics").symlink_to(outside, target_is_directory=True)
    with pytest.raises(InputError) as error:
        differing_examples(synthesized, prepared, images, count=5)
    assert str(error.value) == (
        f"{prepared / 'images.parquet'}: image 'd': path 'pics/d.png' is a symbolic link (or passes through one) to "
        f"{str((outside / 'd.png').resolve())!r}, outside {images}{HINT}"
    )
    assert not [path for path in opened if path.is_relative_to(outside.resolve())]
    assert len(differing_examples(synthesized, prepared, images, count=5, outside_allowed=True)) == 4


# --- decompression bombs outside the feature stage --------------------------------------------------------------


@pytest.fixture
def small_pixel_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pillow's pixel limit lowered so that a 20 x 20 image is a bomb (a warning above it, an error above twice)."""
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 100)


@pytest.mark.parametrize("size", [(12, 12), (20, 20)])  # over the limit (Pillow warns), over twice it (Pillow raises)
def test_bomb_in_an_image_list_is_a_bad_image(world: dict[str, Path], small_pixel_limit: None, size: Any) -> None:
    Image.new("RGB", size).save(world["images"] / "bomb.png")
    with pytest.raises(InputError) as error:
        _multi30k(world, "bomb.png")
    assert re.fullmatch(
        rf"{re.escape(str(world['images'] / 'bomb.png'))}: too many pixels, a possible decompression bomb \(.+\)",
        str(error.value),
    )


def test_bomb_embedded_in_a_hf_dataset_is_a_bad_image(tmp_path: Path, small_pixel_limit: None) -> None:
    import io

    buffer = io.BytesIO()
    Image.new("RGB", (20, 20)).save(buffer, format="PNG")
    image_type = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    rows = pa.table(
        {
            "image": pa.array([{"bytes": buffer.getvalue(), "path": None}], image_type),
            "text": ["a caption"],
            "image_id": ["b1"],
        }
    )
    source = tmp_path / "hf"
    source.mkdir()
    pq.write_table(rows, source / "train.parquet")
    columns = HfColumns(image="image", caption="text", image_id="image_id", language=None, kind=None)
    with pytest.raises(InputError) as error:
        read_hf(str(source), HfConfig(columns=columns, splits={"train": "train"}), image_root=None, dataset="toy")
    assert str(error.value).startswith(
        f"{source}: split train: row 0: the embedded image: too many pixels, a possible decompression bomb ("
    )


def test_bomb_as_a_report_thumbnail_is_a_bad_image(tmp_path: Path, small_pixel_limit: None) -> None:
    Image.new("RGB", (20, 20)).save(tmp_path / "bomb.png")
    with pytest.raises(InputError, match=r"bomb\.png: too many pixels, a possible decompression bomb \("):
        thumbnail(tmp_path / "bomb.png")
