"""Helpers shared by the rank-aware samplers: the data-parallel world and the length list."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import Sampler

__all__ = ["as_length_list", "resolve_replicas"]


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
