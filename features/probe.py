"""Linear probes: how much of a label a frozen feature carries (multinomial logistic regression)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
import torch.nn.functional as F

from features.store import FeatureStore

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProbeResult:
    accuracy: float  # on the held-out set, in [0, 1]
    chance: float  # accuracy of always predicting the most frequent training label
    classes: int
    train_size: int
    test_size: int


def linear_probe(
    train_features: np.ndarray,
    train_labels: Sequence[str],
    test_features: np.ndarray,
    test_labels: Sequence[str],
    *,
    epochs: int = 300,
    weight_decay: float = 1e-4,
    seed: int = 0,
) -> ProbeResult:
    """Fit softmax regression on standardised ``train_features`` (n, D) with full-batch L-BFGS; test on the rest.

    Test labels never seen in training count as errors.
    """
    classes = sorted(set(train_labels))
    index = {label: position for position, label in enumerate(classes)}
    mean, std = train_features.mean(0), train_features.std(0) + 1e-6
    x_train = torch.from_numpy((train_features - mean) / std).float()
    x_test = torch.from_numpy((test_features - mean) / std).float()
    y_train = torch.tensor([index[label] for label in train_labels])
    torch.manual_seed(seed)
    linear = torch.nn.Linear(x_train.shape[1], len(classes))
    optimizer = torch.optim.LBFGS(linear.parameters(), lr=1.0, max_iter=epochs, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = F.cross_entropy(linear(x_train), y_train) + weight_decay * linear.weight.square().sum()
        loss.backward()
        return loss

    optimizer.step(closure)
    with torch.no_grad():
        predicted = [classes[i] for i in linear(x_test).argmax(-1).tolist()]
    correct = sum(p == t for p, t in zip(predicted, test_labels, strict=True))
    majority = max(classes, key=list(train_labels).count)
    return ProbeResult(
        accuracy=correct / max(len(test_labels), 1),
        chance=sum(label == majority for label in test_labels) / max(len(test_labels), 1),
        classes=len(classes),
        train_size=len(train_labels),
        test_size=len(test_labels),
    )


def probe_store(store: FeatureStore, images: pa.Table, boxes_path: Path) -> dict[str, dict[str, float]]:
    """Linear probes, train split -> test split, for every label column of the boxes table (built-in data).

    Region i of an image is box i of the boxes table (the `given` region mode).
    """
    split_of = dict(zip(images.column("image_id").to_pylist(), images.column("split").to_pylist(), strict=True))
    results: dict[str, dict[str, float]] = {}
    for column, values in label_columns(boxes_path).items():
        train = region_rows(store, split_of, values, "train")
        test = region_rows(store, split_of, values, "test")
        result = linear_probe(train[0], train[1], test[0], test[1])
        results[column] = {
            "accuracy": round(100 * result.accuracy, 2),
            "chance": round(100 * result.chance, 2),
            "classes": result.classes,
            "test_regions": result.test_size,
        }
        logger.info("Probe %-7s accuracy %.1f%% (chance %.1f%%)", column, 100 * result.accuracy, 100 * result.chance)
    return results


def label_columns(boxes_path: Path) -> dict[str, dict[str, list[str]]]:
    """Every string column of the boxes table (e.g. shape, colour, size), grouped by image in box order."""
    table = pq.read_table(boxes_path)
    image_ids = table.column("image_id").to_pylist()
    columns: dict[str, dict[str, list[str]]] = {}
    for name in table.column_names:
        if name == "image_id" or table.schema.field(name).type != pa.string():
            continue
        grouped: dict[str, list[str]] = {}
        for image_id, value in zip(image_ids, table.column(name).to_pylist(), strict=True):
            grouped.setdefault(image_id, []).append(value)
        columns[name] = grouped
    return columns


def region_rows(
    store: FeatureStore, split_of: dict[str, str], values: dict[str, list[str]], split: str
) -> tuple[np.ndarray, list[str]]:
    """Features of the given-box regions of one split, with the label of each box (region i = box i)."""
    ids = [image_id for image_id in store.image_ids if split_of.get(image_id) == split and image_id in values]
    features, mask, _ = store.batch(store.rows(ids))
    rows, labels = [], []
    for position, image_id in enumerate(ids):
        count = int(mask[position].sum())
        rows.append(features[position, :count].astype(np.float32))
        labels += values[image_id][:count]
    return np.concatenate(rows), labels
