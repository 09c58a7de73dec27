"""The paired test of two retrieval runs: per-query hits averaged over seeds, resampled images weighting their
queries, p-values on hand-made runs (identical, better on every query), the ranks file's round trip."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from common.errors import InputError
from retrieval.evaluation import direction_metrics, folded_metrics, query_ranks
from retrieval.significance import (
    STATISTICS,
    QueryRanks,
    paired_test,
    ranks_path,
    read_ranks,
    recalls,
    stack_seeds,
    write_ranks,
)


def ranks(i2t: list[list[int]], t2i: list[list[int]], caption_image: list[int]) -> QueryRanks:
    """Ranks of hand-made queries: a row per seed; caption ``c<n>``, image ``i<n>``."""
    images = max(caption_image) + 1
    return QueryRanks(
        np.array([f"c{index}" for index in range(len(caption_image))]),
        np.array([f"i{index}" for index in range(images)]),
        np.array(caption_image),
        np.array(i2t),
        np.array(t2i),
    )


# image 0 has captions 0 and 1, image 1 has caption 2
UNEVEN = [0, 0, 1]


def test_hits_are_averaged_over_seeds_and_captions_weighted_by_their_image() -> None:
    # image 0 at ranks 0 and 3 of the two seeds: its hit at 1 is 0.5, at 5 and 10 it is 1; image 1 at ranks 7 and
    # 12: no hit at 1 or 5, 0.5 at 10
    run = ranks(i2t=[[0, 7], [3, 12]], t2i=[[0, 9, 0], [0, 9, 0]], caption_image=UNEVEN)
    expected = {
        "i2t_r1": 25.0,  # (0.5 + 0) / 2 images
        "i2t_r5": 50.0,  # (1 + 0) / 2
        "i2t_r10": 75.0,  # (1 + 0.5) / 2
        "t2i_r1": 100.0 * 2 / 3,  # captions 0 and 2 of the 3
        "t2i_r5": 100.0 * 2 / 3,
        "t2i_r10": 100.0,
    }
    values = dict(zip(STATISTICS, recalls(run), strict=True))
    assert values == pytest.approx(expected | {"rsum": sum(expected.values())})
    # a resample drawing image 1 twice holds caption 2 twice and no caption of image 0
    drawn = recalls(run, np.array([[0.0, 2.0], [2.0, 0.0]]))
    assert drawn[:, STATISTICS.index("t2i_r1")] == pytest.approx([100.0, 50.0])
    assert drawn[:, STATISTICS.index("i2t_r10")] == pytest.approx([50.0, 100.0])  # image 1 twice: 0.5 each


def test_identical_runs_differ_in_nothing_and_get_p_one() -> None:
    run = ranks(i2t=[[0, 4, 30]], t2i=[[0, 2, 11, 0, 6, 1]], caption_image=[0, 0, 1, 1, 2, 2])
    result = paired_test(run, run, samples=200)
    for name in STATISTICS:
        assert result[name]["delta"] == 0.0 and result[name]["p_value"] == 1.0 and result[name]["ci"] == 0.0
    assert (result["samples"], result["seed"], result["images"], result["captions"]) == (200, 12345, 3, 6)


def test_a_run_better_on_every_query_gets_the_smallest_p() -> None:
    """Every query found first against never in the top 10: every resample differs by the same 100 points per
    recall, the centred differences are all 0, so no resample is as extreme: p = 1 / (1000 + 1)."""
    worse = ranks(i2t=[[20] * 4], t2i=[[20] * 8], caption_image=[0, 0, 1, 1, 2, 2, 3, 3])
    better = ranks(i2t=[[0] * 4], t2i=[[0] * 8], caption_image=[0, 0, 1, 1, 2, 2, 3, 3])
    result = paired_test(worse, better)
    assert result["rsum"] == {"baseline": 0.0, "system": 600.0, "delta": 600.0, "p_value": 0.000999, "ci": 0.0}
    assert result["t2i_r1"]["p_value"] < 0.001
    assert paired_test(better, worse)["rsum"]["delta"] == -600.0  # the other way round: the same p
    assert paired_test(better, worse)["rsum"]["p_value"] == result["rsum"]["p_value"]


def test_one_query_of_many_is_no_significant_difference() -> None:
    base = ranks(i2t=[[20] * 50], t2i=[[20] * 50], caption_image=list(range(50)))
    one_better = ranks(i2t=[[0] + [20] * 49], t2i=[[20] * 50], caption_image=list(range(50)))
    result = paired_test(base, one_better)
    assert result["i2t_r1"]["delta"] == 2.0 and result["t2i_r1"]["delta"] == 0.0
    assert result["i2t_r1"]["p_value"] > 0.05 and result["t2i_r1"]["p_value"] == 1.0


def test_runs_of_different_queries_are_not_compared() -> None:
    run = ranks(i2t=[[0, 1]], t2i=[[0, 1, 2]], caption_image=UNEVEN)
    other = ranks(i2t=[[0, 1]], t2i=[[0, 1]], caption_image=[0, 1])
    with pytest.raises(ValueError, match=r"different queries \(3 and 2 captions"):
        paired_test(run, other)


def test_seeds_stack_into_rows_and_must_rank_the_same_queries() -> None:
    first = ranks(i2t=[[0, 1]], t2i=[[0, 1, 2]], caption_image=UNEVEN)
    second = ranks(i2t=[[5, 6]], t2i=[[3, 4, 5]], caption_image=UNEVEN)
    both = stack_seeds([first, second])
    assert both.seeds == 2 and both.i2t.tolist() == [[0, 1], [5, 6]]
    with pytest.raises(ValueError, match="different test queries"):
        stack_seeds([first, ranks(i2t=[[0, 1]], t2i=[[0, 1]], caption_image=[0, 1])])


def test_of_seed_names_each_image_by_its_captions_image_id() -> None:
    one = QueryRanks.of_seed(["a", "b", "c"], ["x", "y", "x"], np.array([0, 1, 0]), np.array([3, 4]), np.zeros(3))
    assert one.image_ids.tolist() == ["x", "y"] and one.i2t.shape == (1, 2) and one.t2i.shape == (1, 3)


def test_fold_ranks_give_the_fold_means() -> None:
    """Each query ranked within its fold: with folds of equal size, recall over all queries is the folds' mean."""
    generator = torch.Generator().manual_seed(0)
    caption_image = torch.arange(4).repeat_interleave(2)
    sims = torch.rand(4, 8, generator=generator)
    i2t, t2i = query_ranks(sims, caption_image, fold_images=2)
    folded = folded_metrics(sims, caption_image, 2)
    for direction, values in (("i2t", i2t), ("t2i", t2i)):
        recalls_of = direction_metrics(values)
        assert [recalls_of[f"r{k}"] for k in (1, 5, 10)] == pytest.approx(
            [folded[direction][f"r{k}"] for k in (1, 5, 10)]
        )
    assert int(t2i.max()) <= 1 and int(i2t.max()) <= 2  # within a fold: 2 images, 4 captions


