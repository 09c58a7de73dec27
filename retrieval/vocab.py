"""Word vocabulary of the retrieval text encoders: lowercased word tokens, one id space for all languages.

Every word is kept per language (``de:die`` and ``en:die`` are different entries), so a multilingual model
can have one embedding table and models with language-specific parts can still tell the languages apart.
Id 0 is padding and id 1 the unknown word; words seen fewer than ``min_count`` times in the training captions
become unknown (SCAN/VSE++: 4).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from common.checks import check_range

PAD, UNK = 0, 1
SPECIALS = ("<pad>", "<unk>")
TOKEN = re.compile(r"\w+|[^\w\s]")


@dataclass(frozen=True)
class VocabConfig:
    """The word vocabulary (the `retrieval.vocab` section of params.yaml).

    Attributes:
        min_count: Words seen fewer times in the training captions become unknown (SCAN/VSE++: 4).
        max_len: Captions are cut to this many tokens.
        fasttext: Language -> FastText ``.vec`` file in the word vectors folder (other languages start random).
    """

    min_count: int = 4
    max_len: int = 100
    fasttext: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_range("min_count", self.min_count, 1, 1_000_000)
        check_range("max_len", self.max_len, 1, 1000)


class EmptyCaptionError(ValueError):
    """A caption with no word tokens."""


def tokenize(text: str) -> list[str]:
    """Lowercased word and punctuation tokens (Unicode-aware, so umlauts and diacritics stay in words)."""
    return TOKEN.findall(text.lower())


@dataclass(frozen=True)
class Vocabulary:
    """Attributes:
    languages: The languages, in the order of the models' language indices.
    entries: Id -> ``"<lang>:<word>"`` (the first two are the specials).
    """

    languages: tuple[str, ...]
    entries: tuple[str, ...]
    _ids: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.entries[: len(SPECIALS)] != SPECIALS:
            raise ValueError(f"a vocabulary starts with {SPECIALS}")
        object.__setattr__(self, "_ids", {entry: index for index, entry in enumerate(self.entries)})

    def __len__(self) -> int:
        return len(self.entries)

    @classmethod
    def build(cls, captions: Iterable[tuple[str, str]], languages: Sequence[str], *, min_count: int) -> Vocabulary:
        """From (lang, text) pairs: words of ``languages`` seen at least ``min_count`` times, sorted."""
        counts: Counter[str] = Counter()
        wanted = set(languages)
        for lang, text in captions:
            if lang in wanted:
                counts.update(f"{lang}:{word}" for word in tokenize(text))
        kept = sorted(entry for entry, count in counts.items() if count >= min_count)
        return cls(tuple(languages), SPECIALS + tuple(kept))

    def lang_index(self, lang: str) -> int:
        if lang not in self.languages:
            raise KeyError(f"language {lang!r} is not one the model was trained on ({', '.join(self.languages)})")
        return self.languages.index(lang)

    def encode(self, text: str, lang: str, *, max_len: int) -> list[int]:
        """Ids of the first ``max_len`` tokens of ``text`` (unknown words -> UNK).

        Raises:
            EmptyCaptionError: ``text`` has no tokens.
        """
        words = tokenize(text)
        if not words:
            raise EmptyCaptionError(f"caption {text!r} has no words")
        return [self._ids.get(f"{lang}:{word}", UNK) for word in words[:max_len]]

    def words_of(self, lang: str) -> dict[str, int]:
        """Bare word -> id for one language (to load that language's pretrained vectors)."""
        prefix = f"{lang}:"
        return {entry[len(prefix) :]: index for index, entry in enumerate(self.entries) if entry.startswith(prefix)}

    def to_dict(self) -> dict[str, Any]:
        return {"languages": list(self.languages), "entries": list(self.entries)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Vocabulary:
        return cls(tuple(data["languages"]), tuple(data["entries"]))
