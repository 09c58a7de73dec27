"""The built-in compact encoder: glimpse geometry, deterministic training, save/load, extraction."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import features.compact
from features.compact import (
    CompactConfig,
    CompactExtractor,
    CompactTraining,
    glimpses,
    labelled_glimpses,
    load_encoder,
    save_encoder,
    train_encoder,
)

TINY = CompactConfig(glimpse=0.5, input_size=16, widths=(4, 8), dim=12)


def picture(squares: list[tuple[int, int, int, tuple[int, int, int]]], size: int = 64) -> np.ndarray:
    """A grey image with filled squares (x, y, side, colour)."""
    image = np.full((size, size, 3), 128, dtype=np.uint8)
    for x, y, side, colour in squares:
        image[y : y + side, x : x + side] = colour
    return image


def test_glimpse_is_centred_on_the_box_and_keeps_absolute_size() -> None:
    image = picture([(4, 4, 8, (255, 0, 0)), (36, 36, 24, (0, 0, 255))])
    boxes = np.array([[4, 4, 12, 12], [36, 36, 60, 60]], dtype=np.float32)
    cut = glimpses(image, boxes, CompactConfig(glimpse=0.5, input_size=32))
    assert cut.shape == (2, 3, 32, 32)
    assert torch.allclose(cut[0, :, 16, 16], torch.tensor([1.0, 0.0, 0.0]), atol=0.02)
    assert torch.allclose(cut[1, :, 16, 16], torch.tensor([0.0, 0.0, 1.0]), atol=0.02)
    # Same glimpse side for both: the big square covers ~9x the area of the small one.
    small_area = (cut[0, 0] > 0.9).float().mean()
    big_area = (cut[1, 2] > 0.9).float().mean()
    assert 6 < big_area / small_area < 12


def test_outside_the_image_is_neutral_grey() -> None:
    image = picture([])
    cut = glimpses(image, np.array([[0, 0, 2, 2]], dtype=np.float32), CompactConfig(glimpse=1.0, input_size=8))
    assert torch.allclose(cut[0, :, 0, 0], torch.full((3,), 0.5), atol=1e-6)


def toy_material() -> tuple[list[tuple[np.ndarray, np.ndarray, list[str], list[list[str]]]], list[str], list[str]]:
    rng = np.random.default_rng(0)
    colours = {"red": (220, 20, 20), "blue": (20, 20, 220)}
    examples = []
    for _ in range(24):
        name = ["red", "blue"][int(rng.integers(2))]
        x, y = (int(v) for v in rng.integers(8, 40, size=2))
        examples.append(
            (picture([(x, y, 16, colours[name])]), np.array([[x, y, x + 16, y + 16]], np.float32), ["square"], [[name]])
        )
    return examples, ["square"], ["blue", "red"]


def test_training_is_deterministic_and_learns_colour() -> None:
    examples, objects, attributes = toy_material()
    data = labelled_glimpses(examples, TINY, objects=objects, attributes=attributes)
    assert data.glimpses.shape == (24, 3, 16, 16) and data.attributes.shape == (24, 2)
    training = CompactTraining(epochs=15, batch_size=8, lr=1e-2)
    first = train_encoder(data, TINY, training, objects=objects, attributes=attributes, seed=3)
    second = train_encoder(data, TINY, training, objects=objects, attributes=attributes, seed=3)
    for name, tensor in first.state_dict().items():
        assert torch.equal(tensor, second.state_dict()[name]), name
    with torch.no_grad():
        predicted = first(data.glimpses)[2].argmax(-1)
    assert (predicted == data.attributes.argmax(-1)).float().mean() >= 0.9


def test_save_load_round_trip_and_extract(tmp_path: Path) -> None:
    examples, objects, attributes = toy_material()
    data = labelled_glimpses(examples, TINY, objects=objects, attributes=attributes)
    model = train_encoder(data, TINY, CompactTraining(epochs=1, batch_size=8), objects=objects, attributes=attributes)
    save_encoder(model, str(tmp_path / "encoder.pt"))
    loaded = load_encoder(str(tmp_path / "encoder.pt"))
    assert loaded.config == TINY and loaded.attributes == attributes
    extractor = CompactExtractor(loaded, max_regions=3, device=torch.device("cpu"))
    image, boxes = examples[0][0], np.array([[1, 1, 9, 9], [20, 20, 40, 40]], np.float32)
    (regions,) = extractor.extract([image], [boxes])
    assert regions.features.shape == (2, 12) and regions.features.dtype == np.float32
    np.testing.assert_array_equal(regions.boxes, boxes)
    with torch.no_grad():
        expected = model(glimpses(image, boxes, TINY))[0].numpy()
    np.testing.assert_allclose(regions.features, expected, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="more than max_regions=3"):
        extractor.extract([image], [np.tile(boxes, (2, 1))])


def test_a_non_finite_loss_stops_the_encoder_training(monkeypatch: pytest.MonkeyPatch) -> None:
    examples, objects, attributes = toy_material()
    data = labelled_glimpses(examples, TINY, objects=objects, attributes=attributes)
    monkeypatch.setattr(features.compact.F, "cross_entropy", lambda *args, **kw: torch.tensor(float("nan")))
    with pytest.raises(FloatingPointError, match=r"^compact encoder training diverged at epoch 1: the loss is nan"):
        train_encoder(
            data, TINY, CompactTraining(epochs=2, batch_size=8, lr=1e-2), objects=objects, attributes=attributes, seed=3
        )
