"""mmt.moses against sacremoses, its reference: the same strings on hand-written hard cases and on every line of the
real Multi30K and WMT samples."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from sacremoses import MosesPunctNormalizer, MosesTokenizer

import mmt.moses
from mmt.moses import PunctNormalizer, WordTokenizer
from mmt.text import MosesText

LANGUAGES = ("en", "de", "fr", "cs")

# Each exercises one rule of sacremoses' normaliser or tokeniser, or where the two meet.
HARD_CASES = [
    # apostrophes: contractions, possessives, quotes, numbers, French elision
    "Don't stop: it's John's dog, isn't it? The '90s were 'great'.",
    "The students' books and the boss's car; rock 'n' roll.",
    "He said 'yes' 'no' and ''maybe'' then left.'",
    "l'homme d'affaires aujourd'hui, qu'il soit là",
    "5'6\" tall, 1'000 items, 3's and 4' ' 5",
    "the kids' 'toys' are ' ' here",
    # numbers with commas and periods
    "It costs $5,300.50 or 1.000,25 EUR, up 3.5% from 2,000 (1,2,3).",
    "A,B,C,D,E and 1,a and a,1 and 1, 2 and end 2,",
    # URLs, e-mail, handles, slashes
    "See https://www.example.com/path/to-page.html?q=1&r=2 or mail me@example.org now.",
    "and/or 1/2 @handle #tag 50% C++ x86_64 a|b <tag> [x] {y}",
    # dashes, hyphens, ranges, double dashes
    "A well-known 3-year-old -- the so-called 'state-of-the-art' -- won 10-5 - really.",
    "Das T-Shirt–Geschäft — 1990–2000 - ein Zwei-Drittel-Erfolg.",
    "-start and end- and -- and --- and x-",
    # non-breaking prefixes, abbreviations, initials, final periods
    "Mr. Smith met Dr. J. R. R. Tolkien at 5 p.m. in the U.S. on Jan. 5.",
    "No. 5 and No. five and Nr. 7 and Art. 3 GG z.B. usw. etc.",
    "He left at 5. Then at 6. the end. And e.g. this.",
    "Wait... what?! Really..... yes.. no... .",
    'It ends with a quote.\' And (another one.) "Here."',
    # quotes of every kind and the normaliser's unicode rules
    "„Hallo“, sagte er. “Hi” ‘there’ ‚so‘ «bonjour» « salut » ``ok'' `x´ ´´y´´ …",
    'He said "hi", then "bye". Er sagte "Hallo", dann "Tschüss".',
    "Temperature 20\u00a0ºC, 5\u00a0% and 1\u00a0000\u00a0000 \u00a0? \u00a0! a\u00a0: b\u00a0; c,\u00a0d",
    "( spaced ) parens ) . and (x) , y % and 5 % and a : b ; c",
    # whitespace and control characters
    "  tabs\tand\nnewlines\r\nand\u2003wide\u00a0spaces  ",
    "junk\x01 char\x07s and \x1f mid \x0b",
    "DOTMULTI and xDOTDOTMULTIy and THISISPROTECTED000 literal",
    "",
    "   ",
    ".",
    "'",
    "a",
]


def _reference(lang: str, text: str) -> str:
    normalized = MosesPunctNormalizer(lang=lang).normalize(text)
    return str(
        MosesTokenizer(lang=lang).tokenize(normalized, aggressive_dash_splits=True, escape=False, return_str=True)
    )


@pytest.mark.parametrize("lang", LANGUAGES)
def test_hard_cases_give_sacremoses_strings(lang: str) -> None:
    normalizer, tokenizer = PunctNormalizer(lang), WordTokenizer(lang)
    for text in HARD_CASES:
        for variant in (text, text.lower()):
            assert tokenizer.tokenize(normalizer.normalize(variant)) == _reference(lang, variant), variant


@pytest.mark.parametrize("lang", LANGUAGES)
def test_normalizer_alone_gives_sacremoses_strings(lang: str) -> None:
    normalizer, reference = PunctNormalizer(lang), MosesPunctNormalizer(lang=lang)
    for text in HARD_CASES:
        assert normalizer.normalize(text) == reference.normalize(text), text


def test_tokens_of_known_hard_cases() -> None:
    english, german = MosesText("en", lowercase=False), MosesText("de", lowercase=False)
    assert english.preprocess("Mr. Smith's dog doesn't bark.") == "Mr. Smith 's dog doesn 't bark ."
    assert english.preprocess("It costs $5,300.50, right?") == "It costs $ 5,300.50 , right ?"
    assert english.preprocess("A state-of-the-art car...") == "A state @-@ of @-@ the @-@ art car ..."
    assert german.preprocess("Er sagte: „Nein“ (z.B. im Jahr 2.000).") == 'Er sagte : " Nein " ( z.B. im Jahr 2.000 ) .'


def test_words_across_the_apostrophe_boundary_follow_sacremoses() -> None:
    # "x' 'y": the English rule may consume the space between the words, so the sentence is not cut into words
    tokenizer = WordTokenizer("en")
    assert tokenizer.tokenize("1' '2") == "1 ' '2"  # word by word it would be "1 ' ' 2"
    for text in ("1' '2", "the kids' 'toys'", "a'  'b", "x' \x01'y", "1' \x01 '2 and 3' '4"):
        expected = MosesTokenizer(lang="en").tokenize(text, aggressive_dash_splits=True, escape=False, return_str=True)
        assert tokenizer.tokenize(text) == expected


def test_a_full_cache_starts_again_with_the_same_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mmt.moses, "CACHE_WORDS", 3)
    tokenizer = WordTokenizer("en")
    for _ in range(2):
        for text in HARD_CASES:
            assert tokenizer.tokenize(text) == MosesTokenizer(lang="en").tokenize(
                text, aggressive_dash_splits=True, escape=False, return_str=True
            )
    assert len(tokenizer._middle) <= 3


def _lines(path: Path) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as file:
        return [line.rstrip("\n") for line in file]


def _real_files(shared: Path) -> dict[str, list[Path]]:
    multi30k, wmt = shared / "multi30k" / "task1" / "raw", shared / "wmt-sample" / "opennmt-toy-ende"
    splits = ("train", "val", "test_2016_flickr")
    return {
        lang: [multi30k / f"{split}.{lang}.gz" for split in splits]
        + [wmt / f"{side}-{split}.txt" for split in ("train", "val", "test")]
        for lang, side in (("en", "src"), ("de", "tgt"))
    }


@pytest.mark.slow
@pytest.mark.parametrize("lang", ["en", "de"])
def test_every_line_of_the_real_samples_gives_sacremoses_tokens(shared_data: Path, lang: str) -> None:
    files = _real_files(shared_data)[lang]
    missing = [path for path in files if not path.is_file()]
    if missing:
        pytest.skip(f"real data files absent: {', '.join(map(str, missing))}")
    normalizer, tokenizer = PunctNormalizer(lang), WordTokenizer(lang)
    reference_normalizer, reference_tokenizer = MosesPunctNormalizer(lang=lang), MosesTokenizer(lang=lang)
    compared = 0
    differences = []
    for path in files:
        for number, line in enumerate(_lines(path), start=1):
            mine = tokenizer.tokenize(normalizer.normalize(line))
            normalized = reference_normalizer.normalize(line)
            theirs = reference_tokenizer.tokenize(
                normalized, aggressive_dash_splits=True, escape=False, return_str=True
            )
            compared += 1
            if mine != theirs:
                differences.append(f"{path.name}:{number}: {mine!r} != {theirs!r}")
    assert compared > 40_000
    assert differences == []
