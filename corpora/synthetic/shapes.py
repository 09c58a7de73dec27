"""Outlines of the shapes as unit polygons, shared by the scene sampler (boxes) and the renderer (pixels).

Each polygon is centred on its bounding box and scaled so that the longer side of that box is 2, so an
object's box follows from its centre, its radius and the polygon's half extents alone.
"""

from __future__ import annotations

import numpy as np

from corpora.synthetic.inventory import SHAPES


def _regular(corners: int, *, radius: float = 1.0, start_deg: float = -90.0) -> np.ndarray:
    angles = np.deg2rad(start_deg + 360.0 * np.arange(corners) / corners)
    return radius * np.stack([np.cos(angles), np.sin(angles)], axis=1)  # (corners, 2), y points down


def _star(points: int = 5, inner: float = 0.42) -> np.ndarray:
    radii = np.where(np.arange(2 * points) % 2 == 0, 1.0, inner)
    angles = np.deg2rad(-90.0 + 180.0 * np.arange(2 * points) / points)
    return np.stack([radii * np.cos(angles), radii * np.sin(angles)], axis=1)


def _cross(arm: float = 0.33) -> np.ndarray:
    a = arm
    return np.array(
        [(-a, -1), (a, -1), (a, -a), (1, -a), (1, a), (a, a), (a, 1), (-a, 1), (-a, a), (-1, a), (-1, -a), (-a, -a)],
        dtype=np.float64,
    )


def _heart(steps: int = 64) -> np.ndarray:
    t = np.linspace(0.0, 2.0 * np.pi, steps, endpoint=False)
    x = 16.0 * np.sin(t) ** 3
    y = -(13.0 * np.cos(t) - 5.0 * np.cos(2 * t) - 2.0 * np.cos(3 * t) - np.cos(4 * t))  # minus: image y is down
    return np.stack([x, y], axis=1)


def _normalise(points: np.ndarray) -> np.ndarray:
    """Centre on the bounding box and scale its longer side to 2."""
    low, high = points.min(axis=0), points.max(axis=0)
    return (points - (low + high) / 2.0) * (2.0 / float((high - low).max()))


_RAW: dict[str, np.ndarray] = {
    "circle": _regular(64),
    "square": np.array([(-1, -1), (1, -1), (1, 1), (-1, 1)], dtype=np.float64),
    "triangle": _regular(3),
    "star": _star(),
    "diamond": np.array([(0, -1), (0.7, 0), (0, 1), (-0.7, 0)], dtype=np.float64),
    "hexagon": _regular(6, start_deg=0.0),
    "cross": _cross(),
    "ellipse": _regular(64) * np.array([1.0, 0.6]),
    "heart": _heart(),
    "pentagon": _regular(5),
}

UNIT_POLYGONS: dict[str, np.ndarray] = {name: _normalise(_RAW[name]) for name in SHAPES}

# Half width and half height of each unit polygon's box (the longer one is 1).
HALF_EXTENTS: dict[str, tuple[float, float]] = {
    name: (float(points[:, 0].max()), float(points[:, 1].max())) for name, points in UNIT_POLYGONS.items()
}
