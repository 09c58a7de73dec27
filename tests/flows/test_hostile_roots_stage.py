"""The prepare stage, run as DVC runs it, refuses an image list line that leaves the image folder in one line and
exit status 2, and writes nothing (the readers' cases: tests/unit/corpora/test_hostile_roots.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from PIL import Image

from tests.unit.corpora.test_multi30k import write_layout
from tests.unit.mmtr.test_hostile_inputs import hostile_params, one_line_error, run_stage


def test_prepare_stage_ends_in_one_line_and_writes_nothing(
    tmp_path: Path, prefect_api_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    images, outside = tmp_path / "images", tmp_path / "outside"
    images.mkdir()
    outside.mkdir()
    Image.new("RGB", (4, 3)).save(images / "a1.png")
    Image.new("RGB", (9, 7)).save(outside / "evil.png")  # a real image: only the check stops the reader
    text = tmp_path / "text"
    write_layout(text, names={"train": ["a1.png", "../outside/evil.png"]}, task1_langs=("en",), task2_langs=("en",))
    edits = {
        "corpora.synthetic.source": str(text),
        "corpora.synthetic.images": str(images),
        "prepare.multi30k.splits": {"train": {"task1": "train", "task2": "train"}},
    }
    out = tmp_path / "prepared"
    code, err = run_stage("flows.prepare", hostile_params(tmp_path, edits), capsys, "--out", str(out))
    listing = text / "task1" / "image_splits" / "train.txt"
    assert code == 2 and not out.exists()
    expected = (
        f"{listing}:2: path '../outside/evil.png' climbs out of {images} through '..' "
        "(set prepare.images_outside_root: true to allow paths outside it)"
    )
    one_line_error(err, "python -m flows.prepare", re.escape(expected) + "$")
