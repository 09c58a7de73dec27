"""Profiles: the papers' experiments as params overlays, one file per table under ``profiles/`` (on the built-in
world: ``table<n>``, the pass ablation ``passes``, ``huang2019``, ``mule`` and ``kadar2018``; on real data:
``real_<corpus>``), and the papers' sizes for a GPU (``paper_sizes``, ``huang2019_sizes``).

A profile is a partial params tree. Applying it merges it into a params file (mappings key by key, any other
value replaced; `corpora`, `corpus_roles`, `retrieval.aliases`, `retrieval.custom_roles` and
`retrieval.objective.per_model` are replaced whole, and every profile sets the same keys, so nothing of an earlier
profile leaks into the next), validates the result as :class:`~mmtr.params.Params`, and writes it back atomically
with its comments kept, so that ``dvc exp run`` (or ``dvc repro``) runs the experiment and DVC records exactly what
changed. The built-in corpora are the default inputs of every profile; point `corpora` at your data to run it on
real data.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from typing import Any

import yaml
from ruamel.yaml import YAML

from common.errors import InputError
from common.files import write_text
from mmtr.params import Params, parse_params

PROFILES = Path(__file__).resolve().parent  # the profile files ship inside the package


def profile_names(folder: Path = PROFILES) -> list[str]:
    return sorted(path.stem for path in folder.glob("*.yaml"))


def experiment_names(folder: Path = PROFILES) -> list[str]:
    """The experiment profiles: each names its corpora and sets the same keys as every other, so that applying one
    replaces the last. The others (``paper_sizes``) set sizes and schedules alone, none of an experiment's keys."""
    return [name for name in profile_names(folder) if "corpora" in load_profile(name, folder)]


def profile_summary(name: str, folder: Path = PROFILES) -> str:
    """The first comment line of the profile file (what the profile reproduces)."""
    for line in _profile_path(name, folder).read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            return line.lstrip("# ").strip()
    return ""


def load_profile(name: str, folder: Path = PROFILES) -> dict[str, Any]:
    """The overlay tree of profile ``name``.

    Raises:
        InputError: an unknown profile (the known ones listed), or a file that is not a mapping.
    """
    path = _profile_path(name, folder)
    tree = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(tree, dict):
        raise InputError(f"{path}: a profile is a mapping of params keys, got {type(tree).__name__}")
    return tree


def _profile_path(name: str, folder: Path) -> Path:
    path = folder / f"{name}.yaml"
    if not re.fullmatch(r"[a-z0-9_]+", name) or not path.is_file():
        raise InputError(f"unknown profile {name!r}; known: {', '.join(profile_names(folder))}")
    return path


# Sections a profile replaces whole (keys it leaves out are dropped): the corpora of one experiment are not a
# patch on another's, and neither are its model aliases, per-model losses or its own language roles.
# "corpora.*": each corpus entry too (an image_set of one experiment's corpus must not stay on the next one's).
REPLACED_WHOLE = frozenset(
    {
        "corpora",
        "corpora.*",
        "corpus_roles",
        "prepare.multi30k.eval_sets",
        "retrieval.aliases",
        "retrieval.custom_roles",
        "retrieval.objective.per_model",
    }
)


def merge(
    base: MutableMapping[str, Any],
    overlay: Mapping[str, Any],
    *,
    replaced: frozenset[str] = frozenset(),
    prefix: str = "",
) -> None:
    """Merge ``overlay`` into ``base`` in place: mappings key by key, every other value replaced. A mapping whose key
    path is in ``replaced`` loses the keys ``overlay`` leaves out (the rest merge as usual, keeping comments)."""
    path = prefix.rstrip(".")
    if path in replaced or (path and f"{path.rpartition('.')[0]}.*" in replaced):
        for key in [key for key in base if key not in overlay]:
            del base[key]
    for key, value in overlay.items():
        emptied = not value and f"{prefix}{key}" in replaced  # a plain {} (ruamel cannot dump an emptied block map)
        if isinstance(value, Mapping) and isinstance(base.get(key), MutableMapping) and not emptied:
            merge(base[key], value, replaced=replaced, prefix=f"{prefix}{key}.")
        elif isinstance(value, list) and isinstance(base.get(key), list):
            base[key][:] = value  # in place: the list keeps its layout and comments (ruamel loses an emptied one's)
        else:
            base[key] = value


def _float(representer: Any, value: float) -> Any:
    """A profile's float as YAML 1.1 readers (PyYAML, which loads params.yaml) take it: ruamel writes 1e-06, which
    they read as a string; 1.0e-06 is a float to both."""
    text = repr(value)
    mantissa, exponent, power = text.partition("e")
    if not exponent or not math.isfinite(value):
        return representer.represent_float(value)
    if "." not in mantissa:
        text = f"{mantissa}.0e{power}"
    return representer.represent_scalar("tag:yaml.org,2002:float", text)


def apply_profile(name: str, params_path: Path, out_path: Path, folder: Path = PROFILES) -> Params:
    """Merge profile ``name`` into the params file at ``params_path``, validate, and write ``out_path``.

    Raises:
        InputError: an unknown profile, or a params file that is not valid YAML.
        mmtr.params.ParamsError: the merged params are invalid (nothing is written).
    """
    overlay = load_profile(name, folder)
    round_trip = YAML()  # keeps the params file's comments and key order
    round_trip.width = 4096
    round_trip.representer.add_representer(float, _float)
    try:
        tree = round_trip.load(params_path.read_text(encoding="utf-8"))
    except Exception as error:  # ruamel raises several unrelated types for bad YAML
        raise InputError(f"{params_path}: not valid YAML: {error}") from None
    merge(tree, overlay, replaced=REPLACED_WHOLE)
    buffer = io.StringIO()
    round_trip.dump(tree, buffer)
    text = buffer.getvalue()
    params = parse_params(yaml.safe_load(text), source=f"{params_path} + profile {name}")
    write_text(out_path, text)
    return params
