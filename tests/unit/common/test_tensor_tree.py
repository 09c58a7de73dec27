"""Nested training states round-trip through one safetensors file, types intact, and nothing pickled is ever read."""

from __future__ import annotations

import copy
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from common.errors import InputError
from common.tensor_tree import load_tree, save_tree


def adam_after_one_step() -> tuple[torch.nn.Linear, torch.optim.Adam]:
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1, betas=(0.8, 0.9))
    model(torch.ones(4, 3)).sum().backward()
    optimizer.step()
    return model, optimizer


def test_an_optimiser_state_comes_back_with_its_integer_keys_and_tuples(tmp_path: Path) -> None:
    model, optimizer = adam_after_one_step()
    path = tmp_path / "state.safetensors"
    save_tree(path, {"optimizer": optimizer.state_dict()})
    loaded = load_tree(path)["optimizer"]
    assert sorted(loaded["state"]) == [0, 1]  # integer keys, as Adam indexes its parameters
    assert loaded["param_groups"][0]["betas"] == (0.8, 0.9)
    assert loaded["state"][0]["step"].shape == torch.Size([])  # a 0-d tensor stays 0-d

    twin = copy.deepcopy(model)
    restored = torch.optim.Adam(twin.parameters(), lr=0.1, betas=(0.8, 0.9))
    restored.load_state_dict(loaded)
    for network, step in ((model, optimizer), (twin, restored)):  # the next step, from the original and the copy
        step.zero_grad()
        network(torch.ones(4, 3)).sum().backward()
        step.step()
    for got, expected in zip(twin.parameters(), model.parameters(), strict=True):
        assert torch.equal(got, expected)


def test_plain_values_and_generator_states_round_trip_and_the_bytes_repeat(tmp_path: Path) -> None:
    generator = np.random.default_rng(11)
    tree = {
        "numpy": generator.bit_generator.state,  # 128-bit integers
        "torch": torch.get_rng_state(),
        "history": [{"loss": 1.5, "best": None}, {"loss": float("inf"), "best": True}],
        "$tensor": "a key that looks like a tag",
        "empty": {},
        7: "an integer key at the top",
    }
    first, second = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    save_tree(first, tree)
    save_tree(second, load_tree(first))
    assert first.read_bytes() == second.read_bytes()
    loaded = load_tree(first)
    assert loaded["numpy"] == generator.bit_generator.state
    assert torch.equal(loaded["torch"], torch.get_rng_state())
    assert loaded["history"] == tree["history"] and loaded["$tensor"] == tree["$tensor"]
    assert loaded["empty"] == {} and loaded[7] == "an integer key at the top"
    assert list(loaded) == list(tree) and list(loaded["numpy"]) == list(tree["numpy"])  # order kept: columns


def test_tied_tensors_are_stored_as_copies(tmp_path: Path) -> None:
    shared = torch.arange(6.0)
    save_tree(tmp_path / "tied.safetensors", {"a": shared, "b": shared, "view": shared[2:4]})
    loaded = load_tree(tmp_path / "tied.safetensors")
    assert torch.equal(loaded["a"], shared) and torch.equal(loaded["view"], torch.tensor([2.0, 3.0]))


def test_a_value_that_cannot_be_stored_is_named_by_its_place(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=r"state\['history'\]\[1\]: a value of type object cannot be stored"):
        save_tree(tmp_path / "x.safetensors", {"history": [1, object()]})
    assert list(tmp_path.iterdir()) == []  # nothing half-written


class Planted:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (print, ("pickled code ran",))


def test_a_pickle_under_the_name_of_a_state_is_refused_without_running_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "seed-0.state.safetensors"
    path.write_bytes(pickle.dumps({"epoch": Planted()}))
    with pytest.raises(InputError, match=r"seed-0\.state\.safetensors: not a readable safetensors file"):
        load_tree(path)
    assert "pickled code ran" not in capsys.readouterr().out


def test_a_safetensors_file_without_a_tree_is_not_a_state(tmp_path: Path) -> None:
    path = tmp_path / "weights.safetensors"
    save_file({"weight": torch.zeros(2)}, str(path))
    with pytest.raises(InputError, match=r"weights\.safetensors: a safetensors file without a 'tree' entry"):
        load_tree(path)


def test_loaded_tensors_do_not_follow_the_file_when_it_is_rewritten_in_place(tmp_path: Path) -> None:
    path = tmp_path / "gallery.safetensors"
    save_tree(path, {"vectors": torch.ones(3, 4)})
    loaded = load_tree(path)
    path.write_bytes(b"\0" * path.stat().st_size)  # a memory-mapped tensor would now read zeros
    assert torch.equal(loaded["vectors"], torch.ones(3, 4))
