"""Building config dataclasses from plain mappings: type checks, key paths, range checks in __post_init__."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import pytest

from common.checks import SettingError, check_fraction, check_not_empty, check_positive, check_range
from common.config import build, join, unknown_key_message

Colour = Literal["red", "green"]


@dataclass(frozen=True)
class Leaf:
    rate: float = 0.5
    count: int = 1

    def __post_init__(self) -> None:
        check_fraction("rate", self.rate)
        check_range("count", self.count, 1, 9)


@dataclass(frozen=True)
class Branch:
    name: str
    leaf: Leaf = field(default_factory=Leaf)
    colours: tuple[Colour, ...] = ("red",)
    weights: dict[str, float] = field(default_factory=dict)
    note: str | None = None
    mode: Colour | Literal["auto"] = "auto"
    anything: Any = None

    def __post_init__(self) -> None:
        if self.mode == "green" and "green" not in self.colours:
            raise SettingError("mode", "green needs green among the colours")


@dataclass(frozen=True)
class Plain:
    size: int

    def __post_init__(self) -> None:
        if self.size == 13:
            raise ValueError("unlucky")


def test_a_full_tree_is_converted_field_by_field() -> None:
    tree = {
        "name": "a",
        "leaf": {"rate": 1, "count": 3},
        "colours": ["green", "red"],
        "weights": {"x": 2},
        "note": None,
        "mode": "green",
        "anything": [1, {"b": 2}],
    }
    branch = build(Branch, tree)
    assert branch == Branch("a", Leaf(1.0, 3), ("green", "red"), {"x": 2.0}, None, "green", [1, {"b": 2}])
    assert isinstance(branch.leaf.rate, float) and isinstance(branch.weights["x"], float)


def test_missing_fields_with_defaults_keep_them() -> None:
    assert build(Branch, {"name": "a"}) == Branch("a")
    assert build(Branch, {"name": "a"}).leaf is not Branch("b").leaf  # default_factory: a fresh value each time


@pytest.mark.parametrize(
    ("tree", "message"),
    [
        ({}, r"^top\.name: missing key$"),
        ({"name": "a", "nmae": 1}, r"^top\.nmae: unknown key; did you mean 'name'\? allowed keys here: name, leaf, "),
        ({"name": "a", "zzz": 1}, r"^top\.zzz: unknown key; allowed keys here: name, leaf, colours, weights"),
        ({"name": 3}, r"^top\.name: expected a string, got 3$"),
        ({"name": "a", "leaf": {"count": True}}, r"^top\.leaf\.count: expected an integer, got True$"),
        ({"name": "a", "leaf": {"count": 1.5}}, r"^top\.leaf\.count: expected an integer, got 1\.5$"),
        ({"name": "a", "leaf": {"rate": "x"}}, r"^top\.leaf\.rate: expected a number, got 'x'$"),
        ({"name": "a", "leaf": {"rate": 1.5}}, r"^top\.leaf\.rate: got 1\.5, allowed: 0 to 1$"),
        ({"name": "a", "leaf": {"count": 10}}, r"^top\.leaf\.count: got 10, allowed: 1 to 9$"),
        ({"name": "a", "leaf": 3}, r"^top\.leaf: expected a mapping of keys, got 3$"),
        ({"name": "a", "colours": ["red", "blue"]}, r"^top\.colours\[1\]: got 'blue', allowed: red, green$"),
        ({"name": "a", "colours": "red"}, r"^top\.colours: expected a list, got 'red'$"),
        ({"name": "a", "weights": [1]}, r"^top\.weights: expected a mapping, got \[1\]$"),
        ({"name": "a", "weights": {"x": "heavy"}}, r"^top\.weights\.x: expected a number, got 'heavy'$"),
        ({"name": "a", "mode": "blue"}, r"^top\.mode: got 'blue', allowed: red, green, auto$"),
        ({"name": "a", "mode": "green"}, r"^top\.mode: green needs green among the colours$"),
    ],
)
def test_errors_name_the_key_path_the_value_and_what_is_allowed(tree: dict[str, Any], message: str) -> None:
    with pytest.raises(SettingError, match=message):
        build(Branch, tree, "top")


def test_plain_value_errors_of_post_init_are_reported_at_the_object() -> None:
    with pytest.raises(SettingError, match=r"^section: unlucky$"):
        build(Plain, {"size": 13}, "section")
    assert build(Plain, {"size": 12}) == Plain(12)


def test_already_built_dataclasses_pass_through() -> None:
    leaf = Leaf(0.25, 2)
    assert build(Branch, {"name": "a", "leaf": leaf}).leaf is leaf


def test_only_dataclasses_are_built_and_unsupported_types_are_named() -> None:
    @dataclass(frozen=True)
    class Odd:
        values: set[int]

    with pytest.raises(TypeError, match="takes a dataclass type"):
        build(dict, {})  # type: ignore[type-var]
    with pytest.raises(TypeError, match=r"settings type set\[int\] at odd\.values is not supported"):
        build(Odd, {"values": [1]}, "odd")


def test_join_and_the_checks_messages() -> None:
    assert (join("", "a"), join("a", "b"), join("a", "")) == ("a", "a.b", "a")
    for call, message in [
        (lambda: check_positive("lr", 0.0, below=1.0), r"^lr: got 0\.0, allowed: 0 < lr < 1$"),
        (lambda: check_positive("clip", -1.0), r"^clip: got -1\.0, allowed: clip > 0$"),
        (lambda: check_fraction("dropout", 1.0, below_one=True), r"^dropout: got 1\.0, allowed: 0 <= dropout < 1$"),
        (lambda: check_not_empty("kinds", (), "kind"), r"^kinds: at least one kind is needed$"),
    ]:
        with pytest.raises(SettingError, match=message):
            call()
    check_positive("lr", 0.5, below=1.0)
    check_fraction("share", 1.0)


def test_an_unknown_key_names_the_closest_known_one_if_any() -> None:
    assert unknown_key_message("pretrian", ["text", "pretrain", "finetune"]) == (
        "unknown key; did you mean 'pretrain'? allowed keys here: text, pretrain, finetune"
    )
    assert unknown_key_message("colour", ["text", "pretrain"]) == "unknown key; allowed keys here: text, pretrain"
