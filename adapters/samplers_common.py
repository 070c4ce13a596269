"""Helpers shared by the rank-aware samplers: the data-parallel world and the length list."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import torch
import torch.distributed as dist
from torch.utils.data import Sampler

__all__ = ["as_length_list", "resolve_replicas", "shard_batches", "shard_length"]


def resolve_replicas(num_replicas: int | None, rank: int | None, owner: str) -> tuple[int, int]:
    """Return ``(num_replicas, rank)``; defaults come from ``torch.distributed`` when initialised, else 1 and 0."""
    initialised = dist.is_available() and dist.is_initialized()
    if num_replicas is None:
        num_replicas = dist.get_world_size() if initialised else 1
    if rank is None:
        rank = dist.get_rank() if initialised else 0
    if not isinstance(num_replicas, int) or num_replicas < 1:
        raise ValueError(f"`{owner}(num_replicas={num_replicas!r})` must be a positive integer")
    if not isinstance(rank, int) or not 0 <= rank < num_replicas:
        raise ValueError(f"`{owner}(rank={rank!r})` must be an integer in [0, {num_replicas - 1}]")
    return num_replicas, rank


def as_length_list(lengths: Sequence[int] | Any, owner: str) -> list[int]:
    """Turn a list, tensor or array of per-sample lengths into a list of ints, rejecting bad values."""
    if isinstance(lengths, Sampler):
        raise ValueError(
            f"`{owner}(lengths=...)` got a {type(lengths).__name__}, not per-sample lengths. The sampler is "
            "already rank-aware: with a distributed lightning.Trainer pass `use_distributed_sampler=False`."
        )
    if isinstance(lengths, torch.Tensor):
        lengths = lengths.tolist()
    elif hasattr(lengths, "tolist"):
        lengths = lengths.tolist()
    values = [int(v) for v in lengths]
    if not values:
        raise ValueError(f"`{owner}(lengths=[])` needs at least one sample length")
    if min(values) < 0:
        raise ValueError(f"`{owner}(lengths=...)` must be non-negative, got {min(values)}")
    return values


def shard_batches(
    order: Sequence[int], batch_size: int, num_replicas: int, rank: int, drop_last: bool
) -> list[list[int]]:
    """The batches of ``rank`` when ``order`` is cut into batches of ``batch_size`` dealt to the ranks in turn.

    Accelerate's ``BatchSamplerShard`` (``split_batches=False``, ``even_batches=True``) over a
    ``BatchSampler(order, batch_size, drop_last)``, which is what transformers' Trainer iterates under
    several processes: batch ``k`` goes to rank ``k % num_replicas``. With ``drop_last`` the incomplete
    last batch and the last incomplete round are dropped; without, the last round is completed with
    indices from the start of the epoch, so every rank gets the same number of full batches.
    """
    batches = [list(order[i : i + batch_size]) for i in range(0, len(order), batch_size)]
    if drop_last and batches and len(batches[-1]) < batch_size:
        batches.pop()
    mine: list[list[int]] = []
    initial: list[int] = []
    pending: list[int] | None = None
    index, batch = -1, cast(list[int], [])
    for index, batch in enumerate(batches):
        if not drop_last and index < num_replicas:
            initial += batch
        if index % num_replicas == rank:
            pending = batch
        if index % num_replicas == num_replicas - 1 and len(batch) == batch_size:
            mine.append(cast(list[int], pending))
            pending = None
    if drop_last or not initial:
        return mine
    if pending is not None and len(pending) == batch_size:
        mine.append(pending)
    while len(initial) < num_replicas * batch_size:
        initial += initial
    if len(batch) == batch_size:
        batch, index = [], index + 1
    cycle = 0
    while index % num_replicas != 0 or batch:
        end = cycle + batch_size - len(batch)
        batch = batch + initial[cycle:end]
        if index % num_replicas == rank:
            mine.append(batch)
        cycle, batch, index = end, [], index + 1
    return mine


def shard_length(total: int, batch_size: int, num_replicas: int, drop_last: bool) -> int:
    """How many indices :func:`shard_batches` gives each rank (accelerate's ``BatchSamplerShard.__len__`` batches)."""
    batches = total // batch_size if drop_last else -(-total // batch_size)
    rounds = batches // num_replicas
    if batches % num_replicas and not drop_last:
        rounds += 1
    return rounds * batch_size
