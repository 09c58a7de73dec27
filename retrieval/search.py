"""Text-to-image search with a trained model over a gallery of FeatureStore images.

For models whose image embedding does not depend on the query (``gallery_cacheable``: SAN, DAN, MULE, VSE++,
...), the gallery is encoded once and kept in ``<model dir>/gallery-<name>.pt``; the cache records the model
file's and the store's fingerprints and is rebuilt when either changes. SCAN scores every (image, query)
pair, so its gallery is re-encoded per search (chunked, as in evaluation).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from corpora.io import InputError, atomic_path
from retrieval.checkpoint import LoadedModel
from retrieval.data import RegionLookup
from retrieval.inference import encode_images, evaluating, similarity_matrix
from retrieval.model import Embedded, TextBatch
from retrieval.vocab import EmptyCaptionError


@dataclass(frozen=True)
class Hit:
    image_id: str
    score: float


def fingerprint(*paths: Path) -> str:
    """Identity of files for cache invalidation: their names, sizes and modification times."""
    parts = []
    for path in paths:
        stat = path.stat()
        parts.append(f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


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
    """The gallery's image embeddings, from ``cache`` when it matches ``identity`` and ``image_ids``."""
    if cache is not None and cache.is_file():
        stored = torch.load(cache, map_location="cpu", weights_only=True)
        if stored.get("identity") == identity and stored.get("image_ids") == list(image_ids):
            return Embedded(stored["vectors"])
    embedded = encode_images(loaded.model, regions, rows, device=device)
    if cache is not None and loaded.model.gallery_cacheable:
        with atomic_path(cache) as tmp:
            torch.save({"identity": identity, "image_ids": list(image_ids), "vectors": embedded.vectors}, tmp)
    return embedded


def search(
    loaded: LoadedModel, gallery: Embedded, image_ids: Sequence[str], query: str, lang: str, *, k: int,
    device: torch.device,
) -> list[Hit]:  # fmt: skip
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
