"""A trained RegionalMMT with its text pipeline: sentences (and their images' regions) in, sentences out; or
sentence pairs in, their log-probabilities out."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from common.checkpoints import checkpoint_files
from common.errors import InputError
from common.stopping import check
from mmt.beam import beam_search
from mmt.checkpoint import check_text_pipeline, load_mmt
from mmt.model import RegionalMMT, SourceBatch, pad_ids, source_batch
from mmt.text import TextPipeline

if TYPE_CHECKING:  # the store module loads pyarrow, which a text-only system never needs (`mmtr translate`)
    from features.store import FeatureStore

AutocastFactory = Callable[[], AbstractContextManager[object]]

logger = logging.getLogger(__name__)


class MMTTranslator:
    """Batched beam-search translation with a :class:`RegionalMMT` (multimodal when given a FeatureStore).

    Args:
        model: The trained model.
        text: The pair's text pipeline (Moses + subwords).
        name: System name, e.g. ``mmt-en-de``.
        regions: Region features by image id; None translates text-only (the model's single-thread mode).
        device: Where to decode.
        autocast: Precision context factory.
    """

    def __init__(
        self,
        model: RegionalMMT,
        text: TextPipeline,
        *,
        name: str,
        regions: FeatureStore | None,
        device: torch.device,
        autocast: AutocastFactory = nullcontext,
    ) -> None:
        self.model, self.text, self.name, self.regions = model.to(device).eval(), text, name, regions
        self.device, self.autocast = device, autocast

    @classmethod
    def load(
        cls,
        model_dir: str | Path,
        checkpoint: str,
        *,
        regions: FeatureStore | None,
        device: torch.device,
        autocast: AutocastFactory = nullcontext,
    ) -> MMTTranslator:
        """Load the checkpoint ``<model_dir>/<checkpoint>`` (a stem such as ``finetune``, or one of its file names)
        with the text pipeline saved beside it."""
        folder = Path(model_dir)
        files = checkpoint_files(folder / checkpoint)
        if not files.weights.is_file():
            raise InputError(f"{files.weights}: no trained model (run the train_mmt stage for this pair)")
        model, extra = load_mmt(files.weights, device=device)
        text = TextPipeline.load(folder)
        check_text_pipeline(
            files.fields, model.shape, extra, text.identity(), text.src_vocab.size, text.tgt_vocab.size, folder
        )
        return cls(model, text, name=folder.name, regions=regions, device=device, autocast=autocast)

    def translate(
        self,
        sentences: Sequence[str],
        image_ids: Sequence[str] | None = None,
        *,
        beam: int = 5,
        batch_size: int = 64,
        max_len: int = 100,
        stop: threading.Event | None = None,
    ) -> list[str]:
        """Translations in input order; ``image_ids`` (one per sentence) are needed with regions; ``stop`` set, the
        translation is given up before the next batch."""
        encoded = self.text.encode_source(sentences).ids
        outputs: list[list[int]] = [[] for _ in encoded]
        for chosen, batch in self._source_batches(encoded, image_ids, batch_size):
            check(stop, f"{self.name}: translating")
            with torch.inference_mode(), self.autocast():
                best = beam_search(self.model, batch, beam=beam, max_len=max_len)
            for index, ids in zip(chosen, best, strict=True):
                outputs[index] = ids
        return self.text.decode_target(outputs)

    def score(
        self,
        sources: Sequence[str],
        targets: Sequence[str],
        image_ids: Sequence[str] | None = None,
        *,
        batch_size: int = 64,
    ) -> list[float]:
        """Teacher-forced log-probability of each target, EOS included; ``image_ids`` are needed with regions."""
        if len(targets) != len(sources):
            raise ValueError(f"{len(sources)} sources but {len(targets)} targets (expected one each)")
        encoded, wanted = self.text.encode_source(sources), self.text.encode_target(targets)
        if encoded.truncated or wanted.truncated:
            logger.warning(
                "%s: scoring %d source and %d target sentences cut to %d subwords",
                self.name,
                encoded.truncated,
                wanted.truncated,
                self.text.config.max_len,
            )
        shape = self.model.shape
        scores = [0.0] * len(sources)
        for chosen, batch in self._source_batches(encoded.ids, image_ids, batch_size):
            tgt_out = pad_ids([wanted.ids[i] for i in chosen], pad_id=shape.pad_id, device=self.device)  # (B, M)
            tgt_in = pad_ids(
                [(shape.bos_id, *wanted.ids[i][:-1]) for i in chosen], pad_id=shape.pad_id, device=self.device
            )
            with torch.inference_mode(), self.autocast():
                logits = self.model(batch, tgt_in)  # (B, M, V)
            # float32 at least: summing fp16 log-probabilities loses the differences contrastive scoring looks for
            log_probs = torch.log_softmax(logits.to(torch.promote_types(logits.dtype, torch.float32)), dim=-1)
            picked = log_probs.gather(-1, tgt_out[..., None]).squeeze(-1)  # (B, M)
            totals = picked.masked_fill(tgt_out == shape.pad_id, 0.0).sum(dim=1)
            for index, total in zip(chosen, totals.tolist(), strict=True):
                scores[index] = total
        return scores

    def _source_batches(
        self, encoded: Sequence[Sequence[int]], image_ids: Sequence[str] | None, batch_size: int
    ) -> Iterator[tuple[list[int], SourceBatch]]:
        """(input positions, their batch) over ``encoded`` in batches of similar length, with each sentence's regions.

        Raises:
            InputError: a multimodal translator without one image id per sentence.
        """
        if self.regions is not None and (image_ids is None or len(image_ids) != len(encoded)):
            raise InputError(f"{self.name} is multimodal: give one image id per sentence")
        order = sorted(range(len(encoded)), key=lambda index: len(encoded[index]))  # similar lengths batch well
        for start in range(0, len(order), batch_size):
            chosen = order[start : start + batch_size]
            batch_regions, batch_mask = self._regions([image_ids[i] for i in chosen] if image_ids else None)
            batch = source_batch(
                [encoded[i] for i in chosen],
                pad_id=self.model.shape.pad_id,
                device=self.device,
                regions=batch_regions,
                region_mask=batch_mask,
            )
            yield chosen, batch

    def _regions(self, image_ids: Sequence[str] | None) -> tuple[np.ndarray | None, np.ndarray | None]:
        if self.regions is None or image_ids is None:
            return None, None
        try:
            rows = self.regions.rows(image_ids)
        except KeyError as error:
            raise InputError(f"{self.name}: region features missing for an image ({error})") from None
        features, mask, _ = self.regions.batch(rows)
        empty = ~mask.any(axis=1)
        if empty.any():
            image_id = image_ids[int(np.flatnonzero(empty)[0])]
            raise InputError(
                f"{self.name}: image {image_id!r} has no regions in {self.regions.path} (a skipped image?)"
            )
        return features.astype(np.float32), mask
