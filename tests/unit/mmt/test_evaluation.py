"""A trained system's test scores: BLEU and chrF of its translations, image awareness against shuffled images,
the image-dependent words and contrastive items where the corpus records them, and two systems' accuracies side by
side."""

from __future__ import annotations

import dataclasses
import threading

import pytest

from common.stopping import Cancelled
from mmt.evaluation import Evaluation, compared_accuracies, evaluate_system, shuffled_images
from mmt.metrics import ContrastiveScores, contrastive_accuracy, image_dependent_scores, translation_scores
from mmt.pairs import caption_pairs, contrastive_items
from mmt.systems import BACKENDS, load_system
from tests.unit.mmt.test_systems import CPU, Trained, annotations, caption_corpus, train_every_backend


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Trained:
    return train_every_backend(tmp_path_factory.mktemp("systems"))


def test_an_evaluation_asked_to_stop_gives_up_before_translating(trained: Trained) -> None:
    stop = threading.Event()
    stop.set()  # the stage is stopping
    test = trained.data.captions["test"]
    with pytest.raises(Cancelled, match=r": translating: given up, the process is stopping$"):
        evaluate_system(
            str(trained.folder("mmt")), test, store=str(trained.store), tgt="de", beam=2, runtime=CPU, stop=stop
        )


def test_evaluate_system_scores_the_test_captions(trained: Trained) -> None:
    test = trained.data.captions["test"]
    for backend in ("mmt", "text-only"):
        folder = str(trained.folder(backend))
        evaluation = evaluate_system(folder, test, store=str(trained.store), tgt="de", beam=2, runtime=CPU)
        metrics = evaluation.metrics
        assert {"bleu", "sacrebleu", "chrf", "bleu_signature"} <= metrics.keys()
        assert metrics["test_sentences"] == 4 and metrics["beam"] == 2
        system = load_system(folder, str(trained.store), CPU)
        hypotheses = system.translate(test.src, test.image_ids, beam=2)
        assert evaluation.hypotheses == hypotheses
        reference = translation_scores(hypotheses, test.tgt, "de")
        assert (metrics["bleu"], metrics["chrf"]) == (reference["bleu"], reference["chrf"]), backend
        assert metrics["image_dependent"] == "the corpus records no image-dependent words"
        assert metrics["contrastive"] == "the corpus has no contrastive items"
        if backend == "text-only":
            assert metrics["image_awareness"] is None and metrics["bleu_shuffled_images"] is None
            continue
        assert test.image_ids is not None
        blind = system.translate(test.src, shuffled_images(test.image_ids), beam=2)
        blind_bleu = translation_scores(blind, test.tgt, "de")["bleu"]
        assert metrics["bleu_shuffled_images"] == blind_bleu
        assert metrics["image_awareness"] == pytest.approx(reference["bleu"] - blind_bleu)


def test_evaluate_system_scores_the_image_dependent_words_and_contrastive_items(trained: Trained) -> None:
    """The word accuracy and subset scores of the test translations; the contrastive accuracy from the system's own
    scores, exactly 0.5 for both text-only backends."""
    words, table = annotations(caption_corpus().images)
    test = caption_pairs(caption_corpus().captions, "en", "de", "test", words)
    items = contrastive_items(table, "en", "de")
    for backend in BACKENDS:
        folder = str(trained.folder(backend))
        evaluation = evaluate_system(
            folder, test, store=str(trained.store), tgt="de", beam=2, runtime=CPU, contrastive=items
        )
        metrics = evaluation.metrics
        assert test.tgt_words is not None
        expected = image_dependent_scores(evaluation.hypotheses, test.tgt, test.tgt_words, "de")
        assert metrics["image_dependent"] == expected and expected["sentences"] == expected["words"] == 2
        contrastive = metrics["contrastive"]
        assert isinstance(contrastive, dict) and contrastive["items"] == 1
        if backend != "mmt":
            assert contrastive["accuracy"] == 0.5, backend
            continue
        system = load_system(folder, str(trained.store), CPU)
        (item,) = items
        a_with_a, b_with_a, b_with_b, a_with_b = system.score(
            [item.source] * 4,
            [item.translation_a, item.translation_b, item.translation_b, item.translation_a],
            [item.image_a, item.image_a, item.image_b, item.image_b],
        )
        # the four pairs in the order evaluate_system batches them: the same numbers
        expected_accuracy = contrastive_accuracy([ContrastiveScores(a_with_a, b_with_a, b_with_b, a_with_b)])
        assert contrastive["accuracy"] == expected_accuracy
    backward = evaluate_system(
        str(trained.folder("text-only")), test, store=None, tgt="de", beam=1, runtime=CPU, contrastive=[]
    )
    assert backward.metrics["contrastive"] == "the corpus has no contrastive items for this direction"
    nothing = dataclasses.replace(test, tgt_words=[[] for _ in test.src])
    evaluation = evaluate_system(str(trained.folder("text-only")), nothing, store=None, tgt="de", beam=1, runtime=CPU)
    assert evaluation.metrics["image_dependent"] == "no test caption in de has image-dependent words"


def test_compared_accuracies_side_by_side_or_why_not() -> None:
    def evaluation(word_accuracy: float, accuracy: float) -> Evaluation:
        return Evaluation(
            {"image_dependent": {"word_accuracy": word_accuracy}, "contrastive": {"accuracy": accuracy}}, []
        )

    assert compared_accuracies(evaluation(0.25, 0.5), evaluation(0.75, 0.625)) == {
        "word_accuracy": {"baseline": 0.25, "system": 0.75},
        "contrastive_accuracy": {"baseline": 0.5, "system": 0.625},
    }
    absent = Evaluation({"image_dependent": "no words", "contrastive": "no items"}, [])
    assert compared_accuracies(absent, absent) == {"word_accuracy": "no words", "contrastive_accuracy": "no items"}


def test_shuffled_images_give_every_sentence_another_image() -> None:
    assert shuffled_images(["a", "a", "b", "c", "b"]) == ["b", "b", "c", "a", "c"]
    with pytest.raises(ValueError, match="needs two distinct images, got 1"):
        shuffled_images(["a", "a"])
