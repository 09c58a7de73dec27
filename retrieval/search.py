"""Text-to-image search with a trained model over a gallery of FeatureStore images.

For models whose image embedding does not depend on the query (``gallery_cacheable``: SAN, DAN, MULE, VSE++,
...), the gallery is encoded once and kept in a cache folder outside the model folder (a DVC output that reading
must not change), in a safetensors file (:mod:`common.tensor_tree`, no pickle) named by the model file's and the
store's fingerprints; a cache that is unreadable, of other images or holds other than finite vectors of the
gallery's size is never trusted: it is rebuilt. SCAN
scores every (image, query) pair, so its gallery is re-encoded per search (chunked, as in evaluation).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from common.errors import InputError
from common.tensor_tree import load_tree, save_tree
from retrieval.checkpoint import LoadedModel
from retrieval.data import RegionLookup
from retrieval.inference import encode_images, evaluating, similarity_matrix
from retrieval.model import Embedded, TextBatch
from retrieval.vocab import EmptyCaptionError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Hit:
    image_id: str
    score: float


def fingerprint(*paths: Path) -> str:
    """Identity of files for cache invalidation: their names, sizes, modification times and inodes. A stat, not a
    hash, which would read all of regions.npy (gigabytes at Flickr30K size) at every query; a file rewritten the way
    every writer here writes (a new file renamed into place) gets another inode even when its size and time match."""
    parts = []
    for path in paths:
        stat = path.stat()
        parts.append(f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}:{stat.st_ino}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def cache_file(cache_dir: Path, identity: str, split: str) -> Path:
    """The gallery cache of a model and store (``identity``: :func:`fingerprint`) for the images of ``split``."""
    return cache_dir / f"gallery-{hashlib.sha256(f'{identity}:{split}'.encode()).hexdigest()[:20]}.safetensors"


def _cached(cache: Path, identity: str, image_ids: Sequence[str]) -> Embedded | None:
    """The cached embeddings when the file is readable and matches; None (with a warning) otherwise."""
    try:
        stored = load_tree(cache)
    except InputError as error:
        logger.warning("%s; rebuilding the gallery cache", error)
        return None
    vectors = stored.get("vectors") if isinstance(stored, dict) else None
    if not (
        isinstance(stored, dict) and stored.get("identity") == identity and stored.get("image_ids") == list(image_ids)
    ):
        return None  # another model, store or gallery: a cache of other inputs, not an error
    if not (
        isinstance(vectors, torch.Tensor)
        and vectors.is_floating_point()
        and vectors.dim() >= 2
        and vectors.size(0) == len(image_ids)
        and bool(torch.isfinite(vectors).all())
    ):
        logger.warning("%s: gallery cache holds no finite vectors of %d images; rebuilding it", cache, len(image_ids))
        return None
    return Embedded(vectors)


def gallery_embeddings(
    loaded: LoadedModel,
    regions: RegionLookup,
    image_ids: Sequence[str],
    rows: np.ndarray,
    *,
    cache: Path | None,
    identity: str,
    device: torch.device,
) -> Embedded:
    """The gallery's image embeddings, from ``cache`` when it holds valid ones of ``identity`` and ``image_ids``;
    otherwise encoded and, for a cacheable model, written to ``cache``."""
    if cache is not None and cache.is_file():
        cached = _cached(cache, identity, image_ids)
        if cached is not None:
            return cached
    embedded = encode_images(loaded.model, regions, rows, device=device)
    if cache is not None and loaded.model.gallery_cacheable:
        save_tree(cache, {"identity": identity, "image_ids": list(image_ids), "vectors": embedded.vectors})
    return embedded


def search(
    loaded: LoadedModel,
    gallery: Embedded,
    image_ids: Sequence[str],
    query: str,
    lang: str,
    *,
    k: int,
    device: torch.device,
) -> list[Hit]:
    """The ``k`` best images for ``query`` (in ``lang``), best first.

    Raises:
        InputError: a language the model was not trained on, or a query without words.
    """
    if lang not in loaded.vocab.languages:
        raise InputError(f"the model was trained on {', '.join(loaded.vocab.languages)}; it cannot search {lang!r}")
    try:
        ids = loaded.vocab.encode(query, lang, max_len=loaded.max_len)
    except EmptyCaptionError as error:
        raise InputError(f"query: {error}") from error
    batch = TextBatch(torch.tensor([ids]), torch.tensor([len(ids)]), torch.tensor([loaded.vocab.lang_index(lang)]))
    with evaluating(loaded.model):
        text = loaded.model.encode_texts(batch.to(device))
    scores = similarity_matrix(loaded.model, gallery, text, device=device)[:, 0]
    top = torch.topk(scores, min(k, len(image_ids)))
    return [Hit(image_ids[int(index)], float(score)) for score, index in zip(top.values, top.indices, strict=True)]


def describe(hits: Sequence[Hit], paths: dict[str, str]) -> str:
    """One line per hit: rank, score, image id and path (as JSON-safe text)."""
    lines = []
    for rank, hit in enumerate(hits, start=1):
        path = paths.get(hit.image_id, "")
        lines.append(f"{rank:>3}  {hit.score:8.4f}  {hit.image_id}  {path}".rstrip())
    return "\n".join(lines)


def hits_json(hits: Sequence[Hit], paths: dict[str, str]) -> str:
    return json.dumps([{"image_id": h.image_id, "score": h.score, "path": paths.get(h.image_id)} for h in hits])
