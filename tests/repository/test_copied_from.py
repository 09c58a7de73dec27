"""Borrowed code stays identical to its original.

A comment line ``# Copied from <module>.<Name>`` directly above a top-level ``def`` or ``class`` (above its
first decorator, if any) says the definition is a verbatim copy of ``<Name>`` in ``<module>``; the form
``# Copied from <module>.<Name> with A->B, C->D`` (HuggingFace transformers' convention) says so after
replacing ``A`` by ``B`` and then ``C`` by ``D`` in the original's text. When the original changes, every copy
must change with it (or lose its marker): this test compares the two texts, decorators, docstrings and
comments included, ignoring only trailing whitespace, and shows a unified diff when they differ.

Sources are read with ``ast`` and ``tokenize``, never imported, so markers in ``tasks`` and ``flows`` are
checked without Prefect.
"""

from __future__ import annotations

import ast
import difflib
import io
import re
import tokenize
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("settings", "corpora", "features", "mmt", "retrieval", "tasks", "flows")

PREFIX = "# Copied from"
MARKER = re.compile(r"# Copied from (?P<target>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)(?: with (?P<renames>.+))?")
RENAME = re.compile(r"(?P<old>\S+)->(?P<new>\S+)")


@dataclass(frozen=True)
class Marker:
    """A ``# Copied from`` comment.

    Attributes:
        path: The file, relative to the root it was found under.
        line: 1-based line of the comment.
        column: Its indentation (0 for a marker of a top-level definition).
        text: The comment, stripped.
        alone: Whether the comment is the only thing on its line.
    """

    path: Path
    line: int
    column: int
    text: str
    alone: bool

    @property
    def where(self) -> str:
        return f"{self.path.as_posix()}:{self.line}"


def find_markers(root: Path, packages: tuple[str, ...] = PACKAGES) -> list[Marker]:
    """Every comment starting with ``# Copied from`` in the ``.py`` files of ``packages`` under ``root``.

    Comments are found with :mod:`tokenize`, so the words inside a string or docstring are no marker.
    """
    markers = []
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            source = path.read_text(encoding="utf-8")
            for token in tokenize.generate_tokens(io.StringIO(source).readline):
                if token.type == tokenize.COMMENT and token.string.startswith(PREFIX):
                    row, column = token.start
                    alone = token.line.strip() == token.string
                    markers.append(Marker(path.relative_to(root), row, column, token.string.strip(), alone))
    return markers


def parse_renames(text: str | None) -> list[tuple[str, str]] | None:
    """``A->B, C->D`` -> [(A, B), (C, D)]; None when ``text`` is not a comma-separated list of such pairs."""
    if text is None:
        return []
    pairs = []
    for part in text.split(","):
        match = RENAME.fullmatch(part.strip())
        if match is None:
            return None
        pairs.append((match["old"], match["new"]))
    return pairs


Definition = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef


def definitions(source: str) -> list[Definition]:
    """The top-level defs and classes of a module, in order."""
    return [node for node in ast.parse(source).body if isinstance(node, Definition)]


def first_line(node: Definition) -> int:
    """Line of a definition's first decorator, or of the def/class itself."""
    return min([node.lineno, *(decorator.lineno for decorator in node.decorator_list)])


def definition_text(lines: list[str], node: Definition) -> str:
    """The source of a definition, from its first decorator to its last line, trailing blanks per line removed."""
    assert node.end_lineno is not None
    return "\n".join(line.rstrip() for line in lines[first_line(node) - 1 : node.end_lineno])


def resolve(root: Path, target: str) -> tuple[Path, str] | None:
    """``a.b.Name`` -> (root/a/b.py or root/a/b/__init__.py, ``Name``); None when neither file exists."""
    *module, name = target.split(".")
    for candidate in (root.joinpath(*module).with_suffix(".py"), root.joinpath(*module, "__init__.py")):
        if candidate.is_file():
            return candidate, name
    return None


def check_copy(root: Path, marker: Marker) -> list[str]:
    """What is wrong with ``marker`` and the definition under it: nothing (an empty list) when the copy is
    faithful."""
    where = marker.where
    match = MARKER.fullmatch(marker.text)
    renames = parse_renames(match["renames"]) if match else None
    if match is None or renames is None:
        return [f"{where}: malformed marker {marker.text!r}; expected '# Copied from <module>.<Name> [with A->B, ...]'"]
    target = match["target"]
    if not marker.alone or marker.column != 0:
        return [f"{where}: {marker.text!r} must be a line of its own directly above a top-level def or class"]
    copy_source = (root / marker.path).read_text(encoding="utf-8")
    copies = [node for node in definitions(copy_source) if first_line(node) == marker.line + 1]
    if not copies:
        return [f"{where}: {marker.text!r} is not directly above a top-level def or class (or its first decorator)"]
    copy = copies[0]
    resolved = resolve(root, target)
    if resolved is None:
        return [f"{where}: {target} names no module under {root}"]
    original_path, name = resolved
    original_source = original_path.read_text(encoding="utf-8")
    # the last definition of a name is the one the module exports
    original = next((node for node in reversed(definitions(original_source)) if node.name == name), None)
    original_where = original_path.relative_to(root).as_posix()
    if original is None:
        return [f"{where}: {target}: {original_where} has no top-level def or class {name!r}"]
    if original_path == root / marker.path and original.lineno == copy.lineno:
        return [f"{where}: {marker.text!r} names the definition under it, not an original"]
    expected = definition_text(original_source.splitlines(), original)
    for old, new in renames:
        expected = expected.replace(old, new)
    found = definition_text(copy_source.splitlines(), copy)
    if found == expected:
        return []
    diff = difflib.unified_diff(
        expected.splitlines(),
        found.splitlines(),
        fromfile=f"{original_where}:{first_line(original)} ({target}{' with renames' if renames else ''})",
        tofile=f"{where} ({copy.name})",
        lineterm="",
    )
    return [
        f"{where}: {copy.name} is marked as a copy of {target} ({original_where}:{first_line(original)}) but differs;"
        " change both or drop the marker:\n" + "\n".join(diff)
    ]


