"""The extractor registry and the `features` settings: checks, specs, jobs, the compact encoder's training and
reuse, importers run through the registry, and the linear probes of a store against hand-counted labels."""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import torch
from PIL import Image

import features.compact
from common.checks import SettingError
from common.config import build
from common.errors import InputError
from common.runtime import Runtime
from corpora import tables
from features.bottom_up.extractor import BUTDSettings
from features.boxes import read_given_boxes
from features.compact import (
    CompactConfig,
    CompactExtractor,
    CompactPreset,
    CompactTraining,
    encoder_for,
    glimpses,
    labelled_glimpses,
    load_encoder,
    train_encoder,
    weights_sha256,
)
from features.config import EXTRACTOR_NEEDS, FeaturesConfig
from features.extractors import (
    EXTRACTORS,
    ExtractionInputs,
    ExtractorSpec,
    FeatureImporter,
    NetworkExtractor,
    build_extractor,
    image_jobs,
)
from features.importers import ImportConfig
from features.probe import label_columns, linear_probe, probe_store, region_rows
from features.regions import AdaptiveRegions, FixedRegions, GivenRegions, ImageRegions, RegionConfig
from features.store import FeatureStore, FeatureStoreWriter
from tests.unit.features.test_importers import _tsv_rows, _write_tsv
from tests.unit.pickle_payload import Payload

GIVEN = RegionConfig(mode="given", max_count=3)
TINY_PRESET = CompactPreset(
    encoder=CompactConfig(glimpse=0.5, input_size=16, widths=(4, 8), dim=12),
    training=CompactTraining(epochs=2, batch_size=4, lr=1e-2),
)
COLOURS = {"red": (220, 20, 20), "blue": (20, 20, 220), "green": (20, 200, 20)}


# --- settings ----------------------------------------------------------------------------------------------


def test_region_selection_per_mode() -> None:
    """Each mode keeps only its own fields in the selection; K follows the mode."""
    fixed = RegionConfig(mode="fixed", count=5, min_count=2, max_count=9, conf_thresh=0.3)
    adaptive = RegionConfig(mode="adaptive", count=5, min_count=2, max_count=9, conf_thresh=0.3)
    given = RegionConfig(mode="given", count=5, min_count=2, max_count=9, conf_thresh=0.3)
    assert fixed.selection() == FixedRegions(count=5, conf_thresh=0.3)
    assert adaptive.selection() == AdaptiveRegions(min_count=2, max_count=9, conf_thresh=0.3)
    assert given.selection() == GivenRegions(max_count=9)
    # Imported stores have no given boxes: `given` imports `count` regions like `fixed`; adaptive imports max_count.
    assert [config.imported_count() for config in (fixed, adaptive, given)] == [5, 9, 5]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"count": 0}, r"^count: got 0, allowed: 1 to 1000$"),
        ({"min_count": 1001}, r"^min_count: got 1001, allowed: 1 to 1000$"),
        ({"mode": "adaptive", "min_count": 20, "max_count": 10}, r"^max_count: got 10, allowed: 20 to 1000$"),
        ({"mode": "given", "max_count": 0}, r"^max_count: got 0, allowed: 1 to 1000$"),
        ({"conf_thresh": 1.5}, r"^conf_thresh: got 1.5, allowed: 0 to 1$"),
    ],
)
def test_region_range_checks(values: dict[str, object], message: str) -> None:
    with pytest.raises(SettingError, match=message):
        RegionConfig(**values)  # type: ignore[arg-type]


def test_max_below_min_count_is_only_an_error_in_adaptive_mode() -> None:
    """min_count is an adaptive setting; fixed and given ignore it."""
    assert RegionConfig(mode="given", min_count=20, max_count=10).selection() == GivenRegions(max_count=10)
    assert RegionConfig(mode="fixed", min_count=20, max_count=10).selection() == FixedRegions()


def test_unknown_extractor_lists_the_registry() -> None:
    with pytest.raises(
        SettingError, match=r"^extractor: got 'detr', allowed: compact, butd, butd-detectron2, scan-npy, butd-tsv$"
    ):
        FeaturesConfig(extractor="detr", regions=GIVEN)


def test_compact_needs_given_regions() -> None:
    with pytest.raises(SettingError, match=r"^regions\.mode: got 'fixed', allowed with extractor compact: given$"):
        FeaturesConfig(extractor="compact", regions=RegionConfig(mode="fixed"))
    assert FeaturesConfig(extractor="compact", regions=GIVEN).regions.selection() == GivenRegions(3)


