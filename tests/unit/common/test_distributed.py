"""Data-parallel training on 2-3 Gloo processes gives what one process gives on the same global batch.

Each case runs a function on real ranks (``torch.distributed`` with the Gloo backend, one spawned process per rank,
as torchrun would start them) and in this process, and compares:
- the building blocks: contiguous shares, a differentiable gather with uneven sizes;
- one retrieval step (SAN, SCAN with its word and region sets, MULE with extras and a gradient-reversed
  discriminator acting after the gather) with plain SGD, so that a gradient off by a factor (the usual data-parallel
  mistake) moves the weights differently; the loss on the gathered embeddings must equal the single-process loss;
- the retrieval trainer (warm-up, harder negatives over three language types, caption-caption steps, validation
  gathered across ranks, the best epoch kept) over four epochs;
- one MMT gradient (shares of a batch summed over the batch's target tokens) and a short MMT fit with validation.
Dropout differs across ranks by design (each rank draws its own masks), so the models here have none.
"""

from __future__ import annotations

import contextlib
import os
import socket
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp

from common import distributed
from common.runtime import Runtime
from mmt.model import MMTConfig, RegionalMMT
from mmt.train import TrainConfig as MMTTrainConfig
from mmt.train import collate, mmt_loss, share_loss
from mmt.train import fit as fit_mmt
from retrieval.data import HostBatches, encode_captions
from retrieval.losses import RankingLoss
from retrieval.train import TrainConfig, _ranking_step, fit, pretrain
from retrieval.vocab import Vocabulary
from retrieval.zoo.registry import build_model, make_config
from tests.unit.mmt import test_pinned_fit as mmt_toy
from tests.unit.retrieval import test_pinned_fit as retrieval_toy

CPU = torch.device("cpu")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _rank_main(
    rank: int,
    world: int,
    port: int,
    function: Callable[..., Any],
    args: tuple[Any, ...],
    queue: Any,
    joint: bool,
    device: str,
) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank)
    )
    torch.set_num_threads(1)
    try:
        distributed.start(device)
        with distributed.together() if joint else contextlib.nullcontext():
            queue.put((rank, "ok", function(*args)))
    except BaseException:
        queue.put((rank, "error", traceback.format_exc()))
    finally:
        distributed.stop()


def on_ranks(
    world: int, function: Callable[..., Any], *args: Any, joint: bool = True, device: str = "cpu"
) -> list[Any]:
    """``function(*args)`` on ``world`` ranks (Gloo; NCCL with ``device`` cuda), as torchrun starts them, working
    together on it (as in a call rank 0 sends) or, with ``joint`` False, each alone; its results in rank order."""
    context = mp.get_context("spawn")
    queue = context.SimpleQueue()
    port = _free_port()
    processes = [
        context.Process(target=_rank_main, args=(rank, world, port, function, args, queue, joint, device))
        for rank in range(world)
    ]
    for process in processes:
        process.start()
    results: dict[int, Any] = {}
    for _ in range(world):
        rank, status, value = queue.get()
        assert status == "ok", f"rank {rank} failed:\n{value}"
        results[rank] = value
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0
    return [results[rank] for rank in range(world)]


def flat_weights(model: torch.nn.Module) -> np.ndarray:
    return torch.cat([tensor.detach().double().flatten() for tensor in model.state_dict().values()]).numpy()


# --- building blocks ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("world", "count", "expected"),
    [
        (1, 5, [(0, 5)]),
        (2, 8, [(0, 4), (4, 8)]),
        (3, 10, [(0, 4), (4, 7), (7, 10)]),
        (3, 2, [(0, 1), (1, 2), (2, 2)]),
    ],
)
def test_shares_are_contiguous_and_cover_the_items_in_rank_order(
    monkeypatch: pytest.MonkeyPatch, world: int, count: int, expected: list[tuple[int, int]]
) -> None:
    monkeypatch.setattr(distributed, "world_size", lambda: world)
    found = []
    for rank in range(world):
        monkeypatch.setattr(distributed, "rank", lambda rank=rank: rank)
        part = distributed.share(count)
        found.append((part.start, part.stop))
    assert found == expected


