"""A trained system's test scores: BLEU and chrF, METEOR 1.5, image awareness, image-dependent words, contrastive items.

:func:`evaluate_system` loads the system in a folder (:func:`mmt.systems.load_system`) and scores it on a direction's
test captions; :func:`compared_accuracies` puts two systems' image-dependent and contrastive accuracies side by side.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from common.runtime import Runtime
from mmt.meteor import meteor_scores
from mmt.metrics import (
    ContrastiveScores,
    contrastive_accuracy,
    image_dependent_scores,
    scoring_tokens,
    translation_scores,
)
from mmt.pairs import ContrastiveItem, Pairs
from mmt.systems import load_system, system_backend
from mmt.translator_protocol import Translator


@dataclass(frozen=True)
class Evaluation:
    """A system's scores on a test set and the translations they were computed from."""

    metrics: dict[str, object]
    hypotheses: list[str]


def evaluate_system(
    folder: str,
    test: Pairs,
    *,
    store: str | None,
    tgt: str,
    beam: int,
    runtime: Runtime,
    meteor: bool = True,
    contrastive: Sequence[ContrastiveItem] | None = None,
    stop: threading.Event | None = None,
) -> Evaluation:
    """The scores of the system in ``folder`` on ``test`` (its translations given up before a batch once ``stop`` is
    set: :class:`common.stopping.Cancelled`).

    BLEU (both conventions), chrF with their signatures, METEOR 1.5 unless ``meteor`` is false (or why not:
    :mod:`mmt.meteor`); for a
    multimodal system also its image awareness (Elliott 2018): BLEU with every sentence's own image minus BLEU with
    another sentence's image (:func:`shuffled_images`), ``None`` for text-only systems. Where the corpus records them,
    ``image_dependent`` (:func:`image_dependent_metrics`) and ``contrastive`` (:func:`contrastive_metrics`) on
    ``contrastive``, the direction's items; otherwise these keys hold why they are absent.
    """
    system = load_system(folder, store, runtime)
    multimodal = system_backend(Path(folder)).multimodal
    hypotheses = system.translate(test.src, test.image_ids, beam=beam, batch_size=64, stop=stop)
    metrics: dict[str, object] = {
        **translation_scores(hypotheses, test.tgt, tgt),
        "test_sentences": len(test.src),
        "beam": beam,
        "bleu_shuffled_images": None,
        "image_awareness": None,
    }
    if meteor:
        metrics.update(meteor_scores(scoring_tokens(hypotheses, tgt), scoring_tokens(test.tgt, tgt), tgt))
    else:
        metrics.update(meteor=None, meteor_note="METEOR 1.5 not computed: mmt.meteor is false")
    if multimodal and test.image_ids is not None:
        blind = system.translate(test.src, shuffled_images(test.image_ids), beam=beam, batch_size=64, stop=stop)
        blind_bleu = translation_scores(blind, test.tgt, tgt)["bleu"]
        assert isinstance(blind_bleu, float) and isinstance(metrics["bleu"], float)
        metrics.update(bleu_shuffled_images=blind_bleu, image_awareness=metrics["bleu"] - blind_bleu)
    metrics["image_dependent"] = image_dependent_metrics(hypotheses, test, tgt)
    metrics["contrastive"] = contrastive_metrics(system, contrastive, multimodal=multimodal)
    return Evaluation(metrics, hypotheses)


def image_dependent_metrics(hypotheses: Sequence[str], test: Pairs, tgt: str) -> dict[str, object] | str:
    """``{"sentences", "words", "word_accuracy", "bleu", "chrf"}`` of the test sentences whose reference has words the
    image decides (:func:`~mmt.metrics.image_dependent_scores`), or why there are none."""
    if test.tgt_words is None:
        return "the corpus records no image-dependent words"
    if not any(test.tgt_words):
        return f"no test caption in {tgt} has image-dependent words"
    return image_dependent_scores(hypotheses, test.tgt, test.tgt_words, tgt)


def contrastive_metrics(
    system: Translator, items: Sequence[ContrastiveItem] | None, *, multimodal: bool
) -> dict[str, object] | str:
    """``{"items", "accuracy"}``: :func:`~mmt.metrics.contrastive_accuracy` of ``system`` on ``items`` (0.5 for a
    text-only system), or why there are none (``items`` None: the corpus has none; empty: none for this direction)."""
    if items is None:
        return "the corpus has no contrastive items"
    if not items:
        return "the corpus has no contrastive items for this direction"
    accuracy = contrastive_accuracy(contrastive_scores(system, items, multimodal=multimodal))
    return {"items": len(items), "accuracy": accuracy}


def contrastive_scores(
    system: Translator, items: Sequence[ContrastiveItem], *, multimodal: bool
) -> list[ContrastiveScores]:
    """Each item's two translations scored with each of its two images, in one batched call.

    A text-only system scores each (source, translation) once for both images: its score cannot depend on the image,
    and one number per pair keeps batch padding from telling the two apart in the last bits (its accuracy stays 0.5).
    """

    trials = [
        (item.source, translation, image_id if multimodal else None)
        for item in items
        for translation, image_id in (
            (item.translation_a, item.image_a),
            (item.translation_b, item.image_a),
            (item.translation_b, item.image_b),
            (item.translation_a, item.image_b),
        )
    ]
    unique = list(dict.fromkeys(trials))
    images = [image_id for _, _, image_id in unique if image_id is not None] if multimodal else None
    values = system.score([source for source, _, _ in unique], [target for _, target, _ in unique], images)
    score = dict(zip(unique, values, strict=True))
    # four trials per item, in the order of ContrastiveScores' fields
    return [
        ContrastiveScores(*(score[trial] for trial in trials[index : index + 4])) for index in range(0, len(trials), 4)
    ]


def compared_accuracies(baseline: Evaluation, system: Evaluation) -> dict[str, object]:
    """The two systems' image-dependent word accuracy and contrastive accuracy side by side, or why they are absent:
    ``{"word_accuracy": {"baseline", "system"} | str, "contrastive_accuracy": {"baseline", "system"} | str}``."""
    compared: dict[str, object] = {}
    for key, group, field_name in (
        ("word_accuracy", "image_dependent", "word_accuracy"),
        ("contrastive_accuracy", "contrastive", "accuracy"),
    ):
        before, after = baseline.metrics[group], system.metrics[group]
        if isinstance(before, dict) and isinstance(after, dict):
            compared[key] = {"baseline": before[field_name], "system": after[field_name]}
        else:
            compared[key] = before if isinstance(before, str) else after
    return compared


def shuffled_images(image_ids: Sequence[str]) -> list[str]:
    """Every sentence's image replaced by the next distinct image in order of first appearance (the last by the
    first): deterministic, and no sentence keeps its own image.

    Raises:
        ValueError: fewer than two distinct images.
    """
    distinct = list(dict.fromkeys(image_ids))
    if len(distinct) < 2:
        raise ValueError(f"shuffling images needs two distinct images, got {len(distinct)}")
    other = dict(zip(distinct, distinct[1:] + distinct[:1], strict=True))
    return [other[image_id] for image_id in image_ids]
