"""METEOR 1.5 (Denkowski and Lavie 2014), the WMT multimodal tasks' second metric, through the official jar.

The jar ships inside the ``pycocoevalcap`` wheel (``pycocoevalcap/meteor/meteor-1.5.jar``) with the English
paraphrase table beside it, so English is scored with every module (exact, stem, WordNet synonym, paraphrase), as
published numbers are. For other targets only the jar's stemmers are at hand (German, French, Spanish; Czech has
none), so those are scored with ``-m "exact stem"`` (Czech ``exact``), and the result says so: such a score is
below what the full METEOR 1.5 would give and not comparable to published ones. Hypotheses and references are
compared as lowercased Moses tokens (the ``bleu`` convention), with METEOR's own ``-norm``.

Nothing here is imported from ``pycocoevalcap`` (its package pulls in the COCO API): the jar is only located.
"""

from __future__ import annotations

import importlib.util
import logging
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

# ISO 639-1 -> METEOR's language code and the modules its jar can run without outside files.
_LANGUAGES = {
    "en": ("en", "exact stem synonym paraphrase"),
    "de": ("de", "exact stem"),
    "fr": ("fr", "exact stem"),
    "es": ("es", "exact stem"),
    "cs": ("cz", "exact"),
}
_FINAL = re.compile(r"^Final score:\s+([0-9.eE+-]+)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class Meteor:
    """Where METEOR 1.5 runs: the ``java`` executable and the jar."""

    java: str
    jar: Path

    @classmethod
    def find(cls) -> Meteor | str:
        """The installed jar and Java, or the reason METEOR cannot run here."""
        java = shutil.which("java")
        if java is None:
            return "METEOR 1.5 not computed: no `java` on PATH (the Meteor 1.5 jar needs a Java runtime)"
        spec = importlib.util.find_spec("pycocoevalcap")
        if spec is None or not spec.submodule_search_locations:
            return (
                "METEOR 1.5 not computed: the pycocoevalcap package (which ships the Meteor 1.5 jar) is not installed "
                "(pip install 'mmtr[meteor]')"
            )
        jar = Path(next(iter(spec.submodule_search_locations))) / "meteor" / "meteor-1.5.jar"
        if not jar.is_file():
            return f"METEOR 1.5 not computed: {jar} not found in the pycocoevalcap package"
        return cls(java, jar)

    def score(
        self, hypotheses: Sequence[str], references: Sequence[str], lang: str, *, timeout: float = 900.0
    ) -> dict[str, object]:
        """METEOR of tokenised hypotheses against one tokenised reference each, in percent.

        Returns:
            ``{"meteor": score in 0..100, "meteor_note": what was run}``; for a language without full support, the
            note says which modules were left out.

        Raises:
            ValueError: the lists differ in length or are empty, a line holds a newline, or ``lang`` is not one
                METEOR 1.5 supports.
            RuntimeError: the jar failed (its output is quoted) or printed no final score.
        """
        if len(hypotheses) != len(references) or not hypotheses:
            raise ValueError(
                f"METEOR needs as many hypotheses as references, got {len(hypotheses)} and {len(references)}"
            )
        if any("\n" in line for line in (*hypotheses, *references)):
            raise ValueError("METEOR reads one sentence per line: a hypothesis or reference holds a newline")
        if lang not in _LANGUAGES:
            raise ValueError(f"METEOR 1.5 has no support for {lang!r}; supported: {', '.join(_LANGUAGES)}")
        code, modules = _LANGUAGES[lang]
        with tempfile.TemporaryDirectory(prefix="meteor-") as folder:
            hyp, ref = Path(folder) / "hyp.txt", Path(folder) / "ref.txt"
            hyp.write_text("".join(f"{line}\n" for line in hypotheses), encoding="utf-8")
            ref.write_text("".join(f"{line}\n" for line in references), encoding="utf-8")
            command = [
                self.java,
                "-Xmx2G",
                "-jar",
                str(self.jar),
                str(hyp),
                str(ref),
                "-l",
                code,
                "-norm",
                "-m",
                modules,
            ]
            # run beside the jar: it finds its paraphrase table as data/paraphrase-<lang>.gz from there
            done = subprocess.run(command, cwd=self.jar.parent, capture_output=True, text=True, timeout=timeout)
        found = _FINAL.search(done.stdout)
        if done.returncode != 0 or found is None:
            tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
            raise RuntimeError(f"METEOR 1.5 failed (exit {done.returncode}): " + " | ".join(tail))
        note = f"METEOR 1.5, -l {code} -norm -m '{modules}'"
        if lang != "en":
            note += (
                "; the paraphrase tables of this language are not installed (and synonyms exist for English "
                "only), so this is below full METEOR 1.5 and not comparable to published scores"
            )
        return {"meteor": 100.0 * float(found.group(1)), "meteor_note": note}


def meteor_scores(hypotheses: Sequence[str], references: Sequence[str], lang: str) -> dict[str, object]:
    """``{"meteor", "meteor_note"}`` with the installed jar, or ``meteor`` None and the reason in the note."""
    found = Meteor.find()
    if isinstance(found, str):
        logger.info(found)
        return {"meteor": None, "meteor_note": found}
    if lang not in _LANGUAGES:
        return {"meteor": None, "meteor_note": f"METEOR 1.5 not computed: no support for {lang!r}"}
    return found.score(hypotheses, references, lang)