def test_one_process_needs_no_process_group() -> None:
    tensor = torch.arange(6.0, requires_grad=True)
    assert distributed.gather(tensor) is tensor
    assert distributed.share(7) == slice(0, 7)
    assert distributed.is_writer() and distributed.gather_objects(["a"]) == ["a"]


def _gather_case() -> dict[str, Any]:
    """Rank r holds r + 1 rows of sets of r + 2 vectors; the loss weighs each row by its global position."""
    here = distributed.rank()
    local = torch.full((here + 1, here + 2, 2), float(here + 1), requires_grad=True)
    mask = torch.ones(here + 1, here + 2, dtype=torch.bool)
    gathered, gathered_mask = distributed.gather(local), distributed.gather(mask)
    weights = torch.arange(1.0, gathered.shape[0] + 1).view(-1, 1, 1)
    (gathered * weights).sum().backward()
    assert local.grad is not None
    return {
        "shape": tuple(gathered.shape),
        "values": gathered.detach().numpy(),
        "mask": gathered_mask.numpy(),
        "grad": local.grad.numpy(),
    }


def test_gather_pads_uneven_sets_and_sums_the_gradient_of_each_share_over_the_ranks(
    three_ranks: list[dict[str, Any]],
) -> None:
    results = [result["gather"] for result in three_ranks]
    # 1 + 2 + 3 rows, sets padded to the longest (4 vectors); padding is zeros with mask False
    assert all(result["shape"] == (6, 4, 2) for result in results)
    values, mask = results[0]["values"], results[0]["mask"]
    assert values[:, :, 0].tolist() == [
        [1, 1, 0, 0],
        [2, 2, 2, 0],
        [2, 2, 2, 0],
        [3, 3, 3, 3],
        [3, 3, 3, 3],
        [3, 3, 3, 3],
    ]
    assert mask.sum(axis=1).tolist() == [2, 3, 3, 4, 4, 4]
    # the same loss on 3 ranks: each share's gradient is 3 x its global row weight (rows 1 | 2, 3 | 4, 5, 6)
    assert results[0]["grad"][:, 0, 0].tolist() == [3.0]
    assert results[1]["grad"][:, 0, 0].tolist() == [6.0, 9.0]
    assert results[2]["grad"][:, 0, 0].tolist() == [12.0, 15.0, 18.0]
    assert results[1]["grad"].shape == (2, 3, 2)  # the local shape, padding dropped


def _alone_case() -> dict[str, Any]:
    tensor = torch.arange(4.0)
    return {
        "share": distributed.share(10),
        "same": distributed.gather(tensor) is tensor,
        "writer": distributed.is_writer(),
        "joined": distributed.joined(),
    }


def test_outside_a_joint_call_each_rank_acts_as_one_process() -> None:
    """Rank 0 tests and reports alone while the others wait: a share or gather there must not wait for them."""
    alone = on_ranks(2, _alone_case, joint=False)
    assert [result["share"] for result in alone] == [slice(0, 10)] * 2
    assert all(result["same"] and result["joined"] for result in alone)
    assert [result["share"] for result in on_ranks(2, _alone_case)] == [slice(0, 5), slice(5, 10)]


