"""Text as it enters the project (captions, parallel sentences, sentences to translate), in one clean form.

Every caption and sentence is stored as Unicode NFC, so a word typed with a precomposed ``ä`` and one typed as
``a`` + combining diaeresis are one word (one vocabulary entry). Control characters (C0 but tab, line feed and
carriage return; DEL; C1) and bidirectional embedding, override and isolate controls are refused, naming where they
are: they cannot be seen, yet change what a caption means to a tokenizer or how a terminal shows it. Tab, line feed
and carriage return inside a text are whitespace a line-per-sentence file or a TSV cell cannot hold: each becomes a
space. Text that cannot be encoded as UTF-8 (a lone surrogate from a JSON ``"\\ud800"``) is refused.

:func:`shown` escapes a name or caption for a message, so that such characters cannot disguise it.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Literal

from common.checks import check_choice
from common.errors import InputError

ControlCharacters = Literal["refuse", "remove"]

# C0 controls, DEL and the C1 controls; bidi embeddings, overrides and isolates (RE2 syntax too, for Arrow)
UNWANTED_PATTERN = r"[\x00-\x1f\x7f-\x9f\x{202a}-\x{202e}\x{2066}-\x{2069}]"
# the same but tab, line feed and carriage return, which become spaces
_UNWANTED = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_LINE_WHITESPACE = re.compile("[\t\n\r]")
_SURROGATE = re.compile("[\ud800-\udfff]")
_SHOWN_MAX = 80  # characters of a text quoted in a message
_SETTING_HINT = "; prepare.text.control_characters: remove drops them"


@dataclass(frozen=True)
class TextConfig:
    """The `prepare.text` section of params.yaml: how captions and parallel sentences are read.

    Attributes:
        control_characters: ``refuse``: a control or bidirectional formatting character in a caption or sentence is
            an error naming the file and line; ``remove``: such characters are dropped and counted (prepare prints
            the count and records it beside its tables).
    """

    control_characters: ControlCharacters = "refuse"

    def __post_init__(self) -> None:
        check_choice("control_characters", self.control_characters, ControlCharacters)


def normalize(text: str, where: str, *, remove: bool = False) -> str:
    """``text`` in NFC, its tabs and line breaks as spaces; a control or bidirectional formatting character is an
    :class:`InputError` naming ``where`` and the code point (``remove``: dropped instead).

    Raises:
        InputError: a lone surrogate (not encodable as UTF-8), or a control character unless ``remove``.
    """
    return _clean(text, where, remove=remove, hint="")[0]


@dataclass
class TextCleaner:
    """:func:`normalize` under one setting, counting the characters it removed over every call."""

    control_characters: ControlCharacters = "refuse"
    removed: int = 0

    def __call__(self, text: str, where: str) -> str:
        cleaned, removed = _clean(text, where, remove=self.control_characters == "remove", hint=_SETTING_HINT)
        self.removed += removed
        return cleaned


def _clean(text: str, where: str, *, remove: bool, hint: str) -> tuple[str, int]:
    """The clean text and the number of control characters removed from it; ``hint`` ends a refusal."""
    surrogate = _SURROGATE.search(text)
    if surrogate:
        raise InputError(
            f"{where}: U+{ord(surrogate.group()):04X} is a lone surrogate, not a character (the text cannot be "
            f"encoded as UTF-8): {quoted(text)}"
        )
    removed = 0
    unwanted = _UNWANTED.search(text)
    if unwanted:
        if not remove:
            kind = "bidirectional formatting" if unwanted.group() >= "\u202a" else "control"
            raise InputError(
                f"{where}: {kind} character U+{ord(unwanted.group()):04X} at character {unwanted.start() + 1} of "
                f"{quoted(text)} (text may hold no control or bidirectional formatting characters{hint})"
            )
        text, removed = _UNWANTED.subn("", text)
    text = _LINE_WHITESPACE.sub(" ", text)
    if not unicodedata.is_normalized("NFC", text):
        text = unicodedata.normalize("NFC", text)
    return text, removed


def shown(text: str) -> str:
    """``text`` for a message: control, formatting (bidi) and other non-printing characters escaped as ``\\xNN``,
    ``\\uNNNN`` or ``\\UNNNNNNNN``; letters such as ``ä`` and ordinary spaces as they are."""
    return "".join(
        character if character.isprintable() or character == " " else _escape(character) for character in text
    )


def quoted(text: str) -> str:
    """``text`` :func:`shown` in double quotes, cut after 80 characters (a caption in a message)."""
    return f'"{shown(text[:_SHOWN_MAX])}"' + ("..." if len(text) > _SHOWN_MAX else "")


def _escape(character: str) -> str:
    code = ord(character)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