def test_the_ranks_file_round_trips(tmp_path: Path) -> None:
    tests = {
        "en": ranks(i2t=[[0, 1], [2, 3]], t2i=[[0, 1, 2], [3, 4, 5]], caption_image=UNEVEN),
        "translate_search.de": ranks(i2t=[[9, 9]], t2i=[[1, 1, 1]], caption_image=UNEVEN),
    }
    path = ranks_path(tmp_path / "san-mmt_f-all.json")
    assert path.name == "san-mmt_f-all.ranks.npz"
    write_ranks(path, tests)
    back = read_ranks(path)
    assert list(back) == ["en", "translate_search.de"]
    for key, written in tests.items():
        for name in ("caption_ids", "image_ids", "caption_image", "i2t", "t2i"):
            assert np.array_equal(getattr(back[key], name), getattr(written, name)), (key, name)
    assert [entry.name for entry in tmp_path.iterdir()] == [path.name]  # no temporary left beside it


def test_a_broken_ranks_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "run.ranks.npz"
    path.write_text("not a zip")
    with pytest.raises(InputError, match=r"run\.ranks\.npz: not a ranks file"):
        read_ranks(path)
    np.savez(path, **{"en/i2t": np.zeros((1, 2))})
    with pytest.raises(InputError, match=r"test set 'en' has no caption_ids, image_ids, caption_image, t2i"):
        read_ranks(path)
