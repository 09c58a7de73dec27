"""bench/cost_curve.py: the exponent fit against hand-computed values, Multi30K's proportions, the tree it builds
from the real text, and a tiny run of every stage whose table comes from the JSON alone."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import numpy as np
import pytest

from bench import cost_curve
from mmtr.doc_sections import markers


def test_growth_exponent_is_the_log_log_slope() -> None:
    assert cost_curve.growth_exponent([1, 2, 4], [1, 4, 16]) == pytest.approx(2.0)  # time ~ n^2
    assert cost_curve.growth_exponent([1000, 4000, 16000], [3.0, 3.0, 3.0]) == pytest.approx(0.0, abs=1e-12)
    # not a straight line: x = 0, L, 2L and y = 0, L, 3L (L = ln 2); centred, sum(x y) / sum(x x) = 3L^2 / 2L^2
    assert cost_curve.growth_exponent([1, 2, 4], [1, 2, 8]) == pytest.approx(1.5)
    a, b = cost_curve.power_law([10, 100], [5.0, 50.0])
    assert (a, b) == (pytest.approx(0.5), pytest.approx(1.0))
    with pytest.raises(ValueError, match="two sizes or more, got 1"):
        cost_curve.growth_exponent([1], [1])


def test_split_sizes_follow_multi30k_and_add_up() -> None:
    assert cost_curve.split_sizes(31014) == {"train": 29000, "val": 1014, "test": 1000}
    # 1000 x 29000 / 31014 = 935.06, x 1014 / 31014 = 32.69, x 1000 / 31014 = 32.24: the remainder goes to val
    assert cost_curve.split_sizes(1000) == {"train": 935, "val": 33, "test": 32}
    assert cost_curve.split_sizes(60) == {"train": 56, "val": 2, "test": 2}
    assert cost_curve.split_sizes(7) == {"train": 5, "val": 1, "test": 1}  # 6.55 / 0.23 / 0.23: one each
    for images in (3, 999, 4000, 16000):
        assert sum(cost_curve.split_sizes(images).values()) == images
    with pytest.raises(ValueError, match="2 images: at least 3 are needed"):
        cost_curve.split_sizes(2)


def test_the_tree_holds_the_real_text_of_the_first_images(shared_data: Path, tmp_path: Path) -> None:
    sizes = cost_curve.build_tree(shared_data, tmp_path, 60)
    real = shared_data / "multi30k"
    names = (real / "task1" / "image_splits" / "test_2016_flickr.txt").read_text(encoding="utf-8").splitlines()[:2]
    tree = tmp_path / "multi30k"
    assert (tree / "task2" / "image_splits" / "test_2016_images.txt").read_text(encoding="utf-8").splitlines() == names
    with gzip.open(real / "task2" / "raw" / "train.3.de.gz", "rt", encoding="utf-8") as reader:
        first = [next(reader) for _ in range(sizes["train"])]
    with gzip.open(tree / "task2" / "raw" / "train.3.de.gz", "rt", encoding="utf-8") as reader:
        assert reader.readlines() == first
    features = np.load(tmp_path / "precomp" / "test_ims.npy", mmap_mode="r")
    assert features.shape == (2, 36, 2048) and features.dtype == np.float16
    ids = (tmp_path / "precomp" / "test_ids.txt").read_text(encoding="utf-8").splitlines()
    assert ids == [Path(name).stem for name in names]
    assert all((tmp_path / "flickr30k-images" / name).stat().st_size > 0 for name in names)


@pytest.mark.slow
def test_a_small_run_measures_every_stage_and_writes_its_table(shared_data: Path, tmp_path: Path) -> None:
    out, doc = tmp_path / "cost.json", tmp_path / "scaling.md"
    argv = ["--sizes", "30", "60", "--shared", str(shared_data), "--dir", str(tmp_path), "--out", str(out)]
    cost_curve.main([*argv, "--mmt-steps", "2", "--retrieval-steps", "2", "--synthesis-captions", "10"])
    record = json.loads(out.read_text(encoding="utf-8"))
    assert [run["images"] for run in record["runs"]] == [30, 60]
    assert len(record["load_average_start"]) == 3 and len(record["load_average_end"]) == 3
    for run in record["runs"]:
        assert list(run["stages"]) == list(cost_curve.STAGES)
        assert all(cost["seconds"] > 0 and cost["peak_rss_mib"] > 100 for cost in run["stages"].values())
        assert run["outputs"]["synthesized_captions"] == 10 * 2  # 10 captions, 2 hops, the mt system
    for stage, fit in record["analysis"]["stages"].items():
        seconds = [run["stages"][stage]["seconds"] for run in record["runs"]]
        assert fit["seconds_exponent"] == pytest.approx(math.log(seconds[1] / seconds[0]) / math.log(2))
    assert not list(tmp_path.glob("cost-curve-*")), "every scratch tree is deleted"
    start, end = markers(cost_curve.SECTION)
    doc.write_text(f"before\n{start}\nold\n{end}\nafter\n", encoding="utf-8")
    cost_curve.main(["--markdown", str(out), "--into", str(doc)])
    text = doc.read_text(encoding="utf-8")
    assert "old" not in text and text.startswith("before\n") and text.endswith("after\n")
    # a row may carry "(super-linear)": at 30 and 60 images the exponents are mostly the machine's noise
    assert "\n| train_retrieval@san-mt_f-all " in text and "| 30 images | 60 images |" in text
