"""Linear probes find what a feature carries, and only that."""

from __future__ import annotations

import numpy as np

from features.probe import linear_probe


def test_probe_reads_a_linearly_coded_label_and_not_noise() -> None:
    rng = np.random.default_rng(0)
    labels = [str(value) for value in rng.integers(0, 4, size=400)]
    codes = np.eye(4)[[int(label) for label in labels]]
    features = np.concatenate([codes @ rng.normal(size=(4, 16)), rng.normal(size=(400, 16))], axis=1)
    coded = linear_probe(features[:300], labels[:300], features[300:], labels[300:])
    assert coded.accuracy > 0.95 and coded.classes == 4 and coded.test_size == 100
    noise = rng.normal(size=(400, 32))
    blind = linear_probe(noise[:300], labels[:300], noise[300:], labels[300:])
    assert blind.accuracy < 0.45  # 4 classes: chance is about 0.25


def test_unseen_test_labels_count_as_errors() -> None:
    features = np.array([[0.0], [1.0], [0.0], [1.0]])
    result = linear_probe(features[:2], ["a", "b"], features[2:], ["a", "c"])
    assert result.accuracy == 0.5
