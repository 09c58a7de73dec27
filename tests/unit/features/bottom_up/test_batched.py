"""The batched extraction path against the per-image loops it replaced, kept here as the reference.

On the CPU, where the convolutions still run image by image, the batched path must give the loops' boxes,
classes and features bit for bit; with batched convolutions (the accelerator path) the same regions, features
within float rounding.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.nn.utils.rnn import pad_sequence

from features.bottom_up import ops
from features.bottom_up.extractor import BUTDExtractor, preprocess_batch, preprocess_image
from features.bottom_up.model import BottomUpAttention, BUTDConfig, select_regions_batch
from features.regions import AdaptiveRegions, FixedRegions, GivenRegions, ImageRegions
from tests.unit.features.bottom_up.helpers import TINY, images, tiny_model

CPU = torch.device("cpu")


# --- the per-image loops, as they were ----------------------------------------------------------------------------


def loop_propose(
    model: BottomUpAttention, feature: torch.Tensor, image_size: tuple[int, int], scale: float
) -> torch.Tensor:
    c = model.config
    logits, deltas = model.rpn(feature)
    _, _, h, w = logits.shape
    fg = logits.float().view(1, 2, c.num_anchors, h, w).softmax(dim=1)[0, 1]
    scores = fg.permute(1, 2, 0).reshape(-1)
    deltas = deltas.float()[0].view(c.num_anchors, 4, h, w).permute(2, 3, 0, 1).reshape(-1, 4)
    anchors = ops.shifted_anchors(model.anchors, h, w, c.feat_stride)
    boxes = ops.clip_boxes(ops.decode_boxes(anchors, deltas), image_size[0], image_size[1])
    min_size = c.rpn_min_size * scale
    large = ((boxes[:, 2] - boxes[:, 0] + 1) >= min_size) & ((boxes[:, 3] - boxes[:, 1] + 1) >= min_size)
    boxes, scores = boxes[large], scores[large]
    order = torch.argsort(scores, descending=True, stable=True)[: c.rpn_pre_nms_top_n]
    boxes, scores = boxes[order], scores[order]
    keep = ops.greedy_nms(boxes, scores, c.rpn_nms_thresh, max_keep=c.rpn_post_nms_top_n)
    return boxes[keep]


def loop_select_regions(max_conf: torch.Tensor, selection: FixedRegions | AdaptiveRegions) -> torch.Tensor:
    if isinstance(selection, FixedRegions):
        low = high = selection.count
    else:
        low, high = selection.min_count, selection.max_count
    keep = torch.nonzero(max_conf.double() >= selection.conf_thresh).flatten()
    if low <= keep.numel() <= high:
        return keep
    ranked = torch.argsort(max_conf, descending=True, stable=True)
    return ranked[:low] if keep.numel() < low else ranked[:high]


def loop_extract(
    model: BottomUpAttention,
    selection: FixedRegions | AdaptiveRegions | GivenRegions,
    batch: list[np.ndarray],
    given: list[np.ndarray] | None = None,
) -> list[ImageRegions]:
    config: BUTDConfig = model.config
    with torch.inference_mode():
        rois, scales, pooled = [], [], []
        for index, image in enumerate(batch):
            blob, scale = preprocess_image(image, config, CPU)
            feature = model.backbone(blob)
            if given is None:
                image_rois = loop_propose(model, feature, (blob.shape[2], blob.shape[3]), scale)
            else:
                image_rois = torch.from_numpy((given[index].astype(np.float64) * scale).astype(np.float32))
            with_batch = torch.cat([image_rois.new_zeros((len(image_rois), 1)), image_rois], dim=1)
            pooled.append(ops.roi_pool(feature, with_batch, config.roi_pool_size, 1 / config.feat_stride))
            rois.append(image_rois)
            scales.append(scale)
        pool5 = model.head(torch.cat(pooled))
        cls_prob, attr_prob = model.predict(pool5)
        counts = [len(r) for r in rois]
        boxes = [r / s for r, s in zip(rois, scales, strict=True)]
        if isinstance(selection, GivenRegions):
            keeps = [torch.arange(count) for count in counts]
        else:
            padded_boxes = pad_sequence(boxes, batch_first=True)
            padded_scores = pad_sequence([p[:, 1:] for p in cls_prob.split(counts)], batch_first=True)
            max_conf = ops.class_nms_max_conf(
                padded_boxes, padded_scores, config.class_nms_thresh, torch.tensor(counts)
            )
            keeps = [loop_select_regions(max_conf[i, :count], selection) for i, count in enumerate(counts)]
        out = []
        attr_probs = attr_prob.split(counts) if attr_prob is not None else [None] * len(counts)
        for features, probs, attrs, keep, image_boxes in zip(
            pool5.split(counts), cls_prob.split(counts), attr_probs, keeps, boxes, strict=True
        ):
            conf, ids = probs[keep, 1:].max(dim=1)
            attr_conf, attr_ids = attrs[keep, 1:].max(dim=1)
            out.append(
                ImageRegions(
                    features[keep].float().numpy(),
                    image_boxes[keep].numpy(),
                    ids.numpy(),
                    conf.numpy(),
                    attr_ids.numpy(),
                    attr_conf.numpy(),
                )
            )
        return out


# --- the tests ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(4))
def test_batched_greedy_nms_keeps_what_greedy_nms_keeps_per_image(seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    count, batch = 200, 5
    corner = torch.rand(batch, count, 2, generator=generator) * 80
    size = torch.rand(batch, count, 2, generator=generator) * 40
    boxes = torch.cat([corner, corner + size], dim=2)
    scores = torch.rand(batch, count, generator=generator).round(decimals=2)  # ties, visited in index order
    valid = torch.rand(batch, count, generator=generator) > 0.2
    valid[3] = False  # an image without a box
    valid[4, 5:] = False  # one with five
    keep, counts = ops.batched_greedy_nms(boxes, scores, valid, 0.5, max_keep=30)
    for image in range(batch):
        rows = torch.nonzero(valid[image]).flatten()
        expected = rows[ops.greedy_nms(boxes[image, rows], scores[image, rows], 0.5, max_keep=30)]
        assert torch.equal(keep[image, : int(counts[image])], expected)


@pytest.mark.parametrize("seed", range(3))
def test_batched_proposals_are_the_per_image_ones(seed: int) -> None:
    model = tiny_model(seed)
    batch = images(3, seed=seed)
    with torch.inference_mode():
        blob, scale = preprocess_batch(batch, TINY, CPU)
        features = torch.cat([model.backbone(blob[i : i + 1]) for i in range(len(batch))])
        size = (blob.shape[2], blob.shape[3])
        rois, counts = model.propose_batch(features, size, scale, convs_per_image=True)
        for image, expected in enumerate(rois.split(counts)):
            alone = loop_propose(model, features[image : image + 1], size, scale)
            assert torch.equal(expected, alone)


def test_batched_preprocessing_is_the_per_image_one() -> None:
    batch = images(3, seed=4, size=(70, 150))
    blob, scale = preprocess_batch(batch, TINY, CPU)
    for image, row in zip(batch, blob, strict=True):
        alone, alone_scale = preprocess_image(image, TINY, CPU)
        assert alone_scale == scale and torch.equal(alone[0], row)


@pytest.mark.parametrize("seed", range(5))
def test_batched_region_selection_is_the_per_image_one(seed: int) -> None:
    rng = np.random.default_rng(seed)
    counts = torch.tensor([40, 7, 0, 25, 40, 3])
    max_conf = torch.from_numpy(rng.integers(0, 20, size=(len(counts), 40)) / 20).float()  # many ties
    for selection in (
        FixedRegions(count=10),
        AdaptiveRegions(min_count=5, max_count=12, conf_thresh=0.6),
        AdaptiveRegions(min_count=2, max_count=30, conf_thresh=0.9),
        AdaptiveRegions(min_count=10, max_count=100, conf_thresh=0.2),
    ):
        chosen, kept = select_regions_batch(max_conf, counts, selection)
        for image, count in enumerate(counts.tolist()):
            expected = loop_select_regions(max_conf[image, :count], selection)
            assert torch.equal(chosen[image, : int(kept[image])], expected), (selection, image)


@pytest.mark.parametrize(
    "selection",
    [FixedRegions(count=6), AdaptiveRegions(min_count=3, max_count=12, conf_thresh=0.12), GivenRegions(max_count=4)],
)
def test_the_batched_extractor_gives_the_regions_of_the_per_image_loop(
    selection: FixedRegions | AdaptiveRegions | GivenRegions,
) -> None:
    """Mixed sizes (two images share one), so the batch runs as three groups and comes back in image order."""
    model = tiny_model(2)
    batch = (
        images(1, seed=5) + images(1, seed=6, size=(80, 120)) + images(1, seed=7) + images(1, seed=8, size=(128, 90))
    )
    given = None
    if isinstance(selection, GivenRegions):
        rng = np.random.default_rng(0)
        given = []
        for count in (3, 1, 4, 2):
            corner = rng.uniform(0, 40, size=(count, 2))
            given.append(np.concatenate([corner, corner + rng.uniform(1, 40, size=(count, 2))], 1).astype(np.float32))
    new = BUTDExtractor(model, selection, CPU).extract(batch, given)
    old = loop_extract(model, selection, batch, given)
    for image, (got, expected) in enumerate(zip(new, old, strict=True)):
        np.testing.assert_array_equal(got.boxes, expected.boxes if given is None else given[image])
        np.testing.assert_array_equal(got.object_ids, expected.object_ids)
        np.testing.assert_array_equal(got.attr_ids, expected.attr_ids)
        np.testing.assert_array_equal(got.features, expected.features)
        np.testing.assert_array_equal(got.object_conf, expected.object_conf)


def test_batched_convolutions_give_the_same_regions_up_to_rounding() -> None:
    """The accelerator path (one backbone call per image size) on the CPU: the same regions, features within
    float rounding of the image-by-image convolutions."""
    model = tiny_model(3)
    batch = images(3, seed=9) + images(1, seed=10, size=(80, 120))
    selection = FixedRegions(count=6)
    batched = BUTDExtractor(model, selection, CPU, batch_convolutions=True).extract(batch)
    for got, expected in zip(batched, loop_extract(model, selection, batch), strict=True):
        np.testing.assert_array_equal(got.object_ids, expected.object_ids)
        np.testing.assert_allclose(got.boxes, expected.boxes, rtol=1e-5, atol=1e-4)
        np.testing.assert_allclose(got.features, expected.features, rtol=1e-4, atol=1e-5)


def test_tiny_images_with_fewer_rois_than_the_minimum_get_all_of_them_as_in_the_loop() -> None:
    rng = np.random.default_rng(1)
    tiny = [rng.integers(0, 256, size=size, dtype=np.uint8) for size in ((20, 20, 3), (30, 24, 3))]
    batch = [tiny[0], *images(2), tiny[1]]
    selection = AdaptiveRegions(min_count=10, max_count=100, conf_thresh=0.2)
    new = BUTDExtractor(tiny_model(0), selection, CPU).extract(batch)
    old = loop_extract(tiny_model(0), selection, batch)
    assert len(new[0].boxes) < 10  # the case under test: the RPN gives the tiny image fewer RoIs than the minimum
    for got, expected in zip(new, old, strict=True):
        np.testing.assert_array_equal(got.boxes, expected.boxes)
        np.testing.assert_array_equal(got.features, expected.features)
