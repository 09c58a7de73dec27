"""Range checks that config dataclasses run in ``__post_init__``.

A failed check raises :class:`SettingError` naming the field; :func:`common.config.build` prefixes the key
path of the dataclass, so an error in ``params.yaml`` reads ``mmt.pretrain.lr: got 0.0, allowed: 0 < lr < 1``.
"""

from __future__ import annotations

from typing import Any, Literal, get_args, get_origin


class SettingError(ValueError):
    """A setting is invalid.

    Attributes:
        key: Where: the field name, or a dotted path from the object the error is reported for.
        message: What is wrong and what is allowed.
    """

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}" if key else message)
        self.key, self.message = key, message


def check(ok: bool, key: str, value: object, allowed: str) -> None:
    """Raise ``SettingError(key, "got <value>, allowed: <allowed>")`` unless ``ok``."""
    if not ok:
        raise SettingError(key, f"got {value!r}, allowed: {allowed}")


def check_choice(key: str, value: object, kind: Any) -> None:
    """``value`` is one of the ``Literal`` type ``kind``'s values (build checks these from YAML already;
    this catches a config constructed in code)."""
    choices = literal_values(kind)
    check(value in choices, key, value, ", ".join(map(str, choices)))


def literal_values(kind: Any) -> tuple[object, ...]:
    """The values of a ``Literal`` type, or of a union of them (``LossKind | Literal["auto"]``)."""
    if get_origin(kind) is Literal:
        return get_args(kind)
    return tuple(value for option in get_args(kind) for value in literal_values(option))


def check_range(key: str, value: float, low: float, high: float) -> None:
    """``low <= value <= high``."""
    check(low <= value <= high, key, value, f"{low} to {high}")


def check_positive(key: str, value: float, *, below: float | None = None) -> None:
    """``0 < value`` (and ``value < below`` when given): learning rates, margins, clipping norms."""
    if below is None:
        check(value > 0, key, value, f"{key} > 0")
    else:
        check(0 < value < below, key, value, f"0 < {key} < {below:g}")


def check_fraction(key: str, value: float, *, below_one: bool = False) -> None:
    """``0 <= value <= 1`` (``< 1`` with ``below_one``): shares, probabilities, dropout rates."""
    if below_one:
        check(0.0 <= value < 1.0, key, value, f"0 <= {key} < 1")
    else:
        check(0.0 <= value <= 1.0, key, value, "0 to 1")


def check_not_empty(key: str, values: object, what: str) -> None:
    """A list or mapping setting that needs at least one entry."""
    if not values:
        raise SettingError(key, f"at least one {what} is needed")
