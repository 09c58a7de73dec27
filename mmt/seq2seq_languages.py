"""The model families the seq2seq backend runs, and how each names languages.

A family is read from the model folder's ``config.json`` (``model_type``) and the tokenizer's class, never from the
folder's name. Each family but single-target OPUS-MT needs the language codes of the pair: a ``>>xx<<`` token in
front of the source (multi-target OPUS-MT), or the tokenizer's ``src_lang``/``tgt_lang`` with the target's code
forced as the first generated token (NLLB, M2M100, mBART-50). The tables below map ISO 639-1 codes to the model's
codes; ``mmt.seq2seq.language_codes`` overrides or extends them per family.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from common.errors import InputError
from common.files import read_json

Family = Literal["marian", "marian-multi", "nllb", "m2m100", "mbart50"]
FAMILIES: tuple[Family, ...] = ("marian", "marian-multi", "nllb", "m2m100", "mbart50")

# ISO 639-1 -> the model's code; a language missing here needs mmt.seq2seq.language_codes.<family>.<lang>
NLLB_CODES = {
    "ar": "arb_Arab",
    "cs": "ces_Latn",
    "de": "deu_Latn",
    "en": "eng_Latn",
    "es": "spa_Latn",
    "fi": "fin_Latn",
    "fr": "fra_Latn",
    "hi": "hin_Deva",
    "it": "ita_Latn",
    "ja": "jpn_Jpan",
    "ko": "kor_Hang",
    "nl": "nld_Latn",
    "pl": "pol_Latn",
    "pt": "por_Latn",
    "ro": "ron_Latn",
    "ru": "rus_Cyrl",
    "sv": "swe_Latn",
    "tr": "tur_Latn",
    "uk": "ukr_Cyrl",
    "vi": "vie_Latn",
    "zh": "zho_Hans",
}
MBART50_CODES = {
    "ar": "ar_AR",
    "cs": "cs_CZ",
    "de": "de_DE",
    "en": "en_XX",
    "es": "es_XX",
    "fi": "fi_FI",
    "fr": "fr_XX",
    "hi": "hi_IN",
    "it": "it_IT",
    "ja": "ja_XX",
    "ko": "ko_KR",
    "nl": "nl_XX",
    "pl": "pl_PL",
    "pt": "pt_XX",
    "ro": "ro_RO",
    "ru": "ru_RU",
    "sv": "sv_SE",
    "tr": "tr_TR",
    "uk": "uk_UA",
    "vi": "vi_VN",
    "zh": "zh_CN",
}
# M2M100 and OPUS-MT's target tokens use the ISO 639-1 code itself (>>fr<<); Tatoeba-era OPUS models use ISO
# 639-3 (>>fra<<), set through language_codes.marian-multi.
DEFAULT_CODES: dict[Family, dict[str, str]] = {
    "marian": {},
    "marian-multi": {},
    "nllb": NLLB_CODES,
    "m2m100": {},
    "mbart50": MBART50_CODES,
}
_IDENTITY_CODES: tuple[Family, ...] = ("marian-multi", "m2m100")


@dataclass(frozen=True)
class LanguageSetup:
    """How a model is told the pair's languages.

    Attributes:
        family: The model family.
        src_code: The source language's code in the model (None: the model takes none).
        tgt_code: The target language's code in the model (None: the model takes none).
        source_prefix: Put in front of every source sentence (multi-target OPUS-MT's ``>>xx<< ``).
        forced_bos_token_id: The first token every translation starts with (the target's code), or None.
    """

    family: Family
    src_code: str | None = None
    tgt_code: str | None = None
    source_prefix: str = ""
    forced_bos_token_id: int | None = None


def detect_family(folder: Path, tokenizer: Any) -> Family:
    """The family of the model in ``folder`` from its config.json's ``model_type`` and its tokenizer's class.

    Raises:
        InputError: a model type or tokenizer this backend does not run.
    """
    config = read_json(folder / "config.json")
    model_type = config.get("model_type") if isinstance(config, dict) else None
    tokenizer_class = type(tokenizer).__name__
    if model_type == "marian":
        return "marian-multi" if getattr(tokenizer, "supported_language_codes", None) else "marian"
    if model_type == "m2m_100" and tokenizer_class.startswith("Nllb"):
        return "nllb"
    if model_type == "m2m_100" and tokenizer_class.startswith("M2M100"):
        return "m2m100"
    if model_type == "mbart" and tokenizer_class.startswith("MBart50"):
        return "mbart50"
    raise InputError(
        f"{folder}: model_type {model_type!r} with {tokenizer_class} is not a supported family "
        "(OPUS-MT Marian, NLLB, M2M100, mBART-50)"
    )


def language_setup(
    family: Family,
    tokenizer: Any,
    *,
    src: str,
    tgt: str,
    overrides: Mapping[str, str],
    folder: Path,
) -> LanguageSetup:
    """The codes of ``src`` and ``tgt`` for a model of ``family``, checked against its tokenizer; also sets the
    tokenizer's ``src_lang``/``tgt_lang`` where the family has them.

    Args:
        family: From :func:`detect_family`.
        tokenizer: The model's tokenizer.
        src: ISO 639-1 source language.
        tgt: ISO 639-1 target language.
        overrides: ISO 639-1 -> model code, taking precedence over the family's table.
        folder: The model folder (named in errors).

    Raises:
        InputError: a language without a code, or a code the tokenizer does not know.
    """
    if family == "marian":
        return LanguageSetup(family)
    if family == "marian-multi":
        token = f">>{_code(family, tgt, overrides, folder)}<<"
        known = list(tokenizer.supported_language_codes)
        if token not in known:
            raise InputError(
                f"{folder}: this multi-target model has no target token {token} for {tgt!r} (it has "
                f"{', '.join(known[:12])}{', ...' if len(known) > 12 else ''}); map {tgt} to one of them in "
                f"mmt.seq2seq.language_codes.marian-multi"
            )
        return LanguageSetup(family, tgt_code=token, source_prefix=f"{token} ")
    src_code, tgt_code = _code(family, src, overrides, folder), _code(family, tgt, overrides, folder)
    for code in (src_code, tgt_code):
        if _code_token_id(family, tokenizer, code) is None:
            raise InputError(
                f"{folder}: the {family} tokenizer has no language code {code!r}; "
                f"set the right one in mmt.seq2seq.language_codes.{family}"
            )
    tokenizer.src_lang, tokenizer.tgt_lang = src_code, tgt_code
    return LanguageSetup(family, src_code, tgt_code, forced_bos_token_id=_code_token_id(family, tokenizer, tgt_code))


def _code(family: Family, language: str, overrides: Mapping[str, str], folder: Path) -> str:
    if language in overrides:
        return overrides[language]
    if family in _IDENTITY_CODES:
        return language
    table = DEFAULT_CODES[family]
    if language not in table:
        raise InputError(
            f"{folder}: no {family} language code for {language!r}; set mmt.seq2seq.language_codes.{family}.{language}"
        )
    return table[language]


def _code_token_id(family: Family, tokenizer: Any, code: str) -> int | None:
    if family == "m2m100":  # codes are tokens __xx__, outside the sentencepiece vocabulary
        token_ids: dict[str, int] = tokenizer.lang_token_to_id
        return token_ids.get(tokenizer.get_lang_token(code))
    token_id = tokenizer.convert_tokens_to_ids(code)
    return None if token_id is None or token_id == tokenizer.unk_token_id else int(token_id)
