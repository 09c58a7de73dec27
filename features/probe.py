"""Linear probes: how much of a label a frozen feature carries (multinomial logistic regression)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F


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
