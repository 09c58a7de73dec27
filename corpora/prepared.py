"""The ``data/prepared/`` folder as one unit: images, captions, parallel and the optional evaluation tables, written
atomically."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from common.errors import InputError
from common.files import atomic_dir, remove_stale_temporaries, write_json
from corpora import tables

IMAGE_DEPENDENT_FILE = "image_dependent.parquet"  # optional: Corpus.image_dependent
CONTRASTIVE_FILE = "contrastive.parquet"  # optional: Corpus.contrastive
CLEANING_FILE = "cleaning.json"  # only when prepare.text.control_characters: remove dropped characters


@dataclass(frozen=True)
class Corpus:
    """Images and their captions, as produced by one adapter (or by the synthetic generator).

    Attributes:
        images: The images table.
        captions: The captions table.
        parallel: "<src>-<tgt>" -> the text-only parallel table.
        image_dependent: The words of each translation caption that the image decides, where the dataset records
            them (evaluation only; real Multi30K does not: None).
        contrastive: Ambiguous pivot sentences with two images and the right translation with each (evaluation
            only; None when the corpus has none).
        removed_characters: Control characters the reader removed from the captions (``prepare.text``).
    """

    images: pa.Table
    captions: pa.Table
    parallel: Mapping[str, pa.Table] = field(default_factory=dict)
    image_dependent: pa.Table | None = None
    contrastive: pa.Table | None = None
    removed_characters: int = 0


def write_prepared(corpus: Corpus, out_dir: str | os.PathLike[str]) -> None:
    """Validate every table, then replace ``out_dir`` as a whole (a killed run leaves the old folder)."""
    tables.validate_images(corpus.images, source="images")
    tables.validate_captions(corpus.captions, images=corpus.images, source="captions")
    for name, table in corpus.parallel.items():
        tables.validate_parallel(table, source=f"parallel {name}")
    if corpus.image_dependent is not None:
        tables.validate_image_dependent(corpus.image_dependent, images=corpus.images, source="image-dependent words")
    if corpus.contrastive is not None:
        tables.validate_contrastive(corpus.contrastive, images=corpus.images, source="contrastive items")
    with atomic_dir(out_dir) as tmp:
        tables.write_parquet(corpus.images, tmp / "images.parquet")
        tables.write_parquet(corpus.captions, tmp / "captions.parquet")
        if corpus.image_dependent is not None:
            tables.write_parquet(corpus.image_dependent, tmp / IMAGE_DEPENDENT_FILE)
        if corpus.contrastive is not None:
            tables.write_parquet(corpus.contrastive, tmp / CONTRASTIVE_FILE)
        if corpus.parallel:
            (tmp / "parallel").mkdir()
        for name, table in sorted(corpus.parallel.items()):
            tables.write_parquet(table, tmp / "parallel" / f"{name}.parquet")
        if corpus.removed_characters:
            write_json(tmp / CLEANING_FILE, {"removed_control_characters": corpus.removed_characters})


def read_prepared(prepared_dir: str | os.PathLike[str]) -> Corpus:
    """Read and validate a prepared folder written by :func:`write_prepared`."""
    root = Path(prepared_dir)
    if not root.is_dir():
        raise InputError(f"{root}: prepared folder not found (run the prepare stage first)")
    images = tables.read_images(root / "images.parquet")
    captions = tables.read_captions(root / "captions.parquet", images=images)
    parallel = {path.stem: tables.read_parallel(path) for path in sorted((root / "parallel").glob("*.parquet"))}
    image_dependent = contrastive = None
    if (root / IMAGE_DEPENDENT_FILE).is_file():
        image_dependent = tables.read_image_dependent(root / IMAGE_DEPENDENT_FILE, images=images)
    if (root / CONTRASTIVE_FILE).is_file():
        contrastive = tables.read_contrastive(root / CONTRASTIVE_FILE, images=images)
    return Corpus(images, captions, parallel, image_dependent, contrastive)


def read_shared_images(prepared_dirs: Sequence[str | os.PathLike[str]]) -> pa.Table:
    """The images of several prepared corpora over one image folder, each once (in order of first appearance): the
    index of their shared FeatureStore. An image keeps the row (split, size) of the first corpus that lists it.

    Raises:
        InputError: an image id that two corpora give different files (the corpora name images differently).
    """
    seen: dict[str, tuple[str, str]] = {}  # image id -> (path, the corpus that listed it first)
    parts: list[pa.Table] = []
    for folder in prepared_dirs:
        table = tables.read_images(Path(folder) / "images.parquet")
        fresh = []
        for row, (image_id, path) in enumerate(
            zip(table.column("image_id").to_pylist(), table.column("path").to_pylist(), strict=True)
        ):
            if image_id not in seen:
                seen[image_id] = (path, str(folder))
                fresh.append(row)
            elif seen[image_id][0] != path:
                raise InputError(
                    f"{folder}/images.parquet row {row}: image {image_id!r} is {path!r}, but {seen[image_id][1]} "
                    f"gives it as {seen[image_id][0]!r}; corpora sharing a feature store must name each file alike"
                )
        parts.append(table.take(pa.array(fresh, pa.int64())))
    return pa.concat_tables(parts)


def read_shared_captions(prepared_dirs: Sequence[str | os.PathLike[str]], images: pa.Table) -> pa.Table:
    """The captions of the images :func:`read_shared_images` gave, each image's from the corpus that listed it
    first (so that a check against a release's captions file sees one corpus's captions per image)."""
    claimed: set[str] = set()
    parts: list[pa.Table] = []
    for folder in prepared_dirs:
        own = tables.read_images(Path(folder) / "images.parquet")
        captions = tables.read_captions(Path(folder) / "captions.parquet", images=own)
        fresh = [image_id for image_id in own.column("image_id").to_pylist() if image_id not in claimed]
        claimed.update(fresh)
        parts.append(captions.filter(pc.is_in(captions.column("image_id"), pa.array(fresh, pa.string()))))
    shared = pa.concat_tables(parts)
    tables.validate_captions(shared, images=images, source=", ".join(str(folder) for folder in prepared_dirs))
    return shared


def parallel_table_name(src: str, tgt: str) -> str:
    """The file of one language pair in the prepared parallel folder (one `prepare_parallel@<target>` each)."""
    return f"{src}-{tgt}.parquet"


def write_parallel_table(table: pa.Table, path: str | os.PathLike[str]) -> None:
    """Validate one pair's text-only table and write it atomically to ``path`` (the whole output of its stage: the
    temporary file a killed run left beside it is removed first)."""
    tables.validate_parallel(table, source=f"parallel {Path(path).stem}")
    remove_stale_temporaries(Path(path))
    tables.write_parquet(table, path)


def caption_variant_file(lang: str) -> str:
    """The file of one language's captions in a caption variant's folder (``<augmented>/<variant>/``): a
    retrieval run depends on the languages it reads alone."""
    return f"captions.{lang}.parquet"


def write_caption_variant(
    captions: pa.Table, out_dir: str | os.PathLike[str], *, languages: Sequence[str], images: pa.Table
) -> None:
    """Write a caption variant as one file per language: every language it holds and every one of ``languages``
    (empty where it holds none, so that a run's dependency on it exists)."""
    folder = Path(out_dir)
    tables.validate_captions(captions, images=images, source=str(folder))  # whole: every parent is in it
    folder.mkdir(parents=True, exist_ok=True)
    held = pc.unique(captions.column("lang")).to_pylist()
    for lang in sorted({*held, *languages}):
        tables.write_parquet(
            captions.filter(pc.equal(captions.column("lang"), lang)), folder / caption_variant_file(lang)
        )


def variant_languages(folder: str | os.PathLike[str]) -> list[str]:
    """The languages a caption variant's folder holds a file for."""
    prefix, suffix = caption_variant_file("@").split("@")
    return sorted(path.name[len(prefix) : -len(suffix)] for path in Path(folder).glob(caption_variant_file("*")))


def caption_variant_files(folder: str | os.PathLike[str], languages: Sequence[str] | None = None) -> list[Path]:
    """The files of a caption variant's folder in ``languages`` (None: every one it holds), in language order. A
    language without a file has no captions in the variant (a file is written for every language it holds).

    Raises:
        InputError: no such folder, or a folder without caption files.
    """
    root = Path(folder)
    if not root.is_dir():
        raise InputError(f"{root}: caption variant folder not found (run the augment stage first)")
    held = variant_languages(root)
    if not held:
        raise InputError(f"{root}: no {caption_variant_file('<lang>')} files (run the augment stage first)")
    wanted = held if languages is None else sorted(set(languages) & set(held))
    return [root / caption_variant_file(lang) for lang in wanted]


def read_caption_variant(
    folder: str | os.PathLike[str],
    *,
    languages: Sequence[str] | None = None,
    columns: Sequence[str] | None = None,
    images: pa.Table | None = None,
) -> pa.Table:
    """A caption variant's captions in ``languages`` (None: all it holds), languages in order, checked once (with
    ``images``, their image references too). Read whole, every synthesized caption's parent is in it; read in part,
    a parent may be in a language not read.

    Raises:
        InputError: as :func:`caption_variant_files`, or a table that breaks the captions schema.
    """
    files = caption_variant_files(folder, languages)
    if files:
        table = pa.concat_tables([tables.read_parquet(path) for path in files])
    else:  # none of the languages asked for: no rows, in the variant's schema
        table = tables.read_parquet(caption_variant_files(folder)[0]).slice(0, 0)
    tables.validate_captions(table, images=images, source=str(folder), parents_held=languages is None)
    return table.select(list(columns)) if columns is not None else table


def read_parallel_tables(parallel_dir: str | os.PathLike[str]) -> dict[str, pa.Table]:
    """The text-only corpus, one file per pair written by :func:`write_parallel_table`: ``"<src>-<tgt>"`` -> table."""
    root = Path(parallel_dir)
    if not root.is_dir():
        raise InputError(f"{root}: prepared parallel folder not found (run the prepare_parallel stage first)")
    return {path.stem: tables.read_parallel(path) for path in sorted(root.glob("*.parquet"))}


def checked_parallel_table(parallel_dir: str | os.PathLike[str], name: str) -> str:
    """The file of pair ``name`` (``en-de``) in the prepared parallel folder, validated as :func:`read_parallel_tables`
    validates it (the table is read whole once and let go): training then reads it a chunk at a time.

    Raises:
        InputError: no such folder or file, or a table that breaks the parallel schema.
    """
    root = Path(parallel_dir)
    if not root.is_dir():
        raise InputError(f"{root}: prepared parallel folder not found (run the prepare_parallel stage first)")
    path = root / f"{name}.parquet"
    if not path.is_file():
        raise InputError(f"prepared tables: no parallel corpus {name}.parquet (check paths.parallel)")
    tables.read_parallel(path)
    return str(path)


def count_captions(corpus: Corpus) -> list[dict[str, object]]:
    """Per split and language: images, comparable captions, translation captions."""
    images, captions = corpus.images, corpus.captions
    rows: list[dict[str, object]] = []
    for split in pc.unique(images.column("split")).to_pylist():
        in_split = captions.filter(pc.equal(captions.column("split"), split))
        split_images = pc.sum(pc.equal(images.column("split"), split)).as_py()
        for lang in sorted(pc.unique(in_split.column("lang")).to_pylist()):
            kinds = in_split.filter(pc.equal(in_split.column("lang"), lang)).column("kind")
            rows.append(
                {
                    "split": split,
                    "lang": lang,
                    "images": split_images,
                    "comparable": pc.sum(pc.equal(kinds, "comparable")).as_py() or 0,
                    "translation": pc.sum(pc.equal(kinds, "translation")).as_py() or 0,
                }
            )
    return rows


def count_parallel(parallel: Mapping[str, pa.Table]) -> list[dict[str, object]]:
    """Per language pair and split: sentence pairs of the text-only corpus."""
    rows: list[dict[str, object]] = []
    for name, table in sorted(parallel.items()):
        for split in pc.unique(table.column("split")).to_pylist():
            rows.append({"pair": name, "split": split, "pairs": pc.sum(pc.equal(table.column("split"), split)).as_py()})
    return rows
