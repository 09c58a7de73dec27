"""Loading images for extraction: every mode (greyscale, CMYK, alpha, palette) becomes 8-bit RGB; broken files
raise :class:`BadImageError` with the reason, so a run can fail naming every bad file or skip and record them.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
from PIL import Image, ImageFile

# A truncated file must be an error, not a silently grey-padded image.
ImageFile.LOAD_TRUNCATED_IMAGES = False


class BadImageError(ValueError):
    """An image that cannot be used; ``reason`` is short enough for an index column."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path, self.reason = path, reason


def load_rgb(path: str | Path) -> np.ndarray:
    """Decode ``path`` fully into an (H, W, 3) uint8 RGB array.

    Alpha is composited on white (transparent regions of PNG icons would otherwise turn black), CMYK and
    greyscale are converted, 16-bit images are scaled to 8 bits.

    Raises:
        BadImageError: missing, empty, not an image, truncated or zero-sized.
    """
    source = Path(path)
    if not source.is_file():
        raise BadImageError(source, "missing")
    if source.stat().st_size == 0:
        raise BadImageError(source, "empty file")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(source) as image:
                image.load()
                rgb = _to_rgb(image, source)
    except BadImageError:
        raise
    except (Image.DecompressionBombWarning, Image.DecompressionBombError) as error:
        # more pixels than PIL's limit (Image.MAX_IMAGE_PIXELS): bad input, never a transient failure to retry
        raise BadImageError(source, f"too many pixels, a possible decompression bomb ({error})") from None
    except (OSError, SyntaxError, ValueError) as error:
        reason = "truncated" if "truncated" in str(error) else f"not a readable image ({error})"
        raise BadImageError(source, reason) from None
    if rgb.shape[0] == 0 or rgb.shape[1] == 0:
        raise BadImageError(source, "zero size")
    return rgb


def _to_rgb(image: Image.Image, source: Path) -> np.ndarray:
    if image.width == 0 or image.height == 0:
        raise BadImageError(source, "zero size")
    if image.mode in ("I;16", "I;16B", "I;16L", "I"):
        wide = np.asarray(image, dtype=np.float64)
        scale = 65535.0 if wide.max() > 255 else 255.0
        grey = np.clip(wide / scale * 255.0 + 0.5, 0, 255).astype(np.uint8)
        return np.repeat(grey[:, :, None], 3, axis=2)
    if image.mode == "P":
        image = image.convert("RGBA")
    if image.mode in ("RGBA", "LA", "PA"):
        background = Image.new("RGBA", image.size, (255, 255, 255, 255))
        image = Image.alpha_composite(background, image.convert("RGBA"))
    return np.asarray(image.convert("RGB"), dtype=np.uint8)