def _nccl_case() -> dict[str, Any]:
    """The collectives on CUDA tensors over NCCL, each rank on its own GPU."""
    device = Runtime("cuda:0", "fp32").torch_device()  # rank 0's runtime, as the ranks receive it: their own GPU
    here = distributed.rank()
    local = torch.full((here + 1, 3), float(here + 1), device=device, requires_grad=True)
    gathered = distributed.gather(local)
    (gathered * torch.arange(1.0, gathered.shape[0] + 1, device=device).view(-1, 1)).sum().backward()
    param = torch.nn.Parameter(torch.zeros(2, device=device))
    param.grad = torch.full((2,), float(here + 1), device=device)
    distributed.reduce_gradients([param], mean=True)
    assert local.grad is not None and param.grad is not None
    return {
        "device": str(device),
        "rows": gathered.shape[0],
        "grad": local.grad[:, 0].tolist(),
        "mean": param.grad.tolist(),
        "sum": distributed.sum_of(1.0, device),
    }


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_the_collectives_run_over_nccl_on_two_gpus() -> None:
    first, second = on_ranks(2, _nccl_case, device="cuda")
    assert (first["device"], second["device"]) == ("cuda:0", "cuda:1")
    assert first["rows"] == second["rows"] == 3
    assert first["grad"] == [2.0] and second["grad"] == [4.0, 6.0]  # 2 ranks x global row weights 1 | 2, 3
    assert first["mean"] == second["mean"] == [1.5, 1.5]
    assert first["sum"] == second["sum"] == 2.0


# --- retrieval ---------------------------------------------------------------------------------------------

RETRIEVAL_MODELS = {
    "san": {"word_dim": 8, "hidden": 12},
    "scan": {"word_dim": 8, "hidden": 12},
    "mule": {"word_dim": 8, "mule_dim": 10, "hidden": 12, "image_hidden": 16, "embed_dim": 12, "dropout": 0.0},
}


def _toy_training() -> tuple[Any, dict[str, Any], Any, Vocabulary]:
    captions, regions = retrieval_toy.toy_set()
    vocab = Vocabulary.build(((c.lang, c.text) for c in captions), ["en", "de"], min_count=1)
    encoded = encode_captions(
        captions, vocab, {f"i{i}": i for i in range(retrieval_toy.IMAGES)}, max_len=12, source="toy"
    )
    human = ~encoded.synthetic
    validation = {
        lang: encoded.subset(np.flatnonzero(human & (encoded.langs == index)))
        for index, lang in enumerate(vocab.languages)
    }
    return encoded, validation, regions, vocab


def _retrieval_step(name: str) -> dict[str, Any]:
    """One ranking step on a 10-caption batch (uneven shares on 3 ranks) with SGD and no clipping."""
    train, _, regions, vocab = _toy_training()
    torch.manual_seed(0)
    model = build_model(
        name,
        make_config(name, RETRIEVAL_MODELS[name]),
        vocab_size=len(vocab),
        languages=2,
        region_dim=retrieval_toy.DIM,
    ).eval()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    indices = np.array([0, 5, 9, 13, 14, 20, 26, 31, 40, 47])
    loss = _ranking_step(
        model,
        HostBatches(train, regions, CPU),
        indices,
        optimizer,
        RankingLoss(model.default_loss),
        torch.tensor([0.25, 0.25, 0.5]),
        TrainConfig(batch_size=10, clip=0.0),
        CPU,
        contextlib.nullcontext,
        0.5,
        where="test",
    )
    return {"loss": float(loss), "weights": flat_weights(model)}


def _retrieval_steps() -> dict[str, dict[str, Any]]:
    return {name: _retrieval_step(name) for name in sorted(RETRIEVAL_MODELS)}


def test_a_retrieval_step_on_three_ranks_equals_one_process(three_ranks: list[dict[str, Any]]) -> None:
    single = _retrieval_steps()
    ranks = [result["steps"] for result in three_ranks]
    for name in sorted(RETRIEVAL_MODELS):
        assert np.abs(single[name]["weights"] - _retrieval_step_start(name)).max() > 1e-3  # the step moved them
        for result in ranks:
            assert result[name]["loss"] == pytest.approx(single[name]["loss"], rel=1e-5), name  # the whole batch's
            np.testing.assert_allclose(
                result[name]["weights"], single[name]["weights"], rtol=0, atol=1e-5, err_msg=name
            )


def _retrieval_step_start(name: str) -> np.ndarray:
    _, _, _, vocab = _toy_training()
    torch.manual_seed(0)
    model = build_model(
        name,
        make_config(name, RETRIEVAL_MODELS[name]),
        vocab_size=len(vocab),
        languages=2,
        region_dim=retrieval_toy.DIM,
    )
    return flat_weights(model)


