"""Data-parallel training across the processes ``torchrun`` starts: one process per rank, one device each.

Every rank holds the whole model; a global batch (the size params.yaml gives, the same as in one process) is cut
into contiguous shares, one per rank (:func:`share`); each rank encodes its share; and the result is the arithmetic
of one process on the whole batch, up to float rounding:

- A loss that is a sum or mean over examples (MMT cross-entropy) is computed on each share with the global
  normaliser, and the gradients are summed across ranks (:func:`reduce_gradients`).
- A loss that compares every item with every other (the retrieval ranking loss: hardest negatives and batch-wide
  masks) is computed on every rank from the embeddings of the whole batch, gathered with :func:`gather` (as
  large-batch contrastive trainers do); its backward sums each share's gradient from every rank, so the
  gradients are averaged.

The gradients are reduced explicitly after ``backward`` rather than by ``DistributedDataParallel``'s hooks:
retrieval models are called through several methods per step (``encode_images``, ``encode_texts``,
``similarity``, extra losses whose parameters act after the gather), and caption-caption and pre-training steps
leave the image encoder unused; DDP's reducer assumes one ``forward`` whose graph reaches every parameter it
waits for. One flattened all-reduce per step is the same communication.

Without a process group (one process) every function here is the identity or a no-op, so library code calls them
unconditionally. The backend is NCCL on CUDA and Gloo on the CPU.

Only rank 0 writes (:func:`is_writer`). The other ranks run the same library calls as rank 0, in the same order:
rank 0 broadcasts each call (:func:`run_on_every_rank`) and the others run what they receive
(:func:`serve_rank_zero`). Between such calls rank 0 works alone (testing a model, writing metrics), and there the
functions here act as in one process.
"""

from __future__ import annotations

import contextlib
import datetime
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch import Tensor, nn

T = TypeVar("T")

# torchrun sets these in each process it starts
TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK")


# Rank 0 works alone between training calls (testing, reports) while the others wait for its next call: on a
# Gloo group of its own with a long timeout, not on NCCL, whose watchdog would end a wait of more than minutes.
_CONTROL_TIMEOUT = datetime.timedelta(days=7)
_control: list[Any] = []
_together: list[bool] = []  # non-empty while the ranks work on one call together


def under_torchrun() -> bool:
    """Whether this process was started by ``torchrun`` (or another launcher that sets its variables)."""
    return all(name in os.environ for name in TORCHRUN_VARIABLES)


def start(device: str) -> str:
    """Join the process group torchrun set up (NCCL for ``cuda``, Gloo otherwise) and return this rank's device:
    ``cuda:<LOCAL_RANK>`` for ``cuda``/``cuda:<i>`` (one GPU per process), else ``device`` itself."""
    on_cuda = device.startswith("cuda")
    if on_cuda:
        device = f"cuda:{int(os.environ['LOCAL_RANK'])}"
        torch.cuda.set_device(torch.device(device))
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if on_cuda else "gloo")
    if not _control:  # a collective itself: every rank creates it here, first
        _control.append(dist.new_group(backend="gloo", timeout=_CONTROL_TIMEOUT))
    return device


def stop() -> None:
    """Leave the process group (at the end of a torchrun process)."""
    if dist.is_initialized():
        dist.destroy_process_group()
    _control.clear()


def joined() -> bool:
    """Whether this process is one of several torchrun ranks (it joined their process group)."""
    return dist.is_initialized()


@contextlib.contextmanager
def together() -> Iterator[None]:
    """Inside: the ranks work on one call together (:func:`run_on_every_rank`, :func:`serve_rank_zero`), so shares
    and gathers span them all. Outside, rank 0 works alone (testing, writing reports) while the others wait, and
    every function here acts as in one process: a collective there would wait forever for ranks that are not coming."""
    _together.append(True)
    try:
        yield
    finally:
        _together.pop()


def is_rank_zero() -> bool:
    """Whether this process is rank 0 of the process group, which runs the stage (or the only process)."""
    return not dist.is_initialized() or dist.get_rank() == 0


def rank() -> int:
    """This process's rank among the ranks working together; 0 in one process or outside :func:`together`."""
    return dist.get_rank() if dist.is_initialized() and _together else 0


def world_size() -> int:
    """How many ranks work together on the current call; 1 in one process or outside :func:`together`."""
    return dist.get_world_size() if dist.is_initialized() and _together else 1


def is_writer() -> bool:
    """Whether this process writes outputs: checkpoints, metrics, logs (rank 0, or the only process)."""
    return rank() == 0


def share(count: int) -> slice:
    """This rank's contiguous share of ``count`` items: ``count // W`` each, the first ``count % W`` ranks one
    more (``numpy.array_split``), so the shares in rank order are the items in their order."""
    size, extra, here = count // world_size(), count % world_size(), rank()
    start = here * size + min(here, extra)
    return slice(start, start + size + (1 if here < extra else 0))


def gather(tensor: Tensor) -> Tensor:
    """Every rank's ``tensor`` concatenated along dim 0 in rank order; trailing dimensions may differ between ranks
    and are padded with zeros (False) to the largest. Differentiable: the gradient of this rank's share is the sum
    of that share's gradients on all ranks (with the same loss on every rank: ``world_size()`` times the loss's
    gradient, which :func:`reduce_gradients` with ``mean=True`` divides back)."""
    if world_size() == 1:
        return tensor
    if tensor.requires_grad:
        gathered: Tensor = _Gather.apply(tensor)
        return gathered
    return _gather_padded(tensor)[0]


