"""Moses punctuation normalisation and tokenisation, several times faster than sacremoses and token for token the same.

sacremoses applies some forty regular expressions to every sentence, one after the other, from Python: a few thousand
sentences a second per core, the slow step of a WMT-size corpus. The two classes here give the same strings, for the
settings :class:`mmt.text.MosesText` uses (no XML escaping, aggressive dash splits, no protected patterns), with less
work per sentence, and run sacremoses' own regular expressions and data wherever they do run:

- :class:`PunctNormalizer` runs each of the normaliser's rules only where the sentence holds a string that every
  match of the rule contains (most hold none of the characters the rules look for).
- :class:`WordTokenizer` tokenises each space-separated word once and caches its tokens. Between the whitespace clean
  up at the start and the non-breaking prefixes at the end, every one of sacremoses' tokenising rules looks at a
  special character and at most one character either side of it, and every replacement gives back the characters it
  consumed, so a word's tokens depend only on the word and on whether it starts or ends the sentence. The one
  exception is a rule that may consume the space between two words at either end (the English and French
  apostrophe rules: ``x' 'y``); a sentence where a word ending in an apostrophe precedes one starting with one is
  tokenised by sacremoses itself. The non-breaking prefix rule, which looks at the next word, runs per sentence.

``tests/unit/mmt/test_moses.py`` compares both with sacremoses on every line of the real Multi30K and WMT samples.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from sacremoses import MosesPunctNormalizer, MosesTokenizer

# A word's tokens are cached per process up to this many words, then the cache starts again: the words of a WMT
# corpus follow Zipf's law, so a cache this size answers most lookups, and it stays some tens of megabytes.
CACHE_WORDS = 200_000
_REGEX_SYNTAX = frozenset("\\()[]{}?*+|^$.")
# The gates of the normaliser's rules that are not literals (sacremoses/normalize.py): " +" -> " " changes a
# sentence only where two spaces meet, so it runs only there.
_PATTERN_GATES = {
    r"\r": "\r",
    r"\(": "(",
    r"\)": ")",
    r" +": "  ",
    r"\) ([.!:?;,])": ") ",
    r"\( ": "( ",
    r" \)": " )",
    r"(\d) %": " %",
    "([a-zA-Z])\u2018([a-zA-Z])": "\u2018",
    "([a-zA-Z])\u2019([a-zA-Z])": "\u2019",
    "\u00a0\\?": "\u00a0?",
    "\u00a0\\!": "\u00a0!",
    r'"([,.]+)': '"',
    r'(\.+)"(\s*[^<])': '."',
    "(\\d)\u00a0(\\d)": "\u00a0",
}
_ASCII_DIGITS = frozenset("0123456789")


class PunctNormalizer:
    """sacremoses' ``MosesPunctNormalizer(lang)`` with its default settings, each rule run only where the sentence
    holds a string that every match of the rule contains (its gate)."""

    def __init__(self, lang: str) -> None:
        reference = MosesPunctNormalizer(lang=lang)
        self._rules = [
            (_gate(pattern), re.compile(pattern), replacement) for pattern, replacement in reference.substitutions
        ]

    def normalize(self, text: str) -> str:
        """What ``MosesPunctNormalizer.normalize`` returns for ``text``."""
        for gate, pattern, replacement in self._rules:
            if gate in text:
                text = pattern.sub(replacement, text)
        return text.strip()


def _gate(pattern: str) -> str:
    """A string every match of the normaliser's rule ``pattern`` contains: the pattern itself when it is a literal,
    else the one of :data:`_PATTERN_GATES`; the empty string (the rule always runs) for a pattern unknown here."""
    if not any(character in pattern for character in _REGEX_SYNTAX):
        return pattern
    return _PATTERN_GATES.get(pattern, "")


class WordTokenizer:
    """sacremoses' ``MosesTokenizer(lang).tokenize(text, aggressive_dash_splits=True, escape=False,
    return_str=True)``, with each word's tokens cached (module docstring)."""

    def __init__(self, lang: str) -> None:
        self._reference = reference = MosesTokenizer(lang=lang)
        self._clean = [reference.DEDUPLICATE_SPACE, reference.ASCII_JUNK]
        self._word_rules: list[tuple[re.Pattern[str], str | Callable[[re.Match[str]], str]]] = [
            reference.PAD_NOT_ISALNUM,
            reference.AGGRESSIVE_HYPHEN_SPLIT,
            reference.COMMA_SEPARATE_1,
            reference.COMMA_SEPARATE_2,
            reference.COMMA_SEPARATE_3,
        ]
        if lang == "en":
            self._apostrophe = list(reference.ENGLISH_SPECIFIC_APOSTROPHE)
        elif lang in ("fr", "it"):
            self._apostrophe = list(reference.FR_IT_SPECIFIC_APOSTROPHE)
        else:
            self._apostrophe = [reference.NON_SPECIFIC_APOSTROPHE]
        self._prefixes = frozenset(reference.NONBREAKING_PREFIXES)
        self._numeric_only = frozenset(reference.NUMERIC_ONLY_PREFIXES)
        self._alpha = frozenset(reference.IsAlpha)
        self._lower = frozenset(reference.IsLower)
        # a word inside a sentence -> its tokens, and (word, at the start, at the end) -> those of the first and last
        # words; see CACHE_WORDS
        self._middle: dict[str, list[str]] = {}
        self._edges: dict[tuple[str, bool, bool], list[str]] = {}

    def tokenize(self, text: str) -> str:
        """The tokens of ``text`` joined by single spaces, as sacremoses gives them."""
        raw = text
        # every whitespace character but the space, and every ASCII control, is unprintable: only then, or where two
        # spaces meet, does the clean up change anything
        if "  " in text or not text.isprintable():
            for pattern, replacement in self._clean:
                text = pattern.sub(replacement, text)
        if "' '" in text:  # the apostrophe rules may take the space between two words: sacremoses decides
            return self._reference.tokenize(raw, aggressive_dash_splits=True, escape=False, return_str=True)
        words = text.split()
        if len(words) < 2:
            tokens = self._edge_word(words[0], True, True) if words else []
        else:
            tokens = self._edge_word(words[0], True, False)
            middle = self._middle
            for word in words[1:-1]:
                found = middle.get(word)
                if found is None:
                    if len(middle) >= CACHE_WORDS:
                        middle.clear()
                    found = middle[word] = self._word_tokens(word, False, False)
                tokens += found
            tokens += self._edge_word(words[-1], False, True)
        text = " ".join(self._split_final_periods(tokens))
        if text.endswith(".'"):
            pattern, replacement = self._reference.TRAILING_DOT_APOSTROPHE
            text = pattern.sub(replacement, text)
        if "MULTI" in text:
            text = self._reference.restore_multidots(text)
        return text

    def _edge_word(self, word: str, first: bool, last: bool) -> list[str]:
        """A fresh list of the tokens of the first or the last word of a sentence (or both)."""
        key = (word, first, last)
        found = self._edges.get(key)
        if found is None:
            if len(self._edges) >= CACHE_WORDS:
                self._edges.clear()
            found = self._edges[key] = self._word_tokens(word, first, last)
        return list(found)

    def _word_tokens(self, word: str, first: bool, last: bool) -> list[str]:
        """sacremoses' rules between the clean up and the non-breaking prefixes, on one word with the spaces that
        surround it in its sentence."""
        text = ("" if first else " ") + word + ("" if last else " ")
        for pattern, replacement in self._word_rules[:2]:
            text = pattern.sub(replacement, text)
        text = self._reference.replace_multidots(text)
        for pattern, replacement in self._word_rules[2:] + self._apostrophe:
            text = pattern.sub(replacement, text)
        return text.split()

    def _split_final_periods(self, tokens: list[str]) -> list[str]:
        """sacremoses' ``handles_nonbreaking_prefixes``: a token ending in a period loses it to a token of its own
        unless its prefix is known (or holds a period and a letter), or the next token starts in lower case, or a
        numeric-only prefix precedes a number."""
        count = len(tokens)
        for index in [index for index, token in enumerate(tokens) if token[-1] == "." and len(token) > 1]:
            prefix = tokens[index][:-1]
            following = tokens[index + 1] if index + 1 < count else ""
            if (
                ("." in prefix and not self._alpha.isdisjoint(prefix))
                or (prefix in self._prefixes and prefix not in self._numeric_only)
                or (following and following[0] in self._lower)
            ):
                continue
            if prefix in self._numeric_only and following and following[0] in _ASCII_DIGITS:
                continue
            tokens[index] = prefix + " ."
        return tokens
