"""One caption variant as a Hugging Face dataset folder: ``save_to_disk`` files, Parquet files and a dataset card.

:func:`export_variant` writes, for one variant's canonical caption table (``<augmented>/<variant>/captions.parquet``)
and its corpus's images table, a folder::

    README.md                             dataset card: YAML front matter (languages, license, configs) + body
    data/<split>-00000-of-00001.parquet   one or more Parquet shards per split (the Hub's layout)
    hf/                                   DatasetDict.save_to_disk: dataset_dict.json, <split>/*.arrow, ...

so ``datasets.load_dataset(<folder>)`` (the card's ``configs``), ``datasets.load_dataset("parquet",
data_dir=<folder>/data)`` and ``datasets.load_from_disk(<folder>/hf)`` give the same splits, rows and columns.

Rows: one per caption, in the canonical table's order within each split. Splits are named as Hugging Face names
them (:data:`HF_SPLITS`: our ``val`` is ``validation``, the name the Hub and ``load_dataset``'s file-name
inference use; ``train`` and ``test`` keep their names); a split without captions is left out, and so are
extra evaluation sets (``eval:<name>``). Columns: the
caption's ``image_id``, ``text``, ``lang``, ``kind``, its provenance (``caption_id``, ``origin``, ``system``,
``hop``, ``parent_id``: human captions have origin ``human``, hop 0, no system and no parent), ``image_path``
(relative to the corpus's image folder); with images an ``image`` column (``datasets.Image``) holding the file's
bytes, so both copies load after the source images move or are deleted (one copy per caption: an image with ten
captions is stored ten times); with regions ``regions`` (K, D) float16, ``region_boxes`` (K, 4) float32 pixels
and ``num_regions`` (the first ``num_regions`` rows are the image's regions, the rest zeros), again per caption.

Determinism: the same inputs give byte-identical files. The Arrow files are written here and each split's
fingerprint (``hf/<split>/state.json``) is the SHA-256 of its rows, not the random or path-derived one
``datasets`` would assign. What ``datasets`` writes may change with its version (the pinned one: constraints.txt).

The card's text is rendered by :mod:`corpora.dataset_card`. ``datasets`` is imported inside the functions that use
it, so importing this module stays cheap. The `export` settings are :class:`~corpora.config.ExportConfig`.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from common.errors import InputError
from common.files import atomic_dir, write_text
from common.paths import inside_root
from corpora.dataset_card import CardInfo, dataset_card
from corpora.image_files import OUTSIDE_SETTING, read_size
from corpora.tables import SPLITS, validate_captions, validate_images

if TYPE_CHECKING:
    from datasets import Dataset, Features

HF_SPLITS = {"train": "train", "val": "validation", "test": "test"}  # canonical split -> Hugging Face split
PROVENANCE = ("caption_id", "origin", "system", "hop", "parent_id")  # the canonical table's provenance columns
TEXT_COLUMNS = ("image_id", "text", "lang", "kind")
DATA_DIR, DISK_DIR, CARD = "data", "hf", "README.md"
BATCH_ROWS = 256  # rows built in memory at a time (with images: their bytes)
MAX_SHARD_BYTES = 500 * 2**20  # Parquet and Arrow shards of at most about this size
MAX_SHOWN = 5  # offending images an error lists


class RegionSource(Protocol):
    """Region features by image (:class:`features.store.FeatureStore` is one)."""

    path: Path
    max_regions: int
    dim: int

    def rows(self, image_ids: Sequence[str]) -> np.ndarray: ...

    def batch(self, rows: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...


@dataclass(frozen=True)
class ExportSummary:
    """What :func:`export_variant` wrote.

    Attributes:
        rows: Hugging Face split -> language -> captions.
        columns: The dataset's columns in order.
    """

    rows: dict[str, dict[str, int]]
    columns: tuple[str, ...]


def export_variant(
    captions: pa.Table,
    images: pa.Table,
    out_dir: str | Path,
    *,
    card: CardInfo,
    image_root: str | Path | None = None,
    with_images: bool = False,
    regions: RegionSource | None = None,
    source: str = "captions",
    outside_allowed: bool = False,
) -> ExportSummary:
    """Write ``captions`` (one variant's canonical caption table) as a Hugging Face dataset folder at ``out_dir``
    (replaced as a whole, atomically); see the module docstring for the layout and columns.

    Args:
        captions: The canonical caption table.
        images: The corpus's images table (every caption's image, with its split and relative path).
        out_dir: The folder to write.
        card: What the dataset card says about the data's origin.
        image_root: The folder the images table's paths are relative to (needed with ``with_images``).
        with_images: Embed each caption's image file.
        regions: Add each caption's image's region features from this store.
        source: The captions' file, for error messages.
        outside_allowed: Image paths may lead out of ``image_root`` (``prepare.images_outside_root``).

    Raises:
        InputError: an invalid table (naming ``source`` and the row), a caption whose image is not in ``images``,
            a missing or unreadable image file, or an image the region store lacks.
    """
    validate_images(images, source=f"{source}: images table")
    validate_captions(captions, images=images, source=source)
    position = pc.index_in(captions.column("image_id"), value_set=images.column("image_id"))
    captions = captions.append_column("image_path", pc.take(images.column("path"), position))
    root = _checked_image_root(captions, image_root, source, outside_allowed) if with_images else None
    if regions is not None:
        _check_regions(captions, regions)
    features = _features(with_images, regions)
    import datasets

    summary: dict[str, dict[str, int]] = {}
    with _quiet(datasets), atomic_dir(out_dir) as tmp:
        scratch = tmp / ".build"
        scratch.mkdir()
        splits: dict[str, Dataset] = {}
        for split in SPLITS:
            rows = captions.filter(pc.equal(captions.column("split"), split))
            if not rows.num_rows:
                continue
            name = HF_SPLITS[split]
            splits[name] = _split_dataset(rows, name, scratch / f"{name}.arrow", features, root, regions, card)
            counts = pc.value_counts(rows.column("lang")).to_pylist()
            summary[name] = {item["values"]: item["counts"] for item in sorted(counts, key=lambda c: c["values"])}
        if not splits:
            raise InputError(f"{source}: no captions to export")
        dataset_dict = datasets.DatasetDict(splits)
        dataset_dict.save_to_disk(str(tmp / DISK_DIR), num_shards={n: _shards(d) for n, d in splits.items()})
        (tmp / DATA_DIR).mkdir()
        for name, dataset in splits.items():
            count = _shards(dataset)
            for index in range(count):
                shard = dataset.shard(num_shards=count, index=index, contiguous=True)
                shard.to_parquet(str(tmp / DATA_DIR / f"{name}-{index:05d}-of-{count:05d}.parquet"))
        card_text = dataset_card(
            card, summary, _origins(captions), tuple(features), regions, data_dir=DATA_DIR, disk_dir=DISK_DIR
        )
        write_text(tmp / CARD, card_text)
        del dataset_dict, splits  # release the memory maps of the scratch files
        shutil.rmtree(scratch)
    return ExportSummary(summary, tuple(features))


def _checked_image_root(captions: pa.Table, image_root: str | Path | None, source: str, outside_allowed: bool) -> Path:
    if image_root is None:
        raise InputError(f"{source}: exporting images needs the image folder")
    root = Path(image_root)
    if not root.is_dir():
        raise InputError(f"{root}: image folder not found")
    paths = pc.unique(captions.column("image_path")).to_pylist()
    for path in paths:  # nothing outside the declared image folder is embedded (read and published)
        inside_root(root, path, f"{source}: images table", outside_allowed=outside_allowed, setting=OUTSIDE_SETTING)
    missing = [path for path in paths if not (root / path).is_file()]
    if missing:
        raise InputError(
            f"{root}: {len(missing)} of the {len(paths)} images of {source} are missing, first: "
            f"{', '.join(missing[:MAX_SHOWN])}"
        )
    return root


def _check_regions(captions: pa.Table, regions: RegionSource) -> None:
    try:
        regions.rows(pc.unique(captions.column("image_id")).to_pylist())
    except KeyError as error:
        raise InputError(str(error)) from None


def _features(with_images: bool, regions: RegionSource | None) -> Features:
    from datasets import Array2D, Features, Image, Value

    columns: dict[str, Any] = {name: Value("string") for name in (*TEXT_COLUMNS, *PROVENANCE, "image_path")}
    columns["hop"] = Value("int32")
    if with_images:
        columns["image"] = Image()
    if regions is not None:
        columns["regions"] = Array2D((regions.max_regions, regions.dim), "float16")
        columns["region_boxes"] = Array2D((regions.max_regions, 4), "float32")
        columns["num_regions"] = Value("int32")
    return Features(columns)


def _split_dataset(
    rows: pa.Table,
    name: str,
    path: Path,
    features: Features,
    root: Path | None,
    regions: RegionSource | None,
    card: CardInfo,
) -> Dataset:
    """Write ``rows`` as an Arrow stream file in batches, then map it as a Dataset whose fingerprint is the hash of
    its rows."""
    from datasets import Dataset, DatasetInfo, NamedSplit
    from datasets.table import MemoryMappedTable

    schema = features.arrow_schema
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, schema) as writer:
        for start in range(0, rows.num_rows, BATCH_ROWS):
            writer.write_table(_batch(rows.slice(start, BATCH_ROWS), schema, root, regions))
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while block := stream.read(2**20):
            digest.update(block)
    info = DatasetInfo(
        description=f"{card.corpus}: caption variant {card.variant} ({card.definition})",
        features=features,
        license="other",
    )
    return Dataset(
        MemoryMappedTable.from_file(str(path)), info=info, split=NamedSplit(name), fingerprint=digest.hexdigest()[:16]
    )


def _batch(rows: pa.Table, schema: pa.Schema, root: Path | None, regions: RegionSource | None) -> pa.Table:
    columns: dict[str, pa.Array | pa.ChunkedArray] = {
        name: rows.column(name) for name in schema.names if name in rows.column_names
    }
    if root is not None:
        files: dict[str, bytes] = {}
        for path in pc.unique(rows.column("image_path")).to_pylist():
            read_size(root / path)  # an InputError naming the file unless Pillow can open it
            files[path] = (root / path).read_bytes()
        paths = rows.column("image_path").to_pylist()
        columns["image"] = pa.array(
            [{"bytes": files[path], "path": path} for path in paths], schema.field("image").type
        )
    if regions is not None:
        features, mask, boxes = regions.batch(regions.rows(rows.column("image_id").to_pylist()))
        columns["regions"] = _array2d(features.astype(np.float16), schema.field("regions").type)
        columns["region_boxes"] = _array2d(boxes.astype(np.float32), schema.field("region_boxes").type)
        columns["num_regions"] = pa.array(mask.sum(axis=1), pa.int32())
    return pa.table(columns, schema=schema)


def _array2d(values: np.ndarray, kind: pa.ExtensionType) -> pa.ExtensionArray:
    """(B, K, D) values as a ``datasets.Array2D`` column (storage: list of K lists of D values)."""
    count, length, width = values.shape
    inner = pa.ListArray.from_arrays(
        pa.array(np.arange(0, count * length * width + 1, width, dtype=np.int32)), pa.array(values.reshape(-1))
    )
    outer = pa.ListArray.from_arrays(pa.array(np.arange(0, count * length + 1, length, dtype=np.int32)), inner)
    return pa.ExtensionArray.from_storage(kind, outer)


def _shards(dataset: Dataset) -> int:
    return max(1, math.ceil(dataset.data.nbytes / MAX_SHARD_BYTES))


@contextlib.contextmanager
def _quiet(datasets: Any) -> Iterator[None]:
    """No progress bars from ``datasets`` (one per split and file: noise in a stage's log)."""
    enabled = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        if enabled:
            datasets.enable_progress_bars()


def _origins(captions: pa.Table) -> list[dict[str, Any]]:
    """Rows per split (its Hugging Face name), language, origin, system and hop, in a stable order."""
    keys = ["split", "lang", "origin", "system", "hop"]
    grouped = captions.group_by(keys, use_threads=False).aggregate([("caption_id", "count")]).to_pylist()
    order = {split: index for index, split in enumerate(SPLITS)}
    grouped = [row for row in grouped if row["split"] in order]  # extra evaluation sets (eval:<name>) are not exported
    rows = sorted(
        grouped, key=lambda row: (order[row["split"]], row["hop"], row["origin"], row["system"] or "", row["lang"])
    )
    return [{**row, "split": HF_SPLITS[row["split"]]} for row in rows]
