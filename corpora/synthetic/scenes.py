"""Scenes: a few shapes placed on a square canvas, and the spatial facts that are true of them.

A scene is pure geometry (no pixels): the image renderer draws it, the caption samplers read the
relations and places from it, and the parallel corpus samples scenes that are never drawn.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from corpora.synthetic.inventory import COLOURS, SHAPES, SIZES
from corpora.synthetic.shapes import HALF_EXTENTS
from corpora.synthetic.streams import chance, integer, pick, uniform

Box = tuple[float, float, float, float]  # x0, y0, x1, y1 in pixels

_DUPLICATE_PROBABILITY = 0.2  # repeat an earlier shape and colour, so that "two red circles" occurs
_MAX_OVERLAP = 0.05  # intersection over the smaller box: boxes may touch but not hide each other
_TRIES_PER_OBJECT = 60
_TRIES_PER_SCENE = 200
_NEXT_TO_GAP = 0.15  # of the image side: the widest horizontal gap that still reads as "next to"
_DOMINANCE = 0.8  # "left of" needs |dy| <= 0.8 |dx| (within ~39 degrees of the axis); likewise "above"


@dataclass(frozen=True)
class SceneObject:
    """One drawn shape: its labels and where it lies."""

    shape: str
    colour: str
    size: str
    centre: tuple[float, float]
    radii: tuple[float, float]  # scale of the unit polygon along x and y, in pixels
    box: Box


@dataclass(frozen=True)
class Scene:
    image_size: int
    objects: tuple[SceneObject, ...]


def sample_scene(
    rng: random.Random, *, image_size: int, min_objects: int, max_objects: int, look_alike: float = 0.0
) -> Scene:
    """Draw labels for ``min_objects..max_objects`` shapes and place them without much overlap.

    ``look_alike`` is the chance that a shape after the first shares the shape or the colour (not both) of
    an earlier one: a distractor that only the attribute it does not share tells apart. A scene whose
    shapes do not fit (possible with many big ones) is drawn again from scratch.
    """
    for _ in range(_TRIES_PER_SCENE):
        labels = _sample_labels(rng, integer(rng, min_objects, max_objects), look_alike)
        objects = _place(rng, labels, image_size)
        if objects is not None:
            return Scene(image_size=image_size, objects=objects)
    raise RuntimeError(f"could not place {max_objects} objects on a {image_size} px canvas")


def _sample_labels(rng: random.Random, count: int, look_alike: float) -> list[tuple[str, str, str]]:
    labels: list[tuple[str, str, str]] = []
    for _ in range(count):
        size = pick(rng, tuple(SIZES))
        if labels and chance(rng, _DUPLICATE_PROBABILITY):
            shape, colour, _ = pick(rng, labels)
        elif labels and look_alike > 0 and chance(rng, look_alike):  # no draw at 0: older seeds keep their scenes
            shape, colour, _ = pick(rng, labels)
            if chance(rng, 0.5):
                shape = pick(rng, [s for s in SHAPES if s != shape])
            else:
                colour = pick(rng, [c for c in COLOURS if c != colour])
        else:
            shape, colour = pick(rng, SHAPES), pick(rng, tuple(COLOURS))
        labels.append((shape, colour, size))
    return labels


def _place(
    rng: random.Random, labels: Sequence[tuple[str, str, str]], image_size: int
) -> tuple[SceneObject, ...] | None:
    placed: list[SceneObject] = []
    for shape, colour, size in labels:
        for _ in range(_TRIES_PER_OBJECT):
            candidate = _candidate(rng, shape, colour, size, image_size)
            if all(_overlap(candidate.box, other.box) <= _MAX_OVERLAP for other in placed):
                placed.append(candidate)
                break
        else:
            return None
    return tuple(placed)


def _candidate(rng: random.Random, shape: str, colour: str, size: str, image_size: int) -> SceneObject:
    radius = SIZES[size] * image_size / 2.0 * uniform(rng, 0.9, 1.1)
    radii = (radius * uniform(rng, 0.92, 1.08), radius * uniform(rng, 0.92, 1.08))
    half_w, half_h = HALF_EXTENTS[shape][0] * radii[0], HALF_EXTENTS[shape][1] * radii[1]
    margin = 2.0  # keep the outline inside the canvas
    cx = uniform(rng, half_w + margin, image_size - half_w - margin)
    cy = uniform(rng, half_h + margin, image_size - half_h - margin)
    box = (cx - half_w, cy - half_h, cx + half_w, cy + half_h)
    return SceneObject(shape=shape, colour=colour, size=size, centre=(cx, cy), radii=radii, box=box)


def _overlap(a: Box, b: Box) -> float:
    width = min(a[2], b[2]) - max(a[0], b[0])
    height = min(a[3], b[3]) - max(a[1], b[1])
    if width <= 0 or height <= 0:
        return 0.0
    smaller = min((a[2] - a[0]) * (a[3] - a[1]), (b[2] - b[0]) * (b[3] - b[1]))
    return width * height / smaller


def relation_holds(relation: str, a: Box, b: Box, image_size: int) -> bool:
    """Whether ``a <relation> b`` is true: the boxes are apart along the relation's axis, which dominates.

    "Left of" needs ``a`` wholly left of ``b`` and clearly more to the side than above or below it, so
    that a shape up and to the left is not called "left of" (nor "above"); "next to" needs side by side,
    close, at a similar height.
    """
    dx = (b[0] + b[2]) / 2.0 - (a[0] + a[2]) / 2.0  # > 0: b's centre is right of a's
    dy = (b[1] + b[3]) / 2.0 - (a[1] + a[3]) / 2.0  # > 0: b's centre is below a's
    if relation == "left_of":
        return a[2] <= b[0] and abs(dy) <= _DOMINANCE * abs(dx)
    if relation == "right_of":
        return b[2] <= a[0] and abs(dy) <= _DOMINANCE * abs(dx)
    if relation == "above":
        return a[3] <= b[1] and abs(dx) <= _DOMINANCE * abs(dy)
    if relation == "below":
        return b[3] <= a[1] and abs(dx) <= _DOMINANCE * abs(dy)
    if relation == "next_to":
        gap = max(b[0] - a[2], a[0] - b[2])
        shared_height = min(a[3], b[3]) - max(a[1], b[1])
        smaller_height = min(a[3] - a[1], b[3] - b[1])
        return 0.0 <= gap <= _NEXT_TO_GAP * image_size and shared_height >= 0.5 * smaller_height
    raise ValueError(f"unknown relation {relation!r}")


def place_holds(place: str, box: Box, image_size: int) -> bool:
    """Whether the box's centre lies in the named part of the picture (outer 30% bands, inner 24% square)."""
    cx, cy = (box[0] + box[2]) / (2.0 * image_size), (box[1] + box[3]) / (2.0 * image_size)
    if place == "left":
        return cx < 0.3
    if place == "right":
        return cx > 0.7
    if place == "top":
        return cy < 0.3
    if place == "bottom":
        return cy > 0.7
    if place == "middle":
        return 0.38 <= cx <= 0.62 and 0.38 <= cy <= 0.62
    raise ValueError(f"unknown place {place!r}")


def matching(scene: Scene, shape: str, colour: str | None = None, size: str | None = None) -> list[int]:
    """Indices of the objects a description fits (``None`` attributes are not mentioned)."""
    return [
        index
        for index, obj in enumerate(scene.objects)
        if obj.shape == shape and colour in (None, obj.colour) and size in (None, obj.size)
    ]
