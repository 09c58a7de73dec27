"""A tiny bottom-up-attention model with random weights, shared by the detector and checkpoint tests."""

from __future__ import annotations

import numpy as np
import torch

from features.bottom_up.model import BottomUpAttention, BUTDConfig

TINY = BUTDConfig(
    blocks=(1, 2, 1, 1),
    stem_channels=8,
    width=8,
    rpn_channels=16,
    num_classes=10,
    num_attributes=6,
    attr_embed_dim=4,
    attr_hidden=8,
    test_scale=96,
    max_size=160,
    rpn_pre_nms_top_n=300,
    rpn_post_nms_top_n=20,
)


def tiny_model(seed: int = 0, config: BUTDConfig = TINY) -> BottomUpAttention:
    """Random weights, frozen norms away from identity, class logits spread enough for NMS to matter."""
    torch.manual_seed(seed)
    model = BottomUpAttention(config).eval()
    with torch.no_grad():
        for name, buffer in model.named_buffers():
            if name.endswith("norm.scale"):
                buffer.uniform_(0.5, 1.5)
            elif name.endswith("norm.shift"):
                buffer.normal_(0.0, 0.1)
        model.cls_score.weight.normal_(0.0, 0.5)
    return model


def images(count: int, seed: int = 0, size: tuple[int, int] = (96, 128)) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, size=(*size, 3), dtype=np.uint8) for _ in range(count)]
