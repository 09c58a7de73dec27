"""METEOR 1.5 through the official jar of the pycocoevalcap wheel: scores against hand-checkable cases, the
modules each language gets, and the reasons given where it cannot run."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

from mmt import meteor
from mmt.meteor import Meteor, meteor_scores

FOUND = Meteor.find()
needs_meteor = pytest.mark.skipif(isinstance(FOUND, str), reason=str(FOUND))


@needs_meteor
def test_identical_english_scores_near_100_and_a_worse_hypothesis_lower() -> None:
    refs = ["a dog runs through the snow .", "two men ride horses on a beach ."]
    same = meteor_scores(refs, refs, "en")
    assert isinstance(same["meteor"], float) and same["meteor"] > 95.0
    assert same["meteor_note"] == "METEOR 1.5, -l en -norm -m 'exact stem synonym paraphrase'"
    worse = meteor_scores(["a cat sleeps .", "two men ride horses on a beach ."], refs, "en")
    assert isinstance(worse["meteor"], float) and 0.0 < worse["meteor"] < same["meteor"]


@needs_meteor
def test_synonyms_and_stems_count_in_english_only_stems_in_german() -> None:
    """'running' matches 'runs' by its stem in both languages' modules; English also matches WordNet synonyms."""
    english = meteor_scores(["a dog is running ."], ["a dog runs ."], "en")
    exact_only = meteor_scores(["a dog is sprinting ."], ["a dog runs ."], "en")
    assert english["meteor"] > exact_only["meteor"]  # type: ignore[operator]
    german = meteor_scores(["ein hund läuft im schnee ."], ["ein hund läuft im schnee ."], "de")
    assert german["meteor"] > 95.0  # type: ignore[operator]
    assert "-l de -norm -m 'exact stem'" in str(german["meteor_note"])
    assert "not comparable to published scores" in str(german["meteor_note"])
    czech = meteor_scores(["pes běží ."], ["pes běží ."], "cs")
    assert "-l cz -norm -m 'exact'" in str(czech["meteor_note"])


def test_without_java_or_the_jar_the_note_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert meteor_scores(["a ."], ["a ."], "en") == {
        "meteor": None,
        "meteor_note": "METEOR 1.5 not computed: no `java` on PATH (the Meteor 1.5 jar needs a Java runtime)",
    }
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/java")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert meteor_scores(["a ."], ["a ."], "en") == {
        "meteor": None,
        "meteor_note": "METEOR 1.5 not computed: the pycocoevalcap package (which ships the Meteor 1.5 jar) is not "
        "installed (pip install 'mmtr[meteor]')",
    }


def test_bad_input_and_a_failing_jar_are_errors(tmp_path: Path) -> None:
    fake = Meteor("java" if shutil.which("java") else "false", tmp_path / "broken.jar")
    (tmp_path / "broken.jar").write_bytes(b"not a jar")
    with pytest.raises(ValueError, match="as many hypotheses as references, got 1 and 2"):
        fake.score(["a"], ["a", "b"], "en")
    with pytest.raises(ValueError, match="holds a newline"):
        fake.score(["a\nb"], ["a"], "en")
    with pytest.raises(ValueError, match="no support for 'ja'"):
        fake.score(["a"], ["a"], "ja")
    with pytest.raises(RuntimeError, match=r"METEOR 1\.5 failed"):
        fake.score(["a ."], ["a ."], "en")
    assert meteor_scores(["a"], ["a"], "ja")["meteor"] is None or isinstance(FOUND, str)


def test_the_module_never_imports_pycocoevalcap() -> None:
    source = Path(meteor.__file__).read_text(encoding="utf-8")
    assert "import pycocoevalcap" not in source and "from pycocoevalcap" not in source
