"""Translation metrics under the two conventions the literature mixes (see mmt-reference §2).

* ``bleu``: BLEU-4 on lowercased, Moses-tokenised text, scored without further tokenisation. This is
  what multi-bleu.perl ``-lc`` gives on Multi30K's ``lc.norm.tok`` references, the scale of the MMT
  papers' tables (e.g. 37.5 on test2016).
* ``sacrebleu``: cased BLEU on detokenised text with sacreBLEU's default 13a tokeniser, the scale of the
  OPUS-MT leaderboard. The two are not comparable with each other.
* ``chrf``: chrF2 on detokenised text.

Each score comes with its sacreBLEU signature (``*_signature``), so a reader knows exactly what was computed.
:func:`paired_bootstrap` tests whether one system beats another on the same test set (Koehn 2004), with
sacreBLEU's paired bootstrap resampling on the ``bleu`` convention.

METEOR 1.5, the WMT multimodal tasks' second metric, is computed on the test translations by :mod:`mmt.meteor`
(the official jar, with Java), not here: it starts a Java process, too slow for every validation.

Two measures of whether a system uses the image, where the corpus records what the image decides (the built-in
dataset does; real Multi30K does not): :func:`image_dependent_scores` (did the translation get the words whose form
only the image tells, and BLEU/chrF on the sentences that have such words) and :func:`contrastive_accuracy` (does
the system find the right one of two translations more probable, given the image that makes it right).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass

from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.significance import PairedTest, Result
from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a
from sacremoses import MosesPunctNormalizer, MosesTokenizer

from common.bootstrap import SAMPLES

# Moses XML escapes as found in Multi30K's tok files; scoring is on plain text so both sides agree.
_MOSES_ESCAPES = {
    "&amp;": "&",
    "&#124;": "|",
    "&lt;": "<",
    "&gt;": ">",
    "&apos;": "'",
    "&quot;": '"',
    "&#91;": "[",
    "&#93;": "]",
}
_ESCAPE_PATTERN = re.compile("|".join(re.escape(escape) for escape in _MOSES_ESCAPES))
_TOKENIZE_13A = Tokenizer13a()


def translation_scores(hypotheses: Sequence[str], references: Sequence[str], tgt_lang: str) -> dict[str, object]:
    """Score detokenised hypotheses against one detokenised reference each.

    Args:
        hypotheses: System outputs, one per line of the test set.
        references: Human references, aligned with ``hypotheses``.
        tgt_lang: ISO 639-1 code of the target language (chooses the Moses rules).

    Returns:
        ``{"bleu", "sacrebleu", "chrf"}`` as floats in 0..100, each with its ``*_signature``.

    Raises:
        ValueError: the two lists differ in length, or are empty.
    """
    _check_counts(hypotheses, references)
    hyps_tok = [_scoring_tokens(text, tgt_lang) for text in hypotheses]
    refs_tok = [_scoring_tokens(text, tgt_lang) for text in references]
    tokenized, cased, chrf = _tokenized_bleu(), BLEU(), CHRF()  # signatures exist once a metric has scored
    return {
        "bleu": _score_tokenized(tokenized, hyps_tok, refs_tok),
        "bleu_signature": str(tokenized.get_signature()),
        "sacrebleu": cased.corpus_score(list(hypotheses), [list(references)]).score,
        "sacrebleu_signature": str(cased.get_signature()),
        "chrf": chrf.corpus_score(list(hypotheses), [list(references)]).score,
        "chrf_signature": str(chrf.get_signature()),
    }


def paired_bootstrap(
    baseline: Sequence[str],
    system: Sequence[str],
    references: Sequence[str],
    tgt_lang: str,
    *,
    samples: int = SAMPLES,
) -> dict[str, object]:
    """Paired bootstrap resampling of ``bleu`` (lowercased, tokenised): does ``system`` beat ``baseline``?

    Returns:
        ``baseline`` and ``system`` BLEU, their ``delta``, the ``p_value`` (two-sided, sacreBLEU's: how often
        resampling alone makes a difference as large, were the systems equal), the system's bootstrap ``mean`` and
        95% ``ci`` half-width, ``samples`` and ``signature`` (sacreBLEU's, with its fixed resampling seed).
    """
    _check_counts(baseline, references)
    _check_counts(system, references)
    hyps = {
        name: [_unescape(_scoring_tokens(text, tgt_lang)) for text in texts]
        for name, texts in (("baseline", baseline), ("system", system))
    }
    refs = [_unescape(_scoring_tokens(text, tgt_lang)) for text in references]
    test = PairedTest(
        list(hyps.items()), metrics={"BLEU": _tokenized_bleu()}, references=[refs], test_type="bs", n_samples=samples
    )
    signatures, scores = test()
    ((name, signature),) = signatures.items()
    base, result = scores[name]
    assert isinstance(base, Result) and isinstance(result, Result)
    assert result.p_value is not None and result.mean is not None and result.ci is not None  # a paired bs run sets them
    return {
        "baseline": float(base.score),
        "system": float(result.score),
        "delta": float(result.score - base.score),
        "p_value": float(result.p_value),
        "mean": float(result.mean),
        "ci": float(result.ci),
        "samples": samples,
        "signature": str(signature),
    }


def image_dependent_accuracy(
    hypotheses: Sequence[str], words_per_sentence: Sequence[Sequence[str]]
) -> tuple[float, int]:
    """Share of the recorded image-dependent words that occur in their hypothesis.

    A word is found when it is one of the hypothesis's tokens under sacreBLEU's 13a tokeniser, compared
    case-sensitively. A word recorded twice for one sentence counts twice, and both count as found when the
    hypothesis holds it once (occurrences in the hypothesis are not clipped).

    Args:
        hypotheses: System outputs, detokenised.
        words_per_sentence: The image-dependent words of each sentence's reference (empty for none), aligned.

    Returns:
        (accuracy in 0..1, number of recorded words).

    Raises:
        ValueError: the two lists differ in length, or record no word at all.
    """
    if len(hypotheses) != len(words_per_sentence):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(words_per_sentence)} word lists (expected one each)")
    total = sum(len(words) for words in words_per_sentence)
    if total == 0:
        raise ValueError("no image-dependent words to score")
    found = 0
    for hypothesis, words in zip(hypotheses, words_per_sentence, strict=True):
        tokens = set(_TOKENIZE_13A(hypothesis).split())
        found += sum(word in tokens for word in words)
    return found / total, total


def image_dependent_scores(
    hypotheses: Sequence[str], references: Sequence[str], words_per_sentence: Sequence[Sequence[str]], tgt_lang: str
) -> dict[str, object]:
    """Word accuracy (:func:`image_dependent_accuracy`), BLEU and chrF of the sentences with image-dependent words.

    Returns:
        ``{"sentences", "words", "word_accuracy", "bleu", "chrf"}``: how many sentences have at least one word, how
        many words they hold, the share found (0..1), and BLEU (lowercased, tokenised) and chrF (0..100) on those
        sentences alone.

    Raises:
        ValueError: the lists differ in length, or no sentence has a word.
    """
    _check_counts(hypotheses, references)
    if len(words_per_sentence) != len(references):
        raise ValueError(f"{len(words_per_sentence)} word lists but {len(references)} references (expected one each)")
    chosen = [index for index, words in enumerate(words_per_sentence) if words]
    hyps, refs = [hypotheses[i] for i in chosen], [references[i] for i in chosen]
    accuracy, words = image_dependent_accuracy(hyps, [words_per_sentence[i] for i in chosen])
    scores = translation_scores(hyps, refs, tgt_lang)
    return {
        "sentences": len(chosen),
        "words": words,
        "word_accuracy": accuracy,
        "bleu": scores["bleu"],
        "chrf": scores["chrf"],
    }


@dataclass(frozen=True)
class ContrastiveScores:
    """Log-probabilities of one contrastive item's two translations, each given the source and each of the two images.

    Attributes:
        a_with_a: translation a given image a (the right translation for image a).
        b_with_a: translation b given image a.
        b_with_b: translation b given image b (the right translation for image b).
        a_with_b: translation a given image b.
    """

    a_with_a: float
    b_with_a: float
    b_with_b: float
    a_with_b: float


def contrastive_accuracy(scores: Sequence[ContrastiveScores]) -> float:
    """Share of trials won: two per item, one per image, won when the right translation for that image scores strictly
    higher than the other one; a tie counts half.

    A text-only system gives each translation the same score under both images, so of every item it wins exactly one
    trial, or ties both: it gets exactly 0.5. Above 0.5, the image moves the system towards the right translation.

    Raises:
        ValueError: no items.
    """
    if not scores:
        raise ValueError("no contrastive items to score")
    won = sum(_trial(item.a_with_a, item.b_with_a) + _trial(item.b_with_b, item.a_with_b) for item in scores)
    return won / (2 * len(scores))


def _trial(right: float, wrong: float) -> float:
    return 1.0 if right > wrong else 0.5 if right == wrong else 0.0


def _tokenized_bleu() -> BLEU:
    # force: the text is tokenised on purpose here (sacreBLEU would warn about every such call otherwise)
    return BLEU(tokenize="none", lowercase=True, force=True)


def bleu_corpus_tokenized(hyps_tok: Sequence[str], refs_tok: Sequence[str]) -> float:
    """BLEU-4 of already tokenised text, lowercased and split on spaces only (multi-bleu ``-lc``).

    Moses XML escapes (``&apos;``, ``&quot;``, ...) are undone on both sides first, so references
    from Multi30K's escaped tok files score the same against unescaped hypotheses.
    """
    return _score_tokenized(_tokenized_bleu(), hyps_tok, refs_tok)


def _score_tokenized(metric: BLEU, hyps_tok: Sequence[str], refs_tok: Sequence[str]) -> float:
    _check_counts(hyps_tok, refs_tok)
    hyps = [_unescape(text) for text in hyps_tok]
    refs = [_unescape(text) for text in refs_tok]
    return float(metric.corpus_score(hyps, [refs]).score)


def scoring_tokens(texts: Sequence[str], lang: str) -> list[str]:
    """Detokenised sentences as lowercased Moses tokens, the ``bleu`` convention (METEOR scores these too)."""
    return [_scoring_tokens(text, lang).lower() for text in texts]


def _scoring_tokens(text: str, lang: str) -> str:
    # No aggressive hyphen split here: Multi30K's tok references keep "t-shirt" whole, and so do
    # toolkits that split with `-a` (their de-hyphen filter runs before scoring). Lowercasing is left
    # to bleu_corpus_tokenized, so that both entry points lowercase in the same place.
    normalized = _normalizer(lang).normalize(text)
    return _tokenizer(lang).tokenize(normalized, escape=False, return_str=True)


@functools.cache
def _normalizer(lang: str) -> MosesPunctNormalizer:
    return MosesPunctNormalizer(lang=lang)


@functools.cache
def _tokenizer(lang: str) -> MosesTokenizer:
    return MosesTokenizer(lang=lang)


def _unescape(text: str) -> str:
    return _ESCAPE_PATTERN.sub(lambda match: _MOSES_ESCAPES[match.group(0)], text)


def _check_counts(hypotheses: Sequence[str], references: Sequence[str]) -> None:
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references (expected one each)")
    if not hypotheses:
        raise ValueError("no hypotheses to score")