def _retrieval_fit() -> dict[str, Any]:
    """The pinned retrieval fit of tests/unit/retrieval/test_pinned_fit.py (SAN, no dropout)."""
    train, validation, regions, vocab = _toy_training()
    torch.manual_seed(0)
    model = build_model(
        "san",
        make_config("san", {"word_dim": 8, "hidden": 12}),
        vocab_size=len(vocab),
        languages=2,
        region_dim=retrieval_toy.DIM,
    )
    config = TrainConfig(epochs=4, batch_size=8, lr=0.01, lr_decay_epoch=2, warmup_epochs=1, c2c_probability=0.3)
    result = fit(
        model,
        train,
        validation,
        regions,
        loss=RankingLoss("harder"),
        type_weights=torch.tensor([0.25, 0.25, 0.5]),
        config=config,
        seed=3,
        device=CPU,
    )
    history = [{key: entry[key] for key in ("loss", "c2c_loss", "val_rsum")} for entry in result.history]
    return {"history": history, "best_epoch": result.best_epoch, "weights": flat_weights(model)}


def test_the_retrieval_trainer_on_two_ranks_follows_the_single_process_run(two_ranks: list[dict[str, Any]]) -> None:
    single = _retrieval_fit()
    assert single["history"][-1]["val_rsum"] == pytest.approx(retrieval_toy.EXPECTED_BEST_RSUM, rel=1e-4)
    for result in (ranked["fit"] for ranked in two_ranks):
        assert result["best_epoch"] == single["best_epoch"]
        for found, expected in zip(result["history"], single["history"], strict=True):
            assert found["loss"] == pytest.approx(expected["loss"], rel=1e-4)
            assert found["c2c_loss"] == pytest.approx(expected["c2c_loss"], rel=1e-4)
            assert found["val_rsum"] == pytest.approx(expected["val_rsum"], rel=1e-4)
        np.testing.assert_allclose(result["weights"], single["weights"], rtol=0, atol=1e-4)


def _mule_pretraining() -> np.ndarray:
    """MULE's text-only pre-training (captions of one image across languages, extras in its loss), one epoch."""
    train, _, _, vocab = _toy_training()
    torch.manual_seed(0)
    settings = {**RETRIEVAL_MODELS["mule"], "pretrain_epochs": 1}
    model = build_model(
        "mule", make_config("mule", settings), vocab_size=len(vocab), languages=2, region_dim=retrieval_toy.DIM
    )
    pretrain(
        model,
        train,
        config=TrainConfig(batch_size=8),
        device=CPU,
        autocast=contextlib.nullcontext,
        rng=np.random.default_rng(1),
    )
    return flat_weights(model)


def test_mule_pretraining_on_two_ranks_follows_the_single_process_run(two_ranks: list[dict[str, Any]]) -> None:
    single = _mule_pretraining()
    for weights in (ranked["mule"] for ranked in two_ranks):
        np.testing.assert_allclose(weights, single, rtol=0, atol=5e-4)  # Adam: see the MMT fit below


# --- MMT ---------------------------------------------------------------------------------------------------

MMT_CONFIG = MMTConfig(emb_dim=12, hidden=16, dropout=0.0, layers=2)


def _mmt_gradient() -> dict[str, Any]:
    """The gradient of one batch of 7 pairs of different lengths (shares of 4 and 3 on two ranks)."""
    train, _, regions = mmt_toy.toy_data()
    torch.manual_seed(0)
    model = RegionalMMT(MMT_CONFIG, mmt_toy.SHAPE)
    indices = [0, 3, 4, 8, 15, 22, 35]
    loss = share_loss(model, train, indices, regions=regions, device=CPU)
    loss.backward()
    distributed.reduce_gradients(model.parameters(), mean=False)
    total = distributed.sum_of(float(loss.detach()), CPU)
    gradient = torch.cat([param.grad.flatten() for param in model.parameters() if param.grad is not None])
    return {"loss": total, "gradient": gradient.double().numpy()}


