"""Language roles: selectors, placeholders, presets, and the settings checks around them."""

from __future__ import annotations

import pytest

from common.checks import SettingError
from common.config import build
from retrieval.config import RetrievalConfig
from retrieval.roles import PRESETS, LanguageRole, ResolvedRole


def test_placeholders_resolve_to_the_pivot_and_the_other_languages() -> None:
    role = LanguageRole(train=("pivot", "targets:synthetic", "fr:human"), test=("targets", "pivot"))
    resolved = role.resolve("en", ("de", "en", "cs"))
    assert resolved.train == (("en", None), ("de", "synthetic"), ("cs", "synthetic"), ("fr", "human"))
    assert resolved.test == ("de", "cs", "en")
    assert resolved.train_languages == ("en", "de", "cs", "fr")


@pytest.mark.parametrize(
    ("selectors", "lang", "origin", "kept"),
    [
        (("en",), "en", "human", True),
        (("en",), "en", "mmt", True),
        (("en",), "de", "human", False),
        (("de:synthetic",), "de", "mt", True),
        (("de:synthetic",), "de", "mmt", True),
        (("de:synthetic",), "de", "human", False),
        (("de:mmt",), "de", "mt", False),
        (("de:mmt",), "de", "mmt", True),
        (("de:human",), "de", "human", True),
        (("de:human", "de:mt"), "de", "mt", True),
    ],
)
def test_keeps_matches_language_and_origin(selectors: tuple[str, ...], lang: str, origin: str, kept: bool) -> None:
    assert LanguageRole(train=selectors, test=("en",)).resolve("en", ("en", "de")).keeps(lang, origin) is kept


def test_presets_are_the_papers_settings() -> None:
    """Resolved for an en pivot with de as the other language."""
    resolved = {name: role.resolve("en", ("en", "de")) for name, role in PRESETS.items()}
    assert resolved["all"] == ResolvedRole((("en", None), ("de", None)), ("en", "de"))
    assert resolved["discard_human_targets"] == ResolvedRole((("en", None), ("de", "synthetic")), ("en", "de"))
    assert resolved["pivot_test"] == ResolvedRole((("en", None), ("de", "synthetic")), ("en",))
    assert resolved["pivot_only"] == ResolvedRole((("en", None),), ("en",))
    table4 = resolved["discard_human_targets"]
    assert not table4.keeps("de", "human") and table4.keeps("de", "mmt") and table4.keeps("en", "human")


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"train": [], "test": ["en"]}, r"^train: at least one training selector is needed$"),
        ({"train": ["en"], "test": []}, r"^test: at least one test language is needed$"),
        ({"train": ["en:bt"], "test": ["en"]}, r"^train\[0\]: got 'en:bt', allowed: <language>:<origin>, origin one"),
        ({"train": ["english"], "test": ["en"]}, r"^train\[0\]: got 'english', allowed: an ISO 639-1 code, pivot or"),
        ({"train": ["en"], "test": ["en:human"]}, r"^test\[0\]: got 'en:human', allowed: an ISO 639-1 code"),
    ],
)
def test_bad_roles_name_the_selector(values: dict[str, list[str]], message: str) -> None:
    with pytest.raises(SettingError, match=message):
        build(LanguageRole, values)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"roles": ["table4"]}, r"^roles\[0\]: unknown role 'table4'; known: all, discard_human_targets, pivot_test"),
        ({"roles": []}, r"^roles: at least one role is needed$"),
        ({"custom_roles": {"en-de": {"train": ["en"], "test": ["en"]}}}, r"^custom_roles\.en-de: got 'en-de', allowed"),
        ({"custom_roles": {"all": {"train": ["en"], "test": ["en"]}}}, r"^custom_roles\.all: a preset has this name"),
        (
            {"custom_roles": {"mine": {"train": ["en", "fr:mt"], "test": ["en"]}}},
            r"^custom_roles\.mine\.train\[1\]: 'fr' is not one of retrieval\.languages \['en', 'de'\]$",
        ),
    ],
)
def test_bad_role_settings_name_their_key(values: dict[str, object], message: str) -> None:
    with pytest.raises(SettingError, match=message):
        build(RetrievalConfig, {"languages": ["en", "de"], **values})


def test_a_custom_role_is_runnable_by_name() -> None:
    config = build(
        RetrievalConfig,
        {
            "languages": ["en", "de"],
            "roles": ["all", "en_de_mmt"],
            "custom_roles": {"en_de_mmt": {"train": ["en:human", "de:mmt"], "test": ["pivot", "de"]}},
        },
    )
    assert config.role("en_de_mmt", "en") == ResolvedRole((("en", "human"), ("de", "mmt")), ("en", "de"))
    assert config.role("all", "en") == ResolvedRole((("en", None), ("de", None)), ("en", "de"))


def test_a_role_that_reaches_beyond_the_languages_is_refused() -> None:
    """With a pivot outside retrieval.languages, `pivot` resolves to a language the runs do not draw on."""
    config = RetrievalConfig(languages=("de",))
    with pytest.raises(SettingError, match=r"^roles\.all: reaches 'en', not one of retrieval\.languages \['de'\]$"):
        config.role("all", "en")