def _gather_padded(tensor: Tensor) -> tuple[Tensor, list[list[int]]]:
    """(the concatenation, every rank's shape): collectives need equal shapes, so shapes go first."""
    if tensor.dtype == torch.bool:  # Gloo moves no bools
        gathered, sizes = _gather_padded(tensor.to(torch.uint8))
        return gathered.bool(), sizes
    shape = torch.tensor(tensor.shape, dtype=torch.int64, device=tensor.device)
    shapes = [torch.zeros_like(shape) for _ in range(world_size())]
    dist.all_gather(shapes, shape)
    sizes = [part.tolist() for part in shapes]
    largest = [max(dims) for dims in zip(*sizes, strict=True)]
    padded = tensor.new_zeros(largest)
    padded[tuple(slice(0, n) for n in tensor.shape)] = tensor
    parts = [torch.empty_like(padded) for _ in sizes]
    dist.all_gather(parts, padded.contiguous())
    return torch.cat([part[: size[0]] for part, size in zip(parts, sizes, strict=True)]), sizes


class _Gather(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, tensor: Tensor) -> Tensor:
        gathered, sizes = _gather_padded(tensor)
        ctx.sizes = sizes
        return gathered

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tensor:
        grad = grad.contiguous().clone()
        dist.all_reduce(grad)  # every rank's loss reaches every share
        here = rank()
        start = sum(size[0] for size in ctx.sizes[:here])
        local = ctx.sizes[here]
        return grad[(slice(start, start + local[0]), *(slice(0, n) for n in local[1:]))]


def reduce_gradients(parameters: Iterable[nn.Parameter], *, mean: bool) -> None:
    """Sum (or average) the gradients of ``parameters`` across ranks in one flattened all-reduce.

    A parameter that has a gradient on some rank counts as zeros where it has none; one that has none on any rank
    (unused by this step, e.g. the image encoder in a caption-caption step) keeps none, as in one process: the
    optimiser then skips it (Adam would otherwise advance its step count and move it with its momentum)."""
    if world_size() == 1:
        return
    params = [param for param in parameters if param.requires_grad]
    if not params:
        return
    used = torch.tensor([param.grad is not None for param in params], dtype=torch.uint8, device=params[0].device)
    dist.all_reduce(used, op=dist.ReduceOp.MAX)
    grads = []
    for param, flag in zip(params, used.tolist(), strict=True):
        if flag:
            if param.grad is None:
                param.grad = torch.zeros_like(param)
            grads.append(param.grad)
    if not grads:
        return
    flat = torch.cat([grad.reshape(-1) for grad in grads])
    dist.all_reduce(flat)
    if mean:
        flat /= world_size()
    offset = 0
    for grad in grads:
        grad.copy_(flat[offset : offset + grad.numel()].view_as(grad))
        offset += grad.numel()


def broadcast_parameters(module: nn.Module) -> None:
    """Rank 0's parameters and buffers on every rank (the same start whatever each rank's initialisation)."""
    if world_size() == 1:
        return
    for tensor in module.state_dict().values():
        dist.broadcast(tensor, src=0)


def sum_of(value: float, device: torch.device) -> float:
    """``value`` summed over the ranks."""
    if world_size() == 1:
        return value
    total = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(total)
    return float(total.item())


def barrier() -> None:
    """Wait until every rank working together has come here (one rank writes a file, the others then read it)."""
    if world_size() > 1:
        dist.barrier()


def gather_objects(items: Sequence[T]) -> list[T]:
    """Every rank's ``items`` (picklable) concatenated in rank order."""
    if world_size() == 1:
        return list(items)
    parts: list[Any] = [None] * world_size()
    dist.all_gather_object(parts, list(items))
    return [item for part in parts for item in part]


# --- rank 0 sends each call, the others run it ---------------------------------------------------------------------


def _control_group() -> Any:
    if not _control:
        raise RuntimeError("no control group: join the process group with common.distributed.start first")
    return _control[0]


def run_on_every_rank(call: Callable[[], T], *, here: Callable[[], T] | None = None) -> T:
    """Have every other rank run ``call`` (:func:`serve_rank_zero`) and run ``here`` (default: ``call``) on this one.

    ``call`` is a ``functools.partial`` of a module-level function with picklable arguments; ``here`` is the same
    call with what only rank 0 uses (progress callbacks). Both must reach the same collectives in the same order.
    """
    if not joined():
        return (here or call)()
    dist.broadcast_object_list([call], src=0, group=_control_group())
    with together():
        return (here or call)()


def release_other_ranks() -> None:
    """Tell the other ranks that rank 0 has nothing more for them (their :func:`serve_rank_zero` returns)."""
    if joined():
        dist.broadcast_object_list([None], src=0, group=_control_group())


def serve_rank_zero() -> int:
    """On ranks other than 0: run each call rank 0 sends until it releases them; returns the number of calls."""
    calls = 0
    while True:
        message: list[Any] = [None]
        dist.broadcast_object_list(message, src=0, group=_control_group())
        if message[0] is None:
            return calls
        with together():
            message[0]()
        calls += 1
