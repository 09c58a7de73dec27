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


def resnet_c4_shapes(
    norm_keys: tuple[str, ...], blocks: tuple[int, ...], width: int, stem: int
) -> dict[str, tuple[int, ...]]:
    """Every tensor of a checkpoint's R-C4 trunk in detectron2's names (the stem, res2-res4 in the backbone, res5 in
    the box head), listed from the architecture: ``blocks`` per stage, ``width`` channels in res2's bottleneck,
    ``stem`` channels out of the stem; each convolution's frozen norm holds ``norm_keys``."""
    shapes: dict[str, tuple[int, ...]] = {}

    def conv(name: str, out_channels: int, in_channels: int, kernel: int) -> None:
        shapes[f"{name}.weight"] = (out_channels, in_channels, kernel, kernel)
        for key in norm_keys:
            shapes[f"{name}.norm.{key}"] = () if key == "num_batches_tracked" else (out_channels,)

    conv("backbone.stem.conv1", stem, 3, 7)
    in_channels = stem
    for stage, count in enumerate(blocks):
        stage_width = width * 2**stage
        prefix = ("backbone" if stage < 3 else "roi_heads") + f".res{stage + 2}"
        for block in range(count):
            if block == 0:
                conv(f"{prefix}.0.shortcut", 4 * stage_width, in_channels, 1)
            conv(f"{prefix}.{block}.conv1", stage_width, in_channels if block == 0 else 4 * stage_width, 1)
            conv(f"{prefix}.{block}.conv2", stage_width, stage_width, 3)
            conv(f"{prefix}.{block}.conv3", 4 * stage_width, stage_width, 1)
        in_channels = 4 * stage_width
    return shapes
