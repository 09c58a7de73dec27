"""The resume state round-trips every generator and refuses what is not its own."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from common.errors import InputError
from common.train_state import ResumePoint, fingerprint, restore_rng_state, rng_state, state_file


def test_state_round_trip_resumes_the_same_draws(tmp_path: Path) -> None:
    point = ResumePoint(tmp_path / "run.state.safetensors", fingerprint({"lr": 0.1}, 0))
    generator = np.random.default_rng(7)
    torch.manual_seed(3)
    generator.random(5)
    model = torch.nn.Linear(3, 2)
    point.save({"epoch": 2, "model": model.state_dict(), "rng": rng_state(generator), "history": [{"loss": 1.5}]})
    expected_numpy, expected_torch = generator.random(4), torch.rand(4)

    other = np.random.default_rng(99)
    torch.manual_seed(99)
    state = point.load()
    assert state is not None
    restore_rng_state(state["rng"], other)
    np.testing.assert_array_equal(other.random(4), expected_numpy)
    assert torch.equal(torch.rand(4), expected_torch)
    assert state["epoch"] == 2 and state["history"] == [{"loss": 1.5}]
    assert torch.equal(state["model"]["weight"], model.weight.detach())


def test_state_of_another_run_is_not_resumed(tmp_path: Path) -> None:
    ResumePoint(tmp_path / "run.state.safetensors", fingerprint({"lr": 0.1})).save({"epoch": 1})
    assert ResumePoint(tmp_path / "run.state.safetensors", fingerprint({"lr": 0.2})).load() is None
    assert ResumePoint(tmp_path / "absent.state.safetensors", fingerprint({})).load() is None


def test_truncated_state_names_the_file(tmp_path: Path) -> None:
    point = ResumePoint(tmp_path / "run.state.safetensors", fingerprint(1))
    point.save({"weights": torch.zeros(1000)})
    point.path.write_bytes(point.path.read_bytes()[:100])
    with pytest.raises(
        InputError,
        match=r"resume state: .*run\.state\.safetensors: not a readable safetensors.*delete it",
    ):
        point.load()
    point.clear()
    assert not point.path.exists()


def test_a_state_of_the_earlier_pickle_format_is_not_read_and_is_cleared(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    point = ResumePoint(state_file(tmp_path, "seed-0"), fingerprint(1))
    legacy = tmp_path / "seed-0.pt"
    torch.save({"epoch": 3, "fingerprint": point.fingerprint}, legacy)
    with caplog.at_level("INFO"):
        assert point.load() is None
    assert "seed-0.pt: resume state of the earlier pickle format, not read" in caplog.text
    point.save({"epoch": 1})
    point.clear()
    assert list(tmp_path.iterdir()) == []
