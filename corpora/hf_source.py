"""The splits of a Hugging Face dataset held on this machine, as Arrow tables: nothing is downloaded.

Three places are read (:func:`load_splits`):

- a ``save_to_disk`` folder (``dataset_dict.json`` with one folder per split, or one split's ``state.json``), read
  with ``datasets.load_from_disk``;
- a folder of Parquet files, ``data/<split>-*.parquet`` (the Hub's layout, and our export's: see
  :mod:`corpora.hf_dataset`) or ``<split>-*.parquet`` / ``<split>.parquet`` at the top; the split is the file name up
  to the first ``-`` or ``.``, and a split's shards are concatenated in file-name order. The README card is not
  needed;
- a dataset id (``owner/name``) in a folder of the ``datasets`` cache (what ``load_dataset`` left there on a machine
  that had the network), read with the cache's own builder, which never goes online. An id that is not in the
  cache is an error naming it.

The files a folder names (the split folders of ``dataset_dict.json``, the data files of each ``state.json``) and the
Parquet files found in it must stay inside it (:func:`~common.paths.inside_root`): a file that names
``../elsewhere.arrow``, or a link that leads out, is refused naming the file and entry.

``datasets`` is imported inside the functions that use it, so importing this module stays cheap.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa

from common.errors import InputError
from common.files import read_json
from common.paths import inside_root
from corpora.tables import read_parquet

PARQUET_NAME = re.compile(r"^(?P<split>[A-Za-z0-9_]+?)(?:[-.].*)?\.parquet$")


def load_splits(source: str, *, cache_dir: Path | None = None) -> dict[str, pa.Table]:
    """Hugging Face split name -> its rows, from the folder ``source`` or, with ``cache_dir``, the dataset id
    ``source`` in that cache folder.

    Raises:
        InputError: a missing folder, a folder in none of the layouts, an unreadable file, or an id not in the cache.
    """
    if cache_dir is not None:
        return _from_cache(source, cache_dir)
    root = Path(source)
    if not root.is_dir():
        raise InputError(f"{root}: dataset folder not found")
    if (root / "dataset_dict.json").is_file() or (root / "state.json").is_file():
        return _from_disk(root)
    for folder in (root / "data", root):
        files = sorted(folder.glob("*.parquet"))
        if files:
            return _from_parquet([inside_root(root, str(path.relative_to(root)), str(path)) for path in files])
    raise InputError(
        f"{root}: not a Hugging Face dataset folder (no dataset_dict.json or state.json of save_to_disk, "
        f"no data/*.parquet or *.parquet files)"
    )


def _from_disk(root: Path) -> dict[str, pa.Table]:
    import datasets

    _check_disk_files(root)
    try:
        loaded = datasets.load_from_disk(str(root))
    except (FileNotFoundError, ValueError, OSError) as error:
        raise InputError(f"{root}: not a readable save_to_disk folder ({error})") from None
    if isinstance(loaded, datasets.DatasetDict):
        return {str(name): _rows(dataset) for name, dataset in loaded.items()}
    return {str(loaded.split or "train"): _rows(loaded)}


def _check_disk_files(root: Path) -> None:
    """The split folders ``dataset_dict.json`` lists stay inside ``root``, the data files each ``state.json`` lists
    inside its folder (where ``save_to_disk`` writes them); entries of the wrong type are left to ``load_from_disk``
    to refuse."""
    folders = [root]
    listing = root / "dataset_dict.json"
    if listing.is_file():
        data = read_json(listing)
        splits = data.get("splits") if isinstance(data, dict) else None
        named = enumerate(splits if isinstance(splits, list) else [])
        folders = [inside_root(root, name, f"{listing}: splits[{i}]") for i, name in named if isinstance(name, str)]
    for folder in folders:
        state = folder / "state.json"
        if not state.is_file():
            continue
        data = read_json(state)
        files = data.get("_data_files") if isinstance(data, dict) else None
        for index, entry in enumerate(files if isinstance(files, list) else []):
            name = entry.get("filename") if isinstance(entry, dict) else None
            if isinstance(name, str):
                inside_root(folder, name, f"{state}: _data_files[{index}]")


def _from_parquet(files: list[Path]) -> dict[str, pa.Table]:
    by_split: dict[str, list[Path]] = defaultdict(list)
    for path in files:
        match = PARQUET_NAME.match(path.name)
        if match is None:
            raise InputError(f"{path}: cannot tell the split from the file name (expected <split>-*.parquet)")
        by_split[match["split"]].append(path)
    return {split: pa.concat_tables([read_parquet(path) for path in paths]) for split, paths in by_split.items()}


def _from_cache(dataset_id: str, cache_dir: Path) -> dict[str, pa.Table]:
    from datasets.packaged_modules.cache.cache import Cache

    if not cache_dir.is_dir():
        raise InputError(f"{cache_dir}: Hugging Face datasets cache folder not found")
    try:
        builder = Cache(
            cache_dir=str(cache_dir),
            repo_id=dataset_id,
            dataset_name=dataset_id.split("/")[-1],
            version="auto",
            hash="auto",
        )
        loaded = builder.as_dataset()
    except (ValueError, FileNotFoundError) as error:
        first = str(error).splitlines()[0]
        raise InputError(
            f"dataset {dataset_id!r} is not in the Hugging Face datasets cache {cache_dir} ({first}); "
            f"nothing is downloaded: load it once where the network is reachable and copy the cache"
        ) from None
    return {str(name): _rows(dataset) for name, dataset in loaded.items()}


def _rows(dataset: Any) -> pa.Table:
    """A Dataset's rows in its order (an index mapping left by select/shuffle applied)."""
    table: pa.Table = dataset.with_format("arrow")[:]
    return table
