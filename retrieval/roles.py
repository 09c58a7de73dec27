"""Language roles of a retrieval run: which captions it trains on and which languages it is tested on.

The papers' runs differ in exactly this (Huang et al. 2020 section 4): Table 4 trains on English human and
German synthesized captions, the human German ones discarded, and tests on both; Tables 1-3 train with German
synthesized text and test English only; Table 5 sets an English-only model beside the multilingual one.

A role lists training selectors ``<language>`` (every caption of that language) or ``<language>:<origin>``,
where the language is an ISO 639-1 code, ``pivot`` or ``targets`` (each of the run's other languages), and the
origin is ``human``, ``synthetic`` (any machine-translated caption), or a system kind (``mt``, ``mmt``). The
test languages are codes, ``pivot`` or ``targets``. :data:`PRESETS` are the papers' settings; a run names a
preset or a role of its own. A role of one's own may also carry a :class:`~retrieval.setups.TrainingSetup` (Kádár
et al. 2018's data selections, batches and caption-caption steps).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from common.checks import SettingError, check, check_not_empty
from retrieval.setups import TrainingSetup

ORIGINS = ("human", "synthetic", "mt", "mmt")
PLACEHOLDERS = ("pivot", "targets")
ROLE_NAME = re.compile(r"[a-z][a-z0-9_]*")  # no hyphen: run names are <model>-<variant>-<role>
_LANGUAGE = re.compile(r"[a-z]{2}")


@dataclass(frozen=True)
class LanguageRole:
    """Attributes:
    train: Selectors of the training captions, ``<language>[:<origin>]`` (see the module notes).
    test: Languages the run is validated and tested on (human test captions of each).
    setup: Which of the selected captions are kept, and how batches are drawn (default: all, the trainer's own).
    """

    train: tuple[str, ...]
    test: tuple[str, ...]
    setup: TrainingSetup = field(default_factory=TrainingSetup)

    def __post_init__(self) -> None:
        check_not_empty("train", self.train, "training selector")
        check_not_empty("test", self.test, "test language")
        for index, selector in enumerate(self.train):
            language, _, origin = selector.partition(":")
            _check_language(f"train[{index}]", language, selector)
            if ":" in selector:
                check(origin in ORIGINS, f"train[{index}]", selector, f"<language>:<origin>, origin one of {ORIGINS}")
        for index, language in enumerate(self.test):
            _check_language(f"test[{index}]", language, language)

    def resolve(self, pivot: str, languages: tuple[str, ...]) -> ResolvedRole:
        """The role over concrete codes: ``pivot`` and ``targets`` (``languages`` other than the pivot)."""
        targets = tuple(code for code in languages if code != pivot)

        def codes(language: str) -> tuple[str, ...]:
            return (pivot,) if language == "pivot" else targets if language == "targets" else (language,)

        train = []
        for selector in self.train:
            language, _, origin = selector.partition(":")
            train += [(code, origin or None) for code in codes(language)]
        test = tuple(dict.fromkeys(code for language in self.test for code in codes(language)))
        return ResolvedRole(tuple(dict.fromkeys(train)), test, self.setup)


def _check_language(key: str, language: str, value: str) -> None:
    ok = language in PLACEHOLDERS or _LANGUAGE.fullmatch(language) is not None
    check(ok, key, value, "an ISO 639-1 code, pivot or targets (with :<origin> in train)")


@dataclass(frozen=True)
class ResolvedRole:
    """A role over concrete language codes.

    Attributes:
        train: (language, origin or None for every origin) pairs, in order.
        test: Test languages, in order.
        setup: The role's training setup.
    """

    train: tuple[tuple[str, str | None], ...]
    test: tuple[str, ...]
    setup: TrainingSetup = field(default_factory=TrainingSetup)

    def keeps(self, lang: str, origin: str) -> bool:
        """Whether a training caption of ``lang`` and ``origin`` (human, mt, mmt) is one this role trains on."""
        return any(lang == code and _origin_matches(wanted, origin) for code, wanted in self.train)

    @property
    def train_languages(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(code for code, _ in self.train))


def _origin_matches(wanted: str | None, origin: str) -> bool:
    if wanted is None:
        return True
    if wanted == "synthetic":
        return origin != "human"
    return wanted == origin


PRESETS: dict[str, LanguageRole] = {
    # every caption of every language, tested on every language (Table 4's "multilingual" rows, Table 5)
    "all": LanguageRole(train=("pivot", "targets"), test=("pivot", "targets")),
    # Table 4: pivot captions + synthesized target captions, the human target ones discarded; tested on all
    "discard_human_targets": LanguageRole(train=("pivot", "targets:synthetic"), test=("pivot", "targets")),
    # Tables 1-3 (Flickr30K, MS-COCO: pivot-only corpora): synthesized target text helps, tested on the pivot
    "pivot_test": LanguageRole(train=("pivot", "targets:synthetic"), test=("pivot",)),
    # Table 5's English-only model (human and back-translated pivot captions), tested on the pivot
    "pivot_only": LanguageRole(train=("pivot",), test=("pivot",)),
}


def check_role_name(key: str, name: str) -> None:
    if not ROLE_NAME.fullmatch(name):
        raise SettingError(key, f"got {name!r}, allowed: lowercase letters, digits and _ (run names use -)")