def test_the_shares_of_an_mmt_batch_sum_to_its_mean_loss_and_gradient(two_ranks: list[dict[str, Any]]) -> None:
    single = _mmt_gradient()
    train, _, regions = mmt_toy.toy_data()
    torch.manual_seed(0)
    model = RegionalMMT(MMT_CONFIG, mmt_toy.SHAPE)
    batch, tgt_in, tgt_out = collate(train, [0, 3, 4, 8, 15, 22, 35], regions=regions, shape=model.shape, device=CPU)
    assert single["loss"] == pytest.approx(float(mmt_loss(model, batch, tgt_in, tgt_out).detach()), rel=1e-6)
    for result in (ranked["mmt_gradient"] for ranked in two_ranks):
        assert result["loss"] == pytest.approx(single["loss"], rel=1e-5)
        np.testing.assert_allclose(result["gradient"], single["gradient"], rtol=1e-4, atol=1e-6)


def _mmt_fit(folder: str) -> dict[str, Any]:
    train, validation, regions = mmt_toy.toy_data()

    def score(model: RegionalMMT) -> float:
        batch, tgt_in, tgt_out = collate(
            validation, range(len(validation)), regions=regions, shape=model.shape, device=CPU
        )
        return -float(mmt_loss(model, batch, tgt_in, tgt_out))

    here = Path(folder) / f"rank-{distributed.rank()}"  # each rank's own folder: rank 1's must stay empty
    here.mkdir(parents=True)
    torch.manual_seed(0)
    model = RegionalMMT(MMT_CONFIG, mmt_toy.SHAPE)
    config = MMTTrainConfig(epochs=2, batch_size=6, lr=2e-2, clip=1.0, patience=10, eval_every=5, sort_chunk=2)
    result = fit_mmt(
        model,
        train,
        regions=regions,
        evaluate=score,
        config=config,
        seed=5,
        device=CPU,
        autocast=contextlib.nullcontext,
        checkpoint_path=here / "mmt",
    )
    files = sorted(path.name for path in here.iterdir())
    return {"history": result.history, "best_step": result.best_step, "weights": flat_weights(model), "files": files}


def test_an_mmt_fit_on_two_ranks_follows_the_single_process_run_and_only_rank_0_writes(
    tmp_path: Path, two_ranks: list[dict[str, Any]]
) -> None:
    single = _mmt_fit(str(tmp_path / "one"))
    ranks = [ranked["mmt_fit"] for ranked in two_ranks]
    assert ranks[0]["files"] == single["files"] == ["mmt.json", "mmt.safetensors"]
    assert ranks[1]["files"] == []
    for result in ranks:
        assert result["best_step"] == single["best_step"]
        for found, expected in zip(result["history"], single["history"], strict=True):
            assert found["step"] == expected["step"]
            assert found["loss"] == pytest.approx(expected["loss"], rel=1e-5)
            assert found["score"] == pytest.approx(expected["score"], rel=1e-5)
        # Adam divides by the root of tiny second moments where a gradient is near zero, so float rounding of the
        # summed shares shows in a few weights: 1e-4 after 12 steps of 2e-2, against a gradient off by a factor
        # (Adam cannot see that: the gradient test above does)
        np.testing.assert_allclose(result["weights"], single["weights"], rtol=0, atol=5e-4)


# --- the ranks: one start per world size (starting processes costs more than these cases) --------------------


def _three_rank_cases() -> dict[str, Any]:
    return {"gather": _gather_case(), "steps": _retrieval_steps()}


def _two_rank_cases(folder: str) -> dict[str, Any]:
    return {
        "fit": _retrieval_fit(),
        "mule": _mule_pretraining(),
        "mmt_gradient": _mmt_gradient(),
        "mmt_fit": _mmt_fit(folder),
    }


@pytest.fixture(scope="module")
def three_ranks() -> list[dict[str, Any]]:
    return on_ranks(3, _three_rank_cases)


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return on_ranks(2, _two_rank_cases, str(tmp_path_factory.mktemp("two-ranks")))
