"""The collective operations of ``trainer.accelerator``, with accelerate's semantics.

accelerate's ``gather``, ``gather_for_metrics``, ``reduce``, ``pad_across_processes`` and
``split_between_processes`` walk nested lists, tuples and dicts of tensors; on one process they give
their input back (``gather``), a clone (``reduce``) or the whole input (``split_between_processes``).
Here they run on a :class:`Collective`: inside a fit the running ``lightning.Trainer``'s strategy
(its ``all_gather``, ``reduce`` and ``barrier``), outside one the default process group the launcher's
variables describe (initialised on first use, as accelerate's ``PartialState`` does).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any, cast

import torch
import torch.distributed as dist

from hf_lightning.process_group import ensure_process_group

__all__ = [
    "Collective",
    "apply_to_tensors",
    "gather",
    "gather_object",
    "goes_first",
    "pad_across_processes",
    "reduce",
    "split_slice",
    "split_values",
]


class Collective:
    """The processes of one accelerator: ``world`` of them, this one ``rank``; ``strategy`` during a fit."""

    def __init__(self, world: int, rank: int, strategy: Any = None, *, backend: str | None = None,
                 timeout_s: int | None = None, device_type: str = "cpu") -> None:  # fmt: skip
        self.world, self.rank, self.strategy = world, rank, strategy
        self._group = (backend, timeout_s, device_type)

    def _ready(self) -> None:
        if self.strategy is None:
            ensure_process_group(*self._group)

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """Every process's ``tensor`` concatenated along the first dimension, in rank order."""
        # torch's collective itself, during a fit too: Lightning's strategy.all_gather goes through
        # torch.distributed.nn.functional.all_gather, which warns (deprecated) on every rank
        tensor = tensor.contiguous().reshape(-1, *tensor.shape[1:])  # a scalar gathers as one row
        if self.world <= 1 or (self.strategy is not None and not dist.is_initialized()):
            return tensor
        self._ready()
        parts = [torch.empty_like(tensor) for _ in range(self.world)]
        dist.all_gather(parts, tensor)
        return torch.cat(parts, dim=0)

    def all_reduce(self, tensor: torch.Tensor, op: str) -> torch.Tensor:
        """``tensor`` summed (``op="sum"``) or maximised (``op="max"``) over the processes, in place."""
        self._ready()
        dist.all_reduce(tensor, dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
        return tensor

    def all_gather_object(self, obj: Any) -> list[Any]:
        self._ready()
        parts: list[Any] = [None] * self.world
        dist.all_gather_object(parts, obj)
        return parts

    def barrier(self) -> None:
        if self.world <= 1:
            return
        if self.strategy is not None:
            self.strategy.barrier()
            return
        self._ready()
        dist.barrier()


def apply_to_tensors(func: Callable[[torch.Tensor], Any], data: Any, *, strict: bool = True) -> Any:
    """accelerate's ``recursively_apply``: ``func`` on every tensor of nested lists, tuples and mappings.

    With ``strict`` another leaf raises ``TypeError`` naming its type; otherwise it is kept."""
    if isinstance(data, (tuple, list)):
        items = [apply_to_tensors(func, item, strict=strict) for item in data]
        if isinstance(data, tuple) and hasattr(data, "_fields"):  # a namedtuple
            return type(data)(*items)
        return type(data)(items)
    if isinstance(data, Mapping):
        return cast(Any, type(data))(
            {key: apply_to_tensors(func, value, strict=strict) for key, value in data.items()}
        )
    if isinstance(data, torch.Tensor):
        return func(data)
    if strict:
        raise TypeError(
            f"Unsupported types ({type(data)}) passed to `{getattr(func, '__name__', 'func')}`. Only nested "
            "list/tuple/dicts of objects that are valid for `is_torch_tensor` should be passed."
        )
    return data


def gather(comm: Collective, data: Any) -> Any:
    """accelerate's ``gather``: each tensor of every process concatenated along dim 0 (a 0-d one becomes 1-d)."""
    if comm.world <= 1:
        return data

    def _gather_one(tensor: torch.Tensor) -> torch.Tensor:
        tensor = tensor.clone()[None] if tensor.ndim == 0 else tensor.contiguous()
        return comm.all_gather(tensor)

    return apply_to_tensors(_gather_one, data)


def gather_object(comm: Collective, obj: Any) -> Any:
    """accelerate's ``gather_object``: the processes' iterables joined into one list (one process: ``obj``)."""
    if comm.world <= 1:
        return obj
    return [item for part in comm.all_gather_object(obj) for item in part]


def reduce(comm: Collective, data: Any, reduction: str = "sum") -> Any:
    """accelerate's ``Accelerator.reduce``: a clone of each tensor summed (``"max"``: maximised, ``"mean"``:
    averaged) over the processes; ``"none"`` sums as accelerate does."""

    def _reduce_one(tensor: torch.Tensor) -> torch.Tensor:
        cloned = tensor.clone()
        if comm.world <= 1:
            return cloned
        comm.all_reduce(cloned, "max" if reduction == "max" else "sum")
        if reduction == "mean":
            cloned /= comm.world
        return cloned

    return apply_to_tensors(_reduce_one, data)


def pad_across_processes(
    comm: Collective, data: Any, dim: int = 0, pad_index: Any = 0, pad_first: bool = False
) -> Any:
    """accelerate's ``pad_across_processes``: each tensor padded along ``dim`` to the longest over the processes."""

    def _pad_one(tensor: torch.Tensor) -> torch.Tensor:
        if dim >= len(tensor.shape) or dim < -len(tensor.shape):
            return tensor
        axis = dim + len(tensor.shape) if dim < 0 else dim
        sizes = gather(comm, torch.tensor(tensor.shape, device=tensor.device)[None]).cpu()
        longest = max(int(size[axis]) for size in sizes)
        if longest == tensor.shape[axis]:
            return tensor
        shape = list(tensor.shape)
        shape[axis] = longest
        padded = tensor.new_zeros(tuple(shape)) + pad_index
        start = longest - tensor.shape[axis] if pad_first else 0
        where = tuple(
            slice(start, start + tensor.shape[axis]) if i == axis else slice(None) for i in range(len(shape))
        )
        padded[where] = tensor
        return padded

    return apply_to_tensors(_pad_one, data)


def split_slice(length: int, world: int, rank: int) -> tuple[int, int, int]:
    """``(start, end, longest)``: this rank's share of ``length`` items, as accelerate deals them (the
    first ``length % world`` ranks get one more), and the longest share."""
    per_process, extras = divmod(length, world)
    start = rank * per_process + min(rank, extras)
    end = start + per_process + (1 if rank < extras else 0)
    return start, end, per_process + (1 if extras > 0 else 0)


def split_values(comm: Collective, inputs: Any, apply_padding: bool, device: torch.device) -> Any:
    """This rank's share of ``inputs`` (a list, tuple, tensor, dict of them, or ``datasets.Dataset``)."""
    length = len(inputs)
    if isinstance(inputs, dict):
        length = len(inputs[next(iter(inputs))])
        if not all(len(value) == length for value in inputs.values()):
            raise ValueError("All values in the dictionary must have the same length")
    start, end, longest = split_slice(length, comm.world, comm.rank)
    return _split(comm, inputs, start, end, longest, apply_padding, device)


def _split(
    comm: Collective, inputs: Any, start: int, end: int, longest: int, pad: bool, device: torch.device
) -> Any:
    if isinstance(inputs, dict):
        return {key: _split(comm, value, start, end, longest, pad, device) for key, value in inputs.items()}
    if isinstance(inputs, (list, tuple, torch.Tensor)):
        result = inputs[start:end]
        if not pad:
            return result
        if isinstance(result, torch.Tensor):
            return pad_across_processes(comm, result.to(device), pad_index=inputs[-1].to(device))
        extra: Any = type(result)([inputs[-1]]) * (longest - len(result))
        return result + extra
    if callable(getattr(inputs, "select", None)):  # datasets.Dataset
        indices = list(range(min(start, len(inputs)), min(end, len(inputs))))
        if pad:
            indices += [len(inputs) - 1] * (longest - len(indices))
        return inputs.select(indices)
    return inputs


@contextlib.contextmanager
def goes_first(comm: Collective, is_first: bool) -> Iterator[None]:
    """accelerate's ``_goes_first``: the chosen processes run the block, then the others."""
    if not is_first:
        comm.barrier()
    yield
    if is_first:
        comm.barrier()
