"""MT metrics on hand-computable cases and against sacreBLEU's own API."""

from __future__ import annotations

import math

import pytest
import sacrebleu

from mmt.metrics import (
    ContrastiveScores,
    bleu_corpus_tokenized,
    contrastive_accuracy,
    image_dependent_accuracy,
    image_dependent_scores,
    paired_bootstrap,
    scoring_tokens,
    translation_scores,
)


def test_identical_text_scores_100() -> None:
    sentences = ["Ein Mann fährt Fahrrad.", "Zwei Hunde spielen im Schnee!"]
    scores = translation_scores(sentences, sentences, "de")
    assert scores["bleu"] == pytest.approx(100.0)
    assert scores["sacrebleu"] == pytest.approx(100.0)
    assert scores["chrf"] == pytest.approx(100.0)


def test_bleu_matches_a_hand_computation() -> None:
    # One substitution in ten words: n-gram precisions 9/10, 7/9, 5/8, 3/7; equal lengths, so no brevity penalty.
    hyp = "a man is riding a red bike on the road"
    ref = "a man is riding a blue bike on the road"
    expected = 100 * math.exp((math.log(9 / 10) + math.log(7 / 9) + math.log(5 / 8) + math.log(3 / 7)) / 4)
    assert bleu_corpus_tokenized([hyp], [ref]) == pytest.approx(expected)
    scores = translation_scores([hyp], [ref], "en")
    assert scores["bleu"] == pytest.approx(expected)
    assert scores["sacrebleu"] == pytest.approx(expected)


def test_detokenised_scores_match_sacrebleu() -> None:
    hyps = ["The Dog runs through the snow.", "A woman, smiling, reads a book!"]
    refs = ["A dog runs through the snow.", "A smiling woman reads a book."]
    scores = translation_scores(hyps, refs, "en")
    assert scores["sacrebleu"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs]).score)
    assert scores["chrf"] == pytest.approx(sacrebleu.corpus_chrf(hyps, [refs]).score)
    lowered_tokenised = sacrebleu.corpus_bleu(
        ["the dog runs through the snow .", "a woman , smiling , reads a book !"],
        [["a dog runs through the snow .", "a smiling woman reads a book ."]],
        tokenize="none",
    ).score
    assert scores["bleu"] == pytest.approx(lowered_tokenised)


def test_case_changes_cased_scores_only() -> None:
    refs = ["A man rides a horse on the beach."]
    scores = translation_scores(["a MAN rides a horse on the BEACH."], refs, "en")
    assert scores["bleu"] == pytest.approx(100.0)
    assert scores["sacrebleu"] < 60.0
    assert scores["chrf"] < 100.0


def test_hyphenated_words_are_scored_whole() -> None:
    # Multi30K's tok references keep "t-shirt" whole; a hyphen split on one side only must not leak in.
    assert bleu_corpus_tokenized(["a man in a t-shirt ."], ["a man in a t-shirt ."]) == pytest.approx(100.0)
    scores = translation_scores(["Ein Mann im T-Shirt."], ["ein mann im t-shirt ."], "de")
    assert scores["bleu"] == pytest.approx(100.0)


def test_tokenised_text_is_split_on_spaces_only() -> None:
    # multi-bleu.perl does not re-tokenise; a 13a pass would split "black/white" and hide the difference.
    assert bleu_corpus_tokenized(["a black/white dog runs ."], ["a black / white dog runs ."]) < 100.0


def test_moses_escapes_in_references_are_undone() -> None:
    refs = ["a man &apos;s hat is &quot; red &quot; &amp; blue ."]
    assert bleu_corpus_tokenized(['a man \'s hat is " red " & blue .'], refs) == pytest.approx(100.0)
    # Only one level is undone: an escaped escape stays literal text.
    assert bleu_corpus_tokenized(["a b c d &apos;"], ["a b c d &amp;apos;"]) < 100.0


def test_scoring_tokens_are_the_lowercased_moses_tokens_bleu_scores() -> None:
    # Moses' English punctuation normaliser moves the full stop inside the closing quote
    assert scoring_tokens(['A dog\'s ball, "red".'], "en") == ['a dog \'s ball , " red . "']
    sentence = ["A dog runs in the snow."]
    assert bleu_corpus_tokenized(scoring_tokens(sentence, "en"), ["a dog runs in the snow ."]) == pytest.approx(100.0)


def test_count_mismatch_names_both_counts() -> None:
    with pytest.raises(ValueError, match="3 hypotheses but 2 references"):
        translation_scores(["a", "b", "c"], ["a", "b"], "en")
    with pytest.raises(ValueError, match="1 hypotheses but 0 references"):
        bleu_corpus_tokenized(["a"], [])
    with pytest.raises(ValueError, match="no hypotheses"):
        translation_scores([], [], "en")