@pytest.mark.parametrize("extractor", ["butd", "butd-detectron2"])
def test_butd_needs_a_checkpoint(extractor: str) -> None:
    with pytest.raises(SettingError, match=rf"^butd\.checkpoint: missing: extractor {extractor} needs a checkpoint"):
        FeaturesConfig(extractor=extractor)
    for mode in ("fixed", "adaptive", "given"):  # any region mode
        config = FeaturesConfig(extractor=extractor, regions=RegionConfig(mode=mode), butd=BUTDSettings(checkpoint="r"))
        assert config.regions.mode == mode


def test_the_default_features_config_is_the_compact_preset_on_given_boxes() -> None:
    config = FeaturesConfig()
    assert (config.extractor, config.regions.mode) == ("compact", "given")


def test_butd_tsv_needs_files_and_scan_npy_needs_nothing_more() -> None:
    with pytest.raises(SettingError, match=r"^imported\.tsv_files: empty: extractor butd-tsv needs at least one"):
        FeaturesConfig(extractor="butd-tsv")
    FeaturesConfig(extractor="butd-tsv", imported=ImportConfig(tsv_files=("a.tsv",)))
    FeaturesConfig(extractor="scan-npy")


@pytest.mark.parametrize(
    ("values", "message"),
    [({"shard_size": 0}, r"^shard_size: got 0, allowed: 1 to 1000000$"), ({"batch_size": 4097}, r"^batch_size: got")],
)
def test_shard_and_batch_size_ranges(values: dict[str, int], message: str) -> None:
    with pytest.raises(SettingError, match=message):
        FeaturesConfig(extractor="scan-npy", **values)  # type: ignore[arg-type]


def test_errors_from_params_carry_the_section_path() -> None:
    """Built from a params mapping, the extractor's own check names the full key path."""
    with pytest.raises(SettingError, match=r"^features\.butd\.checkpoint: missing"):
        build(FeaturesConfig, {"extractor": "butd"}, "features")
    with pytest.raises(SettingError, match=r"^features\.regions\.mode: got 'adaptive'"):
        build(FeaturesConfig, {"extractor": "compact", "regions": {"mode": "adaptive"}}, "features")
    config = build(FeaturesConfig, {"extractor": "compact", "regions": {"mode": "given", "max_count": 8}}, "features")
    assert config.regions == RegionConfig(mode="given", max_count=8)


# --- the registry and specs --------------------------------------------------------------------------------


def test_registry_rows() -> None:
    """Networks are extracted shard by shard; importers copy features users hold."""
    kinds = {name: type(entry) for name, entry in EXTRACTORS.items()}
    assert kinds == {
        "compact": NetworkExtractor,
        "butd": NetworkExtractor,
        "butd-detectron2": NetworkExtractor,
        "scan-npy": FeatureImporter,
        "butd-tsv": FeatureImporter,
    }


def test_every_extractor_has_its_settings_check() -> None:
    """features.extractor is checked against the config's own table (features/config.py imports no extractor): the
    same names, in the same order (the order of the error message)."""
    assert list(EXTRACTOR_NEEDS) == list(EXTRACTORS)


def test_butd_spec_and_description(tmp_path: Path) -> None:
    """The butd row: weights from the inputs folder, file sha256, image scale as sorted options in the description."""
    entry = EXTRACTORS["butd"]
    assert isinstance(entry, NetworkExtractor)
    config = FeaturesConfig(
        extractor="butd",
        regions=RegionConfig(mode="adaptive", min_count=10, max_count=50),
        butd=BUTDSettings(checkpoint="r101.pkl", test_scale=400, max_size=700),
    )
    inputs = ExtractionInputs(pa.table({}), tmp_path, tmp_path / "boxes.parquet", tmp_path / "in", tmp_path, seed=0)
    weights = entry.weights(config, inputs)
    assert weights == tmp_path / "in" / "r101.pkl"
    weights.parent.mkdir()
    weights.write_bytes(b"not really a detector")
    assert entry.weights_sha256(weights) == hashlib.sha256(b"not really a detector").hexdigest()
    spec = entry.spec("butd", config, weights, Runtime())
    assert spec == ExtractorSpec(
        "butd", str(weights), AdaptiveRegions(10, 50, 0.2), Runtime(), (("max_size", 700), ("test_scale", 400))
    )
    assert spec.description("abc") == {
        "extractor": "butd",
        "checkpoint_sha256": "abc",
        "selection": {"min_count": 10, "max_count": 50, "conf_thresh": 0.2, "mode": "adaptive"},
        "max_size": 700,
        "test_scale": 400,
    }
    assert hash(spec) == hash(entry.spec("butd", config, weights, Runtime()))  # a cache key of build_extractor


def test_compact_spec_has_no_options() -> None:
    entry = EXTRACTORS["compact"]
    assert isinstance(entry, NetworkExtractor)
    spec = entry.spec("compact", FeaturesConfig(regions=GIVEN), Path("enc.pt"), Runtime())
    assert spec.options == () and spec.selection == GivenRegions(3)
    assert spec.description("s") == {
        "extractor": "compact",
        "checkpoint_sha256": "s",
        "selection": {"max_count": 3, "mode": "given"},
    }