MARKERS = find_markers(REPO)


def test_the_finder_finds_markers() -> None:
    """A finder that silently found nothing would make every copy check below pass vacuously."""
    assert MARKERS, f"no '{PREFIX}' marker found under {', '.join(PACKAGES)}"


@pytest.mark.parametrize("marker", MARKERS, ids=[marker.where for marker in MARKERS])
def test_copy_matches_its_original(marker: Marker) -> None:
    problems = check_copy(REPO, marker)
    assert not problems, "\n\n".join(problems)


# --- the checker itself ---------------------------------------------------------------------------------------

ORIGINAL = '''"""A module with originals."""

import functools


@functools.cache
def helper(x: int) -> int:
    """Twice x."""
    return 2 * x  # doubled


class FooBranch:
    def forward(self, foo: int) -> int:
        return helper(foo)
'''


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def problems_of(tmp_path: Path, copy: str) -> list[str]:
    """Problems of every marker in ``copy`` (as pkg/copy.py, beside ORIGINAL as pkg/orig.py)."""
    write(tmp_path, {"pkg/__init__.py": "", "pkg/orig.py": ORIGINAL, "pkg/copy.py": copy})
    markers = find_markers(tmp_path, ("pkg",))
    assert markers, "the test's copy has no marker"
    return [problem for marker in markers for problem in check_copy(tmp_path, marker)]


FAITHFUL = '''import functools


# Copied from pkg.orig.helper
@functools.cache
def helper(x: int) -> int:
    """Twice x."""
    return 2 * x  # doubled


# Copied from pkg.orig.FooBranch with Foo->Bar, foo->bar
class BarBranch:
    def forward(self, bar: int) -> int:
        return helper(bar)
'''


def test_faithful_copies_pass_and_trailing_whitespace_is_ignored(tmp_path: Path) -> None:
    assert problems_of(tmp_path, FAITHFUL) == []
    assert problems_of(tmp_path, FAITHFUL.replace("# doubled", "# doubled \t ")) == []


def test_an_edited_copy_fails_with_the_places_and_a_diff(tmp_path: Path) -> None:
    problems = problems_of(tmp_path, FAITHFUL.replace("return 2 * x", "return 3 * x"))
    assert len(problems) == 1
    message = problems[0]
    assert message.startswith("pkg/copy.py:4: helper is marked as a copy of pkg.orig.helper (pkg/orig.py:6)")
    assert "-    return 2 * x  # doubled" in message and "+    return 3 * x  # doubled" in message


def test_renames_are_applied_to_the_original(tmp_path: Path) -> None:
    without_renames = FAITHFUL.replace(" with Foo->Bar, foo->bar", "")
    problems = problems_of(tmp_path, without_renames)
    assert len(problems) == 1 and problems[0].startswith("pkg/copy.py:11: BarBranch is marked as a copy")
    # only one of the two renames: the parameter name still differs
    problems = problems_of(tmp_path, FAITHFUL.replace(", foo->bar", ""))
    assert len(problems) == 1 and "+    def forward(self, bar: int) -> int:" in problems[0]


def test_a_dropped_decorator_or_comment_counts_as_a_change(tmp_path: Path) -> None:
    assert problems_of(tmp_path, FAITHFUL.replace("@functools.cache\n", ""))
    assert problems_of(tmp_path, FAITHFUL.replace("  # doubled", ""))


@pytest.mark.parametrize(
    ("copy", "expected"),
    [
        ("# Copied from pkg.orig.helper\n\ndef helper(x: int) -> int:\n    return 2 * x\n", "not directly above"),
        ("# Copied from pkg.orig.helper\nhelper = None\n", "not directly above"),
        ("class A:\n    # Copied from pkg.orig.helper\n    def helper(self) -> None: ...\n", "line of its own"),
        ("x = 1  # Copied from pkg.orig.helper\n", "line of its own"),
        ("# Copied from pkg.orig.missing\ndef missing() -> None: ...\n", "has no top-level def or class 'missing'"),
        ("# Copied from pkg.nowhere.helper\ndef helper() -> None: ...\n", "names no module"),
        ("# Copied from helper\ndef helper() -> None: ...\n", "malformed marker"),
        ("# Copied from pkg.orig.helper with helper=>h\ndef h() -> None: ...\n", "malformed marker"),
        ("# Copied from pkg.copy.own\ndef own() -> None: ...\n", "names the definition under it"),
    ],
    ids=[
        "blank-line",
        "not-a-def",
        "indented",
        "trailing",
        "missing-name",
        "missing-module",
        "no-module",
        "bad-rename",
        "itself",
    ],
)
def test_misplaced_or_dangling_markers_fail(tmp_path: Path, copy: str, expected: str) -> None:
    problems = problems_of(tmp_path, copy)
    assert len(problems) == 1 and expected in problems[0], problems


def test_words_in_a_docstring_are_no_marker(tmp_path: Path) -> None:
    write(tmp_path, {"pkg/orig.py": ORIGINAL, "pkg/doc.py": '"""\n# Copied from pkg.orig.helper\n"""\n'})
    assert find_markers(tmp_path, ("pkg",)) == []
