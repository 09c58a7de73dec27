"""ISO 639-1 language codes: the only language identifiers the tables accept."""

from __future__ import annotations

from corpora.io import InputError

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