def test_a_missing_weights_file_is_an_input_error(tmp_path: Path) -> None:
    spec = ExtractorSpec("compact", str(tmp_path / "absent.pt"), FixedRegions(), Runtime())
    with pytest.raises(InputError, match=r"absent.pt: not found; extractor compact needs this weights file"):
        build_extractor(spec)


def test_importers_have_no_network_to_build() -> None:
    spec = ExtractorSpec("scan-npy", "", FixedRegions(), Runtime())
    with pytest.raises(TypeError, match=r"^scan-npy imports features; it has no network to build$"):
        build_extractor(spec)


# --- tiny images, boxes and the compact encoder ------------------------------------------------------------


def _picture(squares: list[tuple[int, int, str]], size: int = 48) -> np.ndarray:
    image = np.full((size, size, 3), 128, dtype=np.uint8)
    for x, y, colour in squares:
        image[y : y + 12, x : x + 12] = COLOURS[colour]
    return image


def _scene(index: int) -> list[tuple[int, int, str]]:
    """One or two 12-pixel squares; the colour cycles with the image index."""
    names = list(COLOURS)
    squares = [(4 + 3 * index % 20, 6, names[index % 3])]
    if index % 2:
        squares.append((28, 30, names[(index + 1) % 3]))
    return squares


def _dataset(root: Path, splits: list[str]) -> tuple[pa.Table, Path, dict[str, np.ndarray]]:
    """PNG images ``i<n>`` under ``root/images``, their images table, and a labelled boxes table."""
    (root / "images").mkdir(parents=True)
    ids = [f"i{index}" for index in range(len(splits))]
    pixels, rows = {}, []
    for index, image_id in enumerate(ids):
        squares = _scene(index)
        pixels[image_id] = _picture(squares)
        Image.fromarray(pixels[image_id]).save(root / "images" / f"{image_id}.png")
        shape = "tile" if index % 3 == 0 else "square"
        rows += [(image_id, x, y, colour, shape) for x, y, colour in squares]
    images = tables.images_table(
        {
            "image_id": ids,
            "split": splits,
            "path": [f"{i}.png" for i in ids],
            "width": [48] * len(ids),
            "height": [48] * len(ids),
            "dataset": ["toy"] * len(ids),
        }
    )
    boxes = pa.table(
        {
            "image_id": [row[0] for row in rows],
            "x0": pa.array([float(row[1]) for row in rows], pa.float32()),
            "y0": pa.array([float(row[2]) for row in rows], pa.float32()),
            "x1": pa.array([float(row[1] + 12) for row in rows], pa.float32()),
            "y1": pa.array([float(row[2] + 12) for row in rows], pa.float32()),
            "label": [row[4] for row in rows],
            "attributes": [[row[3], "small"] for row in rows],
        }
    )
    pq.write_table(boxes, root / "boxes.parquet")
    return images, root / "boxes.parquet", pixels


SPLITS = ["train", "train", "val", "train", "test", "train", "train", "test"]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> tuple[pa.Table, Path, dict[str, np.ndarray]]:
    return _dataset(tmp_path_factory.mktemp("data"), SPLITS)


def _inputs(dataset: tuple[pa.Table, Path, dict[str, np.ndarray]], work: Path, seed: int = 0) -> ExtractionInputs:
    images, boxes, _ = dataset
    return ExtractionInputs(images, boxes.parent / "images", boxes, work / "inputs", work, seed=seed)


def test_compact_encoder_is_trained_on_the_train_boxes_alone(
    dataset: tuple[pa.Table, Path, dict[str, np.ndarray]], tmp_path: Path
) -> None:
    """The weights equal train_encoder's on the labelled glimpses of the train images, in table order;
    vocabularies come from every box of the file."""
    images, boxes_path, pixels = dataset
    config = FeaturesConfig(regions=GIVEN, compact=TINY_PRESET)
    path = EXTRACTORS["compact"].weights(config, _inputs(dataset, tmp_path, seed=5))  # type: ignore[union-attr]
    assert path.parent == tmp_path / "compact" and path.name.startswith("encoder-") and path.suffix == ".safetensors"
    assert path.with_suffix(".json").is_file()  # the config and vocabularies: no pickle-capable file
    boxes = read_given_boxes(boxes_path)
    train_ids = [
        image_id for image_id, split in zip(images["image_id"].to_pylist(), SPLITS, strict=True) if split == "train"
    ]
    examples = [(pixels[i], boxes.of(i), boxes.labels[i], boxes.attributes[i]) for i in train_ids]  # type: ignore[index]
    objects, attributes = ["square", "tile"], ["blue", "green", "red", "small"]
    data = labelled_glimpses(examples, TINY_PRESET.encoder, objects=objects, attributes=attributes)
    assert len(data.objects) == 8  # 5 train images, 3 of them (odd index) with two squares
    expected = train_encoder(
        data, TINY_PRESET.encoder, TINY_PRESET.training, objects=objects, attributes=attributes, seed=5
    )
    loaded = load_encoder(str(path))
    assert loaded.objects == objects and loaded.attributes == attributes and loaded.config == TINY_PRESET.encoder
    for name, tensor in expected.state_dict().items():
        assert torch.equal(tensor, loaded.state_dict()[name]), name


