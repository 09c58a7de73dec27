"""Every image mode becomes RGB; every kind of broken file is a BadImageError with a short reason."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from features.images import BadImageError, load_rgb


@pytest.mark.parametrize(
    ("mode", "value", "expected"),
    [
        ("RGB", (10, 20, 30), (10, 20, 30)),
        ("L", 77, (77, 77, 77)),
        ("CMYK", (0, 255, 0, 0), (255, 0, 255)),
        ("RGBA", (200, 0, 0, 0), (255, 255, 255)),  # fully transparent over white
        ("RGBA", (200, 0, 0, 255), (200, 0, 0)),
        ("LA", (50, 255), (50, 50, 50)),
        ("I;16", 65535, (255, 255, 255)),
    ],
)
def test_modes_become_rgb(tmp_path: Path, mode: str, value: object, expected: tuple[int, int, int]) -> None:
    path = tmp_path / ("image.jpg" if mode == "CMYK" else "image.png")
    Image.new(mode, (6, 4), value).save(path)  # type: ignore[arg-type]
    rgb = load_rgb(path)
    assert rgb.shape == (4, 6, 3) and rgb.dtype == np.uint8
    np.testing.assert_allclose(rgb[1, 1], expected, atol=2)


def test_palette_image(tmp_path: Path) -> None:
    Image.new("RGB", (5, 5), (0, 128, 255)).convert("P", palette=Image.Palette.ADAPTIVE).save(tmp_path / "p.png")
    np.testing.assert_array_equal(load_rgb(tmp_path / "p.png")[0, 0], (0, 128, 255))


def zero_width_png() -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", 0, 4, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b"")


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (None, "missing"),
        (b"", "empty file"),
        (b"this is not an image", "not a readable image"),
        ("truncated", "truncated"),
        (zero_width_png(), "zero size|not a readable image"),
    ],
)
def test_bad_images_have_a_reason(tmp_path: Path, content: bytes | str | None, reason: str) -> None:
    path = tmp_path / "bad.png"
    if content == "truncated":
        Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(path)
        path.write_bytes(path.read_bytes()[:400])
    elif isinstance(content, bytes):
        path.write_bytes(content)
    with pytest.raises(BadImageError, match=reason) as raised:
        load_rgb(path)
    assert raised.value.path == path
