"""Build a config dataclass from a plain mapping (a parsed YAML section), checking every value's type.

Conversion follows the annotations: nested dataclasses, ``Literal`` choices, optional values, ``tuple[X, ...]``
from lists, ``dict[str, X]`` from mappings, and the scalars bool, int, float (ints accepted) and str. Fields
with a default may be left out. A value of the wrong type, an unknown or missing key, or a range check that
fails in a dataclass's ``__post_init__`` raises :class:`~common.checks.SettingError` whose key is the full
path, e.g. ``retrieval.train.clip``.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from collections.abc import Iterable
from typing import Any, Literal, TypeVar, get_args, get_origin

from common.checks import SettingError

T = TypeVar("T")

_SCALAR_NAMES = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def build(kind: type[T], tree: Any, path: str = "") -> T:
    """The dataclass ``kind`` with the values of the mapping ``tree``.

    Args:
        kind: A dataclass type whose fields are annotated with the supported types.
        tree: A mapping of field name -> value (nested mappings for nested dataclasses).
        path: Key path of ``tree`` in the whole document, prefixed to error keys.

    Raises:
        SettingError: naming the key path of the first bad value and what is allowed there.
    """
    if not dataclasses.is_dataclass(kind):
        raise TypeError(f"build() takes a dataclass type, got {kind!r}")
    return typing.cast(T, _convert(kind, tree, path))


def join(path: str, key: str) -> str:
    """``path.key``; ``key`` at the top level, ``path`` for an error about the whole object (empty key)."""
    return f"{path}.{key}" if path and key else path or key


def unknown_key_message(key: str, known: Iterable[str]) -> str:
    """``unknown key; allowed keys here: a, b, c``; when one of them is close to ``key`` (a typo), ``unknown key; did
    you mean 'b'? allowed keys here: a, b, c``."""
    known = list(known)
    close = difflib.get_close_matches(key, known, n=1)
    guess = f" did you mean {close[0]!r}?" if close else ""
    return f"unknown key;{guess} allowed keys here: {', '.join(known)}"


def _convert(kind: Any, value: Any, path: str) -> Any:
    if kind is Any:  # checked by its owner (e.g. a model's config, chosen by the model name)
        return value
    if dataclasses.is_dataclass(kind):
        return _build_dataclass(kind, value, path)
    origin = get_origin(kind)
    if origin is Literal:
        allowed = get_args(kind)
        if value not in allowed:
            raise SettingError(path, f"got {value!r}, allowed: {', '.join(map(str, allowed))}")
        return value
    if origin in (types.UnionType, typing.Union):
        options = get_args(kind)
        if value is None and type(None) in options:
            return None
        inner = [option for option in options if option is not type(None)]
        if all(get_origin(option) is Literal for option in inner):  # e.g. LossKind | Literal["auto"]
            return _convert(Literal[tuple(arg for option in inner for arg in get_args(option))], value, path)
        if len(inner) != 1:
            raise TypeError(f"settings type {kind!r} at {path or '<top level>'} is not supported")
        return _convert(inner[0], value, path)
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise SettingError(path, f"expected a list, got {value!r}")
        (item,) = [arg for arg in get_args(kind) if arg is not Ellipsis]
        return tuple(_convert(item, element, f"{path}[{index}]") for index, element in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict):
            raise SettingError(path, f"expected a mapping, got {value!r}")
        _, item = get_args(kind)
        return {str(key): _convert(item, element, join(path, str(key))) for key, element in value.items()}
    return _convert_scalar(kind, value, path)


def _convert_scalar(kind: Any, value: Any, path: str) -> Any:
    valid = {
        bool: isinstance(value, bool),
        int: isinstance(value, int) and not isinstance(value, bool),
        float: isinstance(value, int | float) and not isinstance(value, bool),
        str: isinstance(value, str),
    }
    if kind not in valid:
        raise TypeError(f"settings type {kind!r} at {path or '<top level>'} is not supported")
    if not valid[kind]:
        raise SettingError(path, f"expected {_SCALAR_NAMES[kind]}, got {value!r}")
    return float(value) if kind is float else value


def _build_dataclass(kind: Any, value: Any, path: str) -> Any:
    if dataclasses.is_dataclass(value) and isinstance(value, kind):  # already built (a default, or by the caller)
        return value
    if not isinstance(value, dict):
        raise SettingError(path, f"expected a mapping of keys, got {value!r}")
    hints = typing.get_type_hints(kind)
    known = {field.name: field for field in dataclasses.fields(kind) if field.init}
    unknown = sorted(set(map(str, value)) - set(known))
    if unknown:
        raise SettingError(join(path, unknown[0]), unknown_key_message(unknown[0], known))
    values = {}
    for name, field in known.items():
        if name in value:
            values[name] = _convert(hints[name], value[name], join(path, name))
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            raise SettingError(join(path, name), "missing key")
    try:
        return kind(**values)
    except SettingError as error:  # a range check of the dataclass: its key is relative to ``path``
        raise SettingError(join(path, error.key), error.message) from None
    except (TypeError, ValueError) as error:
        raise SettingError(path, str(error)) from None