def test_compact_encoder_is_reused_for_the_same_inputs(
    dataset: tuple[pa.Table, Path, dict[str, np.ndarray]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Same preset, seed, boxes and train images: the file of the first run, no training."""
    images, boxes_path, _ = dataset
    first = encoder_for(
        images, boxes_path.parent / "images", read_given_boxes(boxes_path), TINY_PRESET, seed=0, work=tmp_path
    )
    stamp = first.stat().st_mtime_ns

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("trained again")

    monkeypatch.setattr(features.compact, "train_encoder", refuse)
    # a new val/test image changes nothing the encoder learns from
    more = pa.concat_tables([images, _images(["extra"], ["test"])])  # its file does not even exist
    again = encoder_for(
        more, boxes_path.parent / "images", read_given_boxes(boxes_path), TINY_PRESET, seed=0, work=tmp_path
    )
    assert again == first and first.stat().st_mtime_ns == stamp
    assert sorted((tmp_path / "compact").iterdir()) == [first.with_suffix(".json"), first]


def test_a_compact_encoder_cache_of_the_pickle_format_is_retrained_never_unpickled(
    dataset: tuple[pa.Table, Path, dict[str, np.ndarray]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ``encoder-<key>.pt`` of the earlier format (here tampered: unpickling it would run code) is neither read
    nor kept: the encoder is trained again into the safetensors pair, and the weights are those of a clean run."""
    images, boxes_path, _ = dataset
    clean = encoder_for(
        images, boxes_path.parent / "images", read_given_boxes(boxes_path), TINY_PRESET, seed=0, work=tmp_path / "a"
    )
    work = tmp_path / "b"
    planted = work / "compact" / clean.with_suffix(".pt").name
    planted.parent.mkdir(parents=True)
    ran = tmp_path / "payload-ran"
    torch.save({"config": Payload(ran)}, planted)

    def no_unpickling(*args: object, **kwargs: object) -> None:
        raise AssertionError("torch.load called on a cache file")

    monkeypatch.setattr(torch, "load", no_unpickling)
    rebuilt = encoder_for(
        images, boxes_path.parent / "images", read_given_boxes(boxes_path), TINY_PRESET, seed=0, work=work
    )
    assert rebuilt == work / "compact" / clean.name and not planted.exists() and not ran.exists()
    assert rebuilt.read_bytes() == clean.read_bytes()


@pytest.mark.parametrize("change", ["seed", "preset", "train images", "train pixels", "boxes"])
def test_compact_encoder_key_changes_with_its_inputs(
    dataset: tuple[pa.Table, Path, dict[str, np.ndarray]], tmp_path: Path, change: str
) -> None:
    images, boxes_path, _ = dataset
    root = boxes_path.parent / "images"
    first = encoder_for(images, root, read_given_boxes(boxes_path), TINY_PRESET, seed=0, work=tmp_path)
    boxes, preset, seed = read_given_boxes(boxes_path), TINY_PRESET, 0
    if change == "seed":
        seed = 1
    elif change == "preset":
        preset = CompactPreset(TINY_PRESET.encoder, CompactTraining(epochs=1, batch_size=4, lr=1e-2))
    elif change == "train images":
        images = images.slice(1)  # i0 (train) left out
    elif change == "train pixels":  # the same file name, other bytes
        path = root / images.column("path")[0].as_py()
        path.write_bytes(path.read_bytes() + b"\0")
    else:
        table = pq.read_table(boxes_path)
        changed = tmp_path / "boxes.parquet"
        pq.write_table(table.set_column(1, "x0", pa.array([0.0] * table.num_rows, pa.float32())), changed)
        boxes = read_given_boxes(changed)
    other = encoder_for(images, root, boxes, preset, seed=seed, work=tmp_path)
    pairs = [path.with_suffix(suffix) for path in (first, other) for suffix in (".json", ".safetensors")]
    assert other != first and sorted((tmp_path / "compact").iterdir()) == sorted(pairs)


def test_compact_encoder_needs_labels_and_skips_bad_train_images(
    dataset: tuple[pa.Table, Path, dict[str, np.ndarray]], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    images, boxes_path, _ = dataset
    unlabelled = tmp_path / "unlabelled.parquet"
    pq.write_table(pq.read_table(boxes_path).drop_columns(["label"]), unlabelled)
    with pytest.raises(
        InputError, match=r"unlabelled\.parquet: the compact encoder trains on `label` and `attributes`"
    ):
        encoder_for(
            images, boxes_path.parent / "images", read_given_boxes(unlabelled), TINY_PRESET, seed=0, work=tmp_path
        )
    broken = images.set_column(2, "path", pa.array(["missing.png", *images["path"].to_pylist()[1:]]))
    with caplog.at_level(logging.WARNING, logger="features.compact"):
        path = encoder_for(
            broken, boxes_path.parent / "images", read_given_boxes(boxes_path), TINY_PRESET, seed=0, work=tmp_path
        )
    assert path.is_file() and "Training without" in caplog.text and "missing.png" in caplog.text


def test_compact_weights_hash_ignores_the_file_bytes(
    dataset: tuple[pa.Table, Path, dict[str, np.ndarray]], tmp_path: Path
) -> None:
    """Two trainings of the same inputs into two work folders: one weights hash (the row's weights_sha256)."""
    config = FeaturesConfig(regions=GIVEN, compact=TINY_PRESET)
    entry = EXTRACTORS["compact"]
    assert isinstance(entry, NetworkExtractor)
    first = entry.weights(config, _inputs(dataset, tmp_path / "a"))
    second = entry.weights(config, _inputs(dataset, tmp_path / "b"))
    assert entry.weights_sha256(first) == entry.weights_sha256(second) == weights_sha256(str(first))
    assert len(entry.weights_sha256(first)) == 64


def test_build_extractor_loads_the_compact_weights_once(
    dataset: tuple[pa.Table, Path, dict[str, np.ndarray]], tmp_path: Path
) -> None:
    """K is the selection's max_count; features are the encoder's; one extractor per spec (cached)."""
    _, _, pixels = dataset
    config = FeaturesConfig(regions=GIVEN, compact=TINY_PRESET)
    entry = EXTRACTORS["compact"]
    assert isinstance(entry, NetworkExtractor)
    weights = entry.weights(config, _inputs(dataset, tmp_path))
    spec = entry.spec("compact", config, weights, Runtime("cpu"))
    extractor = build_extractor(spec)
    assert isinstance(extractor, CompactExtractor)
    assert (extractor.max_regions, extractor.dim) == (3, 12)
    assert build_extractor(ExtractorSpec(**vars(spec))) is extractor
    rewritten = tmp_path / "rewritten.pt"
    rewritten.write_bytes(weights.read_bytes())
    rewritten.replace(weights)  # new weights under the same name are loaded afresh
    assert build_extractor(spec) is not extractor
    boxes = np.array([[4, 6, 16, 18], [28, 30, 40, 42]], np.float32)
    (regions,) = extractor.extract([pixels["i1"]], [boxes])
    encoder = load_encoder(str(weights))
    with torch.no_grad():
        expected = encoder(glimpses(pixels["i1"], boxes, encoder.config))[0].numpy()
    np.testing.assert_allclose(regions.features, expected, rtol=1e-5, atol=1e-6)


def test_image_jobs_follow_the_table_with_given_boxes(
    dataset: tuple[pa.Table, Path, dict[str, np.ndarray]], tmp_path: Path
) -> None:
    images, boxes_path, _ = dataset
    table = pq.read_table(boxes_path)
    only_two = tmp_path / "two.parquet"
    pq.write_table(table.filter(pc.is_in(table["image_id"], pa.array(["i0", "i1"]))), only_two)
    jobs = image_jobs(images.slice(0, 3), Path("/data/images"), only_two)
    assert [(job.image_id, job.path) for job in jobs] == [(f"i{n}", f"/data/images/i{n}.png") for n in range(3)]
    np.testing.assert_array_equal(jobs[0].boxes, [[4, 6, 16, 18]])
    np.testing.assert_array_equal(jobs[1].boxes, [[7, 6, 19, 18], [28, 30, 40, 42]])
    assert jobs[2].boxes is not None and jobs[2].boxes.shape == (0, 4)  # no boxes in the file: no regions
    assert [job.boxes for job in image_jobs(images.slice(0, 2), Path("r"), None)] == [None, None]


# --- importers through the registry ------------------------------------------------------------------------


def _captions(images: pa.Table, texts: dict[str, list[str]], lang: str = "en") -> pa.Table:
    """Human comparable captions: ``texts[image_id]`` in order."""
    split_of = dict(zip(images.column("image_id").to_pylist(), images.column("split").to_pylist(), strict=True))
    rows = [(image_id, text) for image_id, own in texts.items() for text in own]
    return tables.captions_table(
        {
            "caption_id": [f"{lang}-{image_id}#{index}" for index, (image_id, _) in enumerate(rows)],
            "image_id": [image_id for image_id, _ in rows],
            "split": [split_of[image_id] for image_id, _ in rows],
            "lang": [lang] * len(rows),
            "text": [text for _, text in rows],
            "origin": ["human"] * len(rows),
            "system": [None] * len(rows),
            "hop": [0] * len(rows),
            "parent_id": [None] * len(rows),
            "kind": ["comparable"] * len(rows),
        },
        images,
    )


def _images(ids: list[str], splits: list[str]) -> pa.Table:
    return tables.images_table(
        {
            "image_id": ids,
            "split": splits,
            "path": ids,
            "width": [None] * len(ids),
            "height": [None] * len(ids),
            "dataset": ["toy"] * len(ids),
        }
    )


def test_scan_import_orders_images_by_configured_split(tmp_path: Path) -> None:
    """Images of each split keep table order; splits follow imported.scan_splits, each from its own file."""
    images = _images(["t0", "v0", "t1", "s0", "t2"], ["train", "val", "train", "test", "train"])
    rng = np.random.default_rng(0)
    arrays = {
        stem: rng.uniform(0, 5, (count, 2, 4)).astype(np.float32)
        for stem, count in (("train", 3), ("dev", 1), ("testall", 1))
    }
    for stem, array in arrays.items():
        np.save(tmp_path / f"{stem}_ims.npy", array)
    for stem, ids in (("train", ["t0", "t1", "t2"]), ("dev", ["v0"]), ("testall", ["s0"])):
        (tmp_path / f"{stem}_ids.txt").write_text("".join(f"{image_id}\n" for image_id in ids))
    config = FeaturesConfig(
        extractor="scan-npy", imported=ImportConfig(scan_splits={"test": "testall", "train": "train", "val": "dev"})
    )
    EXTRACTORS["scan-npy"].run(config, images, _captions(images, {}), tmp_path, tmp_path / "store")  # type: ignore[union-attr]
    store = FeatureStore.open(tmp_path / "store")
    assert store.image_ids == ["s0", "t0", "t1", "t2", "v0"]
    features, mask, _ = store.batch(np.arange(5))
    expected = np.concatenate([arrays["testall"], arrays["train"], arrays["dev"]]).astype(np.float16)
    np.testing.assert_array_equal(features, expected)
    assert mask.all()


def test_scan_import_refuses_images_of_a_split_without_a_file(tmp_path: Path) -> None:
    """Leaving the train images out of the store would only fail later, in every stage that reads them."""
    images = _images(["t0", "s0", "s1"], ["train", "test", "test"])
    np.save(tmp_path / "test_ims.npy", np.ones((2, 2, 4), np.float32))
    config = FeaturesConfig(extractor="scan-npy", imported=ImportConfig(scan_splits={"test": "test"}))
    with pytest.raises(
        InputError,
        match=r"^imported\.scan_splits: no file stem for the train split of the prepared "
        r"images; add `train: <stem>` for .*/<stem>_ims\.npy$",
    ):
        EXTRACTORS["scan-npy"].run(config, images, _captions(images, {}), tmp_path, tmp_path / "store")  # type: ignore[union-attr]
    assert not (tmp_path / "store").exists()


def test_scan_import_checks_caption_files_against_the_prepared_captions_in_caption_lang(tmp_path: Path) -> None:
    """Without ids files, <stem>_caps.txt must hold each image's human captions in caption_lang, word for word."""
    images = _images(["a", "b"], ["test", "test"])
    english = _captions(images, {"a": ["A dog runs.", "A brown dog."], "b": ["Two cats.", "Cats sleep."]})
    german = _captions(images, {"a": ["Ein Hund.", "Ein Hund rennt."], "b": ["Zwei Katzen.", "Katzen."]}, "de")
    captions = pa.concat_tables([german, english])
    np.save(tmp_path / "test_ims.npy", np.ones((2, 2, 4), np.float32))
    (tmp_path / "test_caps.txt").write_text("a dog runs .\na brown dog\ntwo cats .\ncats sleep .\n")
    config = FeaturesConfig(extractor="scan-npy", imported=ImportConfig(scan_splits={"test": "test"}))
    EXTRACTORS["scan-npy"].run(config, images, captions, tmp_path, tmp_path / "store")  # type: ignore[union-attr]
    assert FeatureStore.open(tmp_path / "store").image_ids == ["a", "b"]
    swapped = images.set_column(0, "image_id", pa.array(["b", "a"])).set_column(2, "path", pa.array(["b", "a"]))
    with pytest.raises(
        InputError,
        match=r"^.*test_caps\.txt: line 1: expected 'Two cats\.' \(caption 1 of prepared image 'b'\), "
        r"found 'a dog runs \.'$",
    ):
        EXTRACTORS["scan-npy"].run(config, swapped, captions, tmp_path, tmp_path / "other")  # type: ignore[union-attr]
    assert not (tmp_path / "other").exists()


def test_tsv_import_takes_k_from_imported_count(tmp_path: Path) -> None:
    """Mode given imports `count` regions per image (not max_count); rows follow the images table."""
    rows = _tsv_rows({"a": 2, "b": 4, "c": 1})
    _write_tsv(tmp_path / "part0.tsv", {"a": rows["a"]})
    _write_tsv(tmp_path / "part1.tsv", {"b": rows["b"], "c": rows["c"]})
    config = FeaturesConfig(
        extractor="butd-tsv",
        regions=RegionConfig(mode="given", count=5, max_count=2),
        imported=ImportConfig(tsv_files=("part0.tsv", "part1.tsv")),
    )
    images = _images(["c", "a"], ["train", "test"])
    EXTRACTORS["butd-tsv"].run(config, images, _captions(images, {}), tmp_path, tmp_path / "store")  # type: ignore[union-attr]
    store = FeatureStore.open(tmp_path / "store")
    assert (store.image_ids, store.max_regions, store.num_regions.tolist()) == (["c", "a"], 5, [1, 2])
    features, _, boxes = store.batch([1])
    np.testing.assert_array_equal(features[0, :2], rows["a"][1].astype(np.float16))
    np.testing.assert_array_equal(boxes[0, :2], rows["a"][0])


# --- probes --------------------------------------------------------------------------------------------------

PROBE_K, PROBE_D = 3, 6
PROBE_COLOURS = ["red", "blue", "green"]


def _probe_data(root: Path) -> tuple[FeatureStore, pa.Table, Path, dict[str, list[str]]]:
    """Images p0..p13: 8 train, 4 test, 1 val, 1 train image without boxes in the file. Region i of an image is
    box i; its colour is one-hot coded in the first three feature dims (plus a little noise)."""
    rng = np.random.default_rng(0)
    ids = [f"p{n}" for n in range(14)]
    splits = ["train"] * 8 + ["test"] * 4 + ["val", "train"]
    colours = {
        image_id: [PROBE_COLOURS[(n + box) % 3] for box in range(1 + n % 3)] for n, image_id in enumerate(ids[:13])
    }
    with FeatureStoreWriter(
        root / "store",
        image_ids=ids,
        max_regions=PROBE_K,
        dim=PROBE_D,
        extractor="test",
        checkpoint_sha256=None,
        config={},
    ) as writer:
        for image_id in ids:
            names = colours.get(image_id, ["red"])
            count = min(len(names), 2 if image_id == "p2" else PROBE_K)  # p2: 3 boxes, 2 regions
            features = rng.normal(0, 0.05, (count, PROBE_D)).astype(np.float32)
            for region, name in enumerate(names[:count]):
                features[region, PROBE_COLOURS.index(name)] += 2.0
            writer.write(
                image_id,
                ImageRegions(features, np.tile([0, 0, 5, 5], (count, 1)).astype(np.float32)),
                width=10,
                height=10,
            )
    box_ids = [image_id for image_id in ids[:13] for _ in colours[image_id]]
    box_colours = [name for image_id in ids[:13] for name in colours[image_id]]
    boxes = pa.table(
        {
            "image_id": box_ids,
            "object": pa.array(list(range(len(box_ids))), pa.int32()),
            "colour": box_colours,
            "size": ["big" if n % 2 else "small" for n in range(len(box_ids))],
            "x0": [0.0] * len(box_ids),
            "y0": [0.0] * len(box_ids),
            "x1": [5.0] * len(box_ids),
            "y1": [5.0] * len(box_ids),
            "attributes": [[colour] for colour in box_colours],
        }
    )
    pq.write_table(boxes, root / "boxes.parquet")
    return FeatureStore.open(root / "store"), _images(ids, splits), root / "boxes.parquet", colours


def test_label_columns_are_the_string_columns_grouped_by_image(tmp_path: Path) -> None:
    _, _, boxes, colours = _probe_data(tmp_path)
    columns = label_columns(boxes)
    assert list(columns) == ["colour", "size"]  # not image_id, object (int), x0.. (float), attributes (list)
    assert columns["colour"] == colours
    assert columns["size"]["p0"] == ["small"] and columns["size"]["p1"] == ["big", "small"]


def test_region_rows_pair_region_i_with_box_i(tmp_path: Path) -> None:
    """Rows of one split's images with labels, cut to the regions stored (p2 keeps 2 of its 3 boxes)."""
    store, images, boxes, colours = _probe_data(tmp_path)
    split_of = dict(zip(images["image_id"].to_pylist(), images["split"].to_pylist(), strict=True))
    features, labels = region_rows(store, split_of, label_columns(boxes)["colour"], "train")
    expected = [name for n in range(8) for name in colours[f"p{n}"][: 2 if n == 2 else 3]]
    assert labels == expected and len(expected) == 14
    assert features.shape == (14, PROBE_D) and features.dtype == np.float32
    stored, _, _ = store.batch(store.rows(["p0", "p1"]))
    np.testing.assert_array_equal(features[:3], np.concatenate([stored[0, :1], stored[1, :2]]).astype(np.float32))
    assert [PROBE_COLOURS[i] for i in features[:, :3].argmax(1)] == labels  # the code the probe should find
    _, test_labels = region_rows(store, split_of, label_columns(boxes)["colour"], "test")
    assert test_labels == [name for n in range(8, 12) for name in colours[f"p{n}"]]


def test_probe_store_reports_each_label_column(tmp_path: Path) -> None:
    """Colour is coded in the features: 100% accuracy; chance is the test share of the most frequent train label."""
    store, images, boxes, _ = _probe_data(tmp_path)
    results = probe_store(store, images, boxes)
    assert set(results) == {"colour", "size"}
    split_of = dict(zip(images["image_id"].to_pylist(), images["split"].to_pylist(), strict=True))
    for column, values in label_columns(boxes).items():
        train_x, train_y = region_rows(store, split_of, values, "train")
        test_x, test_y = region_rows(store, split_of, values, "test")
        reference = linear_probe(train_x, train_y, test_x, test_y)
        majority = max(sorted(set(train_y)), key=train_y.count)
        assert results[column] == {
            "accuracy": round(100 * reference.accuracy, 2),
            "chance": round(100 * test_y.count(majority) / len(test_y), 2),
            "classes": len(set(train_y)),
            "test_regions": len(test_y),
        }
    # train regions: blue 4, green 5, red 5 -> majority green (the first of the tied ones in sorted order);
    # test regions: 9, of which 3 green
    assert results["colour"]["accuracy"] == 100.0 and results["colour"]["chance"] == 33.33
    assert results["colour"]["classes"] == 3 and results["colour"]["test_regions"] == 9


def test_every_corpus_is_featurized_by_the_encoder_of_the_builtin_train_split(tmp_path: Path) -> None:
    """With ``detector_data`` (the built-in dataset folder) the compact encoder trains on that folder's train split
    whatever corpus is featurized, as one detector serves every real corpus; without it, on the corpus's own."""
    from corpora.languages import Languages
    from corpora.synthetic import SyntheticConfig, generate
    from corpora.synthetic.config import SplitCounts

    root = tmp_path / "builtin"
    config = SyntheticConfig(image_size=64, splits=SplitCounts(4, 2, 2), parallel_pairs=SplitCounts(1, 1, 1))
    generate(config, root, seed=0, languages=Languages("en", ("de",)))
    images, images_root, boxes = features.compact.builtin_training_set(root)
    listed = (root / "task1" / "image_splits" / "train.txt").read_text().split()
    assert images["path"].to_pylist() == listed and set(images["split"].to_pylist()) == {"train"}
    assert images["image_id"].to_pylist() == [Path(name).stem for name in listed]
    assert images_root == root / "images" and boxes == root / "objects.parquet"

    ids = sorted(path.stem for path in (root / "images").glob("*.png"))
    val_and_test = [i for i in ids if f"{i}.png" not in listed]

    def corpus(train_ids: list[str]) -> pa.Table:
        return pa.table(
            {
                "image_id": ids,
                "path": [f"{i}.png" for i in ids],
                "split": ["train" if i in train_ids else "test" for i in ids],
            }
        )

    preset = FeaturesConfig(regions=GIVEN, compact=TINY_PRESET)
    weights = EXTRACTORS["compact"].weights  # type: ignore[union-attr]

    def encoder(table: pa.Table, work: str, detector: Path | None) -> str:
        inputs = ExtractionInputs(table, root / "images", boxes, tmp_path / "in", tmp_path / work, 0, detector)
        return weights_sha256(str(weights(preset, inputs)))

    shared = encoder(corpus(val_and_test), "a", root)
    assert encoder(corpus(ids), "b", root) == shared  # another corpus, the same encoder
    assert encoder(corpus(val_and_test), "c", None) != shared  # its own train split: another encoder
    (root / "task1" / "image_splits" / "train.txt").unlink()
    with pytest.raises(InputError, match=r"train\.txt: not found"):
        features.compact.builtin_training_set(root)
