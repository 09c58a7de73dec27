"""ISO 639-1 language codes (the only language identifiers the tables accept) and the languages of a run."""

from __future__ import annotations

from dataclasses import dataclass

from common.checks import SettingError, check
from common.errors import InputError

ISO_639_1: frozenset[str] = frozenset(
    """
    aa ab ae af ak am an ar as av ay az ba be bg bh bi bm bn bo br bs ca ce ch co cr cs cu cv cy
    da de dv dz ee el en eo es et eu fa ff fi fj fo fr fy ga gd gl gn gu gv ha he hi ho hr ht hu
    hy hz ia id ie ig ii ik io is it iu ja jv ka kg ki kj kk kl km kn ko kr ks ku kv kw ky la lb
    lg li ln lo lt lu lv mg mh mi mk ml mn mr ms mt my na nb nd ne ng nl nn no nr nv ny oc oj om
    or os pa pi pl ps pt qu rm rn ro ru rw sa sc sd se sg si sk sl sm sn so sq sr ss st su sv sw
    ta te tg th ti tk tl tn to tr ts tt tw ty ug uk ur uz ve vi vo wa wo xh yi yo za zh zu
    """.split()  # noqa: SIM905 (a word list reads better than 184 quoted strings)
)


def check_language(code: str, *, where: str) -> str:
    """Return ``code`` if it is an ISO 639-1 code, else raise an InputError naming ``where``."""
    if code not in ISO_639_1:
        raise InputError(f"{where}: unknown language code {code!r} (expected an ISO 639-1 code such as 'en', 'de')")
    return code


@dataclass(frozen=True)
class Languages:
    """The languages of a run.

    Attributes:
        pivot: The language of the English-only models and of backward translation (ISO 639-1).
        targets: Languages translated to and from the pivot; order is kept.
    """

    pivot: str
    targets: tuple[str, ...]

    def __post_init__(self) -> None:
        allowed = "an ISO 639-1 language code (en, de, fr, cs, ...)"
        check(self.pivot in ISO_639_1, "pivot", self.pivot, allowed)
        for index, code in enumerate(self.targets):
            check(code in ISO_639_1, f"targets[{index}]", code, allowed)
        if len(set(self.all)) != len(self.all):
            raise SettingError("", f"a language is listed twice in pivot + targets: {list(self.all)}")

    @property
    def all(self) -> tuple[str, ...]:
        return (self.pivot, *self.targets)