def test_paired_bootstrap_finds_a_real_gain_and_no_gain_between_equals() -> None:
    references = [f"a {colour} circle is left of a star ." for colour in ("red", "blue", "green", "pink")] * 15
    better = list(references)
    worse = [text.replace(" is left of a star", "") for text in references]
    gain = paired_bootstrap(worse, better, references, "en", samples=200)
    assert gain["system"] == pytest.approx(100.0) and gain["delta"] > 30 and gain["p_value"] < 0.01
    assert gain["samples"] == 200 and "bs:200|seed:12345|case:lc|eff:no|tok:none" in str(gain["signature"])
    # each system right on the other's wrong half: equal BLEU, different sentences, no significant difference
    half = [good if index % 2 else bad for index, (good, bad) in enumerate(zip(better, worse, strict=True))]
    other_half = [bad if index % 2 else good for index, (good, bad) in enumerate(zip(better, worse, strict=True))]
    even = paired_bootstrap(half, other_half, references, "en", samples=200)
    assert even["delta"] == 0.0 and even["p_value"] > 0.2 and even["ci"] > 0
    with pytest.raises(ValueError, match="2 hypotheses but 60 references"):
        paired_bootstrap(worse[:2], better, references, "en")


def test_scores_carry_their_sacrebleu_signatures() -> None:
    scores = translation_scores(["A red circle."], ["A red circle."], "en")
    assert scores["bleu_signature"] == f"nrefs:1|case:lc|eff:no|tok:none|smooth:exp|version:{sacrebleu.__version__}"
    assert "tok:13a" in str(scores["sacrebleu_signature"]) and "nc:6" in str(scores["chrf_signature"])


def test_image_dependent_accuracy_counts_tokens_case_sensitively() -> None:
    hypotheses = ["Ein blauer Kreis.", "Ein Blauer Stern, links.", "Zwei rote Kreise."]
    words = [["blauer"], ["blauer", "links"], []]
    # "blauer" is found in the first; in the second "Blauer" differs in case, "links" is a token once 13a splits
    # off the comma and the full stop: 2 of 3 words
    assert image_dependent_accuracy(hypotheses, words) == (pytest.approx(2 / 3), 3)


def test_image_dependent_accuracy_counts_each_recorded_word_and_only_whole_tokens() -> None:
    # "roter" is recorded twice and found twice though written once; "blau" is no token of "blauen"
    assert image_dependent_accuracy(["Ein roter Kreis und ein roter Stern."], [["roter", "roter"]]) == (1.0, 2)
    assert image_dependent_accuracy(["Ein roter Kreis neben einem blauen."], [["roter", "roter", "blau"]]) == (
        pytest.approx(2 / 3),
        3,
    )


def test_image_dependent_accuracy_needs_aligned_lists_and_a_word() -> None:
    with pytest.raises(ValueError, match="2 hypotheses but 1 word lists"):
        image_dependent_accuracy(["a", "b"], [["a"]])
    with pytest.raises(ValueError, match="no image-dependent words"):
        image_dependent_accuracy(["a", "b"], [[], []])


def test_image_dependent_scores_use_the_sentences_with_words() -> None:
    hypotheses = ["Ein roter Kreis ist links.", "Ein Stern ist oben.", "Ein grünes Quadrat ist rechts."]
    references = ["Ein blauer Kreis ist links.", "Ein Stern ist oben.", "Ein grünes Quadrat ist rechts."]
    words = [["blauer"], [], ["grünes"]]
    scores = image_dependent_scores(hypotheses, references, words, "de")
    subset = translation_scores([hypotheses[0], hypotheses[2]], [references[0], references[2]], "de")
    assert scores == {"sentences": 2, "words": 2, "word_accuracy": 0.5, "bleu": subset["bleu"], "chrf": subset["chrf"]}
    assert scores["bleu"] < translation_scores(hypotheses, references, "de")["bleu"]  # the correct middle one is out
    with pytest.raises(ValueError, match="no image-dependent words"):
        image_dependent_scores(hypotheses, references, [[], [], []], "de")
    with pytest.raises(ValueError, match="2 word lists but 3 references"):
        image_dependent_scores(hypotheses, references, words[:2], "de")


def test_contrastive_accuracy_on_hand_made_items() -> None:
    items = [
        ContrastiveScores(a_with_a=-1.0, b_with_a=-2.0, b_with_b=-3.0, a_with_b=-1.0),  # right with a, wrong with b
        ContrastiveScores(a_with_a=-1.0, b_with_a=-5.0, b_with_b=-1.0, a_with_b=-5.0),  # right twice
        ContrastiveScores(a_with_a=-2.0, b_with_a=-2.0, b_with_b=-1.0, a_with_b=-4.0),  # a tie (half), then right
    ]
    assert contrastive_accuracy(items) == pytest.approx((1 + 0 + 1 + 1 + 0.5 + 1) / 6)
    with pytest.raises(ValueError, match="no contrastive items"):
        contrastive_accuracy([])


def test_a_system_blind_to_the_image_scores_exactly_one_half() -> None:
    """Whatever it thinks of the two translations, a text-only system scores each the same under both images."""
    items = []
    for a, b in ((-1.0, -2.0), (-3.5, -0.5), (-2.0, -2.0), (-7.25, -7.0)):
        items.append(ContrastiveScores(a_with_a=a, b_with_a=b, b_with_b=b, a_with_b=a))
    assert contrastive_accuracy(items) == 0.5
