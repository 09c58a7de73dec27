"""The closed world of the synthetic dataset: shape, colour and size names, spatial relations and places.

Every grammar has one lexicon entry per name listed here, and the scene sampler draws only from these
tables, so a name added here without a lexicon entry fails the grammar tests rather than a run.
"""

from __future__ import annotations

SHAPES: tuple[str, ...] = (
    "circle",
    "square",
    "triangle",
    "star",
    "diamond",
    "hexagon",
    "cross",
    "ellipse",
    "heart",
    "pentagon",
)

# Fill colours as RGB. Mid-saturation values so that every colour, white included, stands out from the
# light grey background once the renderer draws its darker outline.
COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (210, 40, 40),
    "green": (40, 160, 60),
    "blue": (40, 80, 210),
    "yellow": (240, 215, 40),
    "orange": (245, 140, 30),
    "purple": (140, 60, 175),
    "black": (25, 25, 25),
    "white": (252, 252, 252),
}

# Longest side of an object's box as a fraction of the image side; "big" is twice "small" so the two
# sizes never overlap even after the renderer's +-10% jitter.
SIZES: dict[str, float] = {"small": 0.15, "big": 0.30}

# Cover terms of the underspecifying pivot: one word for colours that the target languages name apart, and a
# hypernym for every shape. A mention is said by its cover term only where that fits the same objects.
COLOUR_COVERS: dict[str, tuple[str, ...]] = {"dark": ("black", "blue", "purple"), "light": ("white", "yellow")}
SHAPE_COVER = "shape"


def colour_cover(colour: str) -> str | None:
    """The cover term of ``colour`` ("dark" for "blue"), None for colours that have none."""
    return next((cover for cover, colours in COLOUR_COVERS.items() if colour in colours), None)


RELATIONS: tuple[str, ...] = ("left_of", "right_of", "above", "below", "next_to")

PLACES: tuple[str, ...] = ("top", "bottom", "left", "right", "middle")

MAX_OBJECTS = 8  # number words and placement are designed for at most this many objects per scene
