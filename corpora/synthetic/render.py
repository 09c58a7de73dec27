"""Draw a scene as an RGB picture: a textured light background and outlined, filled shapes.

The texture (a tinted grey, a gentle gradient and soft blotches) and small colour jitter keep the pixels
from being trivially separable, while the darker outline keeps white and yellow shapes visible.
"""

from __future__ import annotations

import io

import numpy as np
from PIL import Image, ImageDraw

from corpora.synthetic.inventory import COLOURS
from corpora.synthetic.scenes import Scene
from corpora.synthetic.shapes import UNIT_POLYGONS

_TEXTURE_CELLS = 7  # the background texture's grid, upsampled to the image
_BLOTCH = 9.0  # +- grey levels of the texture's cells
_COLOUR_JITTER = 14  # +- levels per channel of an object's fill


def render(scene: Scene, rng: np.random.Generator) -> Image.Image:
    """Draw ``scene``; ``rng`` decides the texture and colour jitter (one generator per image)."""
    image = _background(scene.image_size, rng)
    draw = ImageDraw.Draw(image)
    outline_width = max(1, scene.image_size // 112)
    for obj in scene.objects:
        points = UNIT_POLYGONS[obj.shape] * np.array(obj.radii) + np.array(obj.centre)  # (corners, 2)
        jitter = rng.integers(-_COLOUR_JITTER, _COLOUR_JITTER + 1, size=3)
        fill = np.clip(np.array(COLOURS[obj.colour]) + jitter, 0, 255)
        outline = (fill * 0.55).astype(int) if obj.colour != "white" else np.array([130, 130, 130])
        draw.polygon(
            [tuple(point) for point in points.tolist()],
            fill=tuple(int(v) for v in fill),
            outline=tuple(int(v) for v in outline),
            width=outline_width,
        )
    return image


def _background(size: int, rng: np.random.Generator) -> Image.Image:
    """A light, slightly tinted grey with a gradient and soft blotches.

    The texture is drawn on a coarse grid and upsampled bilinearly: cheap to draw, and smooth enough
    that the PNG stays small (pixel noise would triple the file size and the encoding time).
    """
    grid = np.linspace(-0.5, 0.5, _TEXTURE_CELLS)
    slope = rng.uniform(-14.0, 14.0, size=2)  # grey levels across the image in x and y
    gradient = slope[0] * grid[None, :] + slope[1] * grid[:, None]  # (cells, cells)
    base = rng.uniform(180.0, 212.0) + rng.uniform(-8.0, 8.0, size=3)  # (3,) tinted grey
    blotches = rng.uniform(-_BLOTCH, _BLOTCH, size=(_TEXTURE_CELLS, _TEXTURE_CELLS, 3))
    coarse = np.clip(base[None, None, :] + gradient[:, :, None] + blotches, 0, 255).astype(np.uint8)
    return Image.fromarray(coarse, mode="RGB").resize((size, size), Image.Resampling.BILINEAR)


def png_bytes(image: Image.Image) -> bytes:
    """Encode as PNG; Pillow writes no timestamp or other metadata unless asked, so bytes are reproducible."""
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", compress_level=6)
    return buffer.getvalue()
