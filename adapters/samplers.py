"""Implements ``TrainingArguments.train_sampling_strategy`` as standalone, rank-aware torch samplers.

A Lightning user can hand any of these to their own ``DataLoader``:

* :class:`ShardedSampler` — ``"random"`` and ``"sequential"``: torch's ``DistributedSampler``
  (same padding and ``drop_last`` rules) that also works without an initialised process group.
* :class:`LengthGroupedSampler` / :class:`DistributedLengthGroupedSampler` — ``"group_by_length"``:
  shuffled megabatches of ``50 × batch_size`` samples, each sorted by length (longest first), with
  the longest sample of the epoch moved to the very first batch so that an out-of-memory error
  shows up at once. For a given ``(seed, epoch)`` the order equals transformers'
  ``DistributedLengthGroupedSampler`` (and its ``LengthGroupedSampler`` given a generator seeded
  with ``seed + epoch``).
* :class:`~hf_lightning.adapters.samplers_rebalance.BatchRebalanceSampler` — ``"batch_rebalance"``.
* :func:`build_train_sampler` — picks one of them from the strategy name.

Every sampler takes ``num_replicas`` and ``rank`` (default: ``torch.distributed`` when initialised,
else 1 and 0), has ``set_epoch(epoch)``, and its order is a pure function of ``(seed, epoch)``.
The index samplers subclass ``torch.utils.data.DistributedSampler``, so ``lightning.Trainer`` does
not shard them a second time; the batch sampler needs ``Trainer(use_distributed_sampler=False)``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence, Sized
from typing import Any, cast

import torch
from torch.utils.data import DistributedSampler

from hf_lightning.adapters.samplers_common import as_length_list, resolve_replicas
from hf_lightning.adapters.samplers_rebalance import BatchRebalanceSampler
from hf_lightning.args.enums import LENGTH_SAMPLING_STRATEGIES, SAMPLING_STRATEGIES
from hf_lightning.data.collators import compute_lengths

__all__ = [
    "SAMPLING_STRATEGIES",
    "BatchRebalanceSampler",
    "DistributedLengthGroupedSampler",
    "LengthGroupedSampler",
    "ShardedSampler",
    "build_train_sampler",
    "length_grouped_indices",
]

MEGABATCH_MULT = 50


def length_grouped_indices(
    lengths: Sequence[int],
    batch_size: int,
    megabatch_mult: int | None = None,
    generator: torch.Generator | None = None,
) -> list[int]:
    """Permute, cut into megabatches, sort each by length descending; the longest sample goes first.

    ``megabatch_mult`` defaults to 50, or fewer so that there are at least 4 megabatches (never 0).
    """
    if megabatch_mult is None:
        megabatch_mult = max(1, min(len(lengths) // (batch_size * 4), MEGABATCH_MULT))
    permutation = torch.randperm(len(lengths), generator=generator).tolist()
    size = megabatch_mult * batch_size
    megabatches = [
        sorted(permutation[i : i + size], key=lambda j: lengths[j], reverse=True)
        for i in range(0, len(permutation), size)
    ]
    heads = [lengths[megabatch[0]] for megabatch in megabatches]
    longest = heads.index(max(heads))
    megabatches[0][0], megabatches[longest][0] = megabatches[longest][0], megabatches[0][0]
    return [index for megabatch in megabatches for index in megabatch]


def _shard_sizes(total: int, num_replicas: int, drop_last: bool) -> tuple[int, int]:
    """``(num_samples, total_size)`` with torch ``DistributedSampler``'s padding / dropping rule."""
    if drop_last and total % num_replicas:
        num_samples = math.ceil((total - num_replicas) / num_replicas)
    else:
        num_samples = math.ceil(total / num_replicas)
    return num_samples, num_samples * num_replicas


def _shard(indices: list[int], num_replicas: int, rank: int, total_size: int) -> list[int]:
    if len(indices) < total_size:
        padding = total_size - len(indices)
        indices = indices + (indices * math.ceil(padding / len(indices)))[:padding]
    return indices[:total_size][rank:total_size:num_replicas]


class ShardedSampler(DistributedSampler):
    """``"random"`` (``shuffle=True``) and ``"sequential"`` (``shuffle=False``) sampling, rank-aware.

    Exactly torch's ``DistributedSampler`` (a ``seed + epoch`` permutation, padded by repetition or
    trimmed with ``drop_last`` so every rank gets the same count, rank ``r`` taking every
    ``num_replicas``-th index), except that ``num_replicas`` and ``rank`` default to 1 and 0 when no
    process group is initialised. ``data_source`` is the dataset or just its size.
    """

    def __init__(
        self,
        data_source: Sized | int,
        *,
        shuffle: bool = True,
        num_replicas: int | None = None,
        rank: int | None = None,
        seed: int = 0,
        drop_last: bool = False,
    ) -> None:
        if isinstance(data_source, int):
            if data_source < 0:
                raise ValueError(f"`ShardedSampler(data_source={data_source})` must be a size >= 0")
            data_source = range(data_source)
        num_replicas, rank = resolve_replicas(num_replicas, rank, "ShardedSampler")
        super().__init__(
            cast(Any, data_source),  # DistributedSampler only takes len() of it; any Sized works
            num_replicas=num_replicas,
            rank=rank,
            shuffle=shuffle,
            seed=seed,
            drop_last=drop_last,
        )


class LengthGroupedSampler(DistributedSampler):
    """``"group_by_length"``: megabatches sorted by length, longest sample first, sharded by rank.

    Args:
        batch_size: the batch size the megabatches are multiples of (transformers' Trainer passes
            ``per_device_train_batch_size × gradient_accumulation_steps``).
        dataset: the dataset to measure when ``lengths`` is not given (see
            :func:`hf_lightning.data.collators.compute_lengths`; a ``length_column_name`` column is used).
        lengths: precomputed per-sample lengths (list, tensor or array).
        model_input_name: the key measured when scanning ``dataset`` (default ``"input_ids"``).
        generator: if given, each epoch draws its permutation from it (transformers' single-process
            behaviour); otherwise the permutation is seeded by ``seed + epoch``.
        num_replicas, rank, seed, drop_last: as torch's ``DistributedSampler``.
        length_column_name: the precomputed length column looked up in ``dataset``.
        megabatch_mult: megabatch size in batches (default 50, fewer for small datasets).
    """

    def __init__(
        self,
        batch_size: int,
        dataset: Any = None,
        lengths: Sequence[int] | None = None,
        model_input_name: str | None = None,
        generator: torch.Generator | None = None,
        *,
        num_replicas: int | None = None,
        rank: int | None = None,
        seed: int = 0,
        drop_last: bool = False,
        length_column_name: str = "length",
        megabatch_mult: int | None = None,
    ) -> None:
        owner = type(self).__name__
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"`{owner}(batch_size={batch_size!r})` must be a positive integer")
        if dataset is None and lengths is None:
            raise ValueError(f"`{owner}(dataset=None, lengths=None)`: pass one of them")
        if lengths is None:
            lengths = compute_lengths(dataset, length_column_name, model_input_name)
        self.lengths = as_length_list(lengths, owner)
        self.batch_size = batch_size
        self.generator = generator
        self.megabatch_mult = megabatch_mult
        self.num_replicas, self.rank = resolve_replicas(num_replicas, rank, owner)
        self.dataset = dataset if dataset is not None else self.lengths
        self.seed = seed
        self.epoch = 0
        self.shuffle = True
        self.drop_last = drop_last
        self.num_samples, self.total_size = _shard_sizes(len(self.lengths), self.num_replicas, drop_last)

    def __iter__(self) -> Iterator[int]:
        generator = self.generator
        if generator is None:
            generator = torch.Generator().manual_seed(self.seed + self.epoch)
        indices = length_grouped_indices(self.lengths, self.batch_size, self.megabatch_mult, generator)
        return iter(_shard(indices, self.num_replicas, self.rank, self.total_size))

    def __len__(self) -> int:
        return self.num_samples


class DistributedLengthGroupedSampler(LengthGroupedSampler):
    """:class:`LengthGroupedSampler` with transformers' ``DistributedLengthGroupedSampler`` signature."""

    def __init__(
        self,
        batch_size: int,
        dataset: Any = None,
        num_replicas: int | None = None,
        rank: int | None = None,
        seed: int = 0,
        drop_last: bool = False,
        lengths: Sequence[int] | None = None,
        model_input_name: str | None = None,
    ) -> None:
        super().__init__(
            batch_size,
            dataset=dataset,
            lengths=lengths,
            model_input_name=model_input_name,
            num_replicas=num_replicas,
            rank=rank,
            seed=seed,
            drop_last=drop_last,
        )


def build_train_sampler(
    strategy: str,
    lengths: Sequence[int] | int,
    *,
    batch_size: int,
    gradient_accumulation_steps: int = 1,
    num_replicas: int | None = None,
    rank: int | None = None,
    seed: int = 0,
    drop_last: bool = False,
) -> tuple[DistributedSampler | None, BatchRebalanceSampler | None]:
    """Return ``(sampler, batch_sampler)`` for ``TrainingArguments.train_sampling_strategy``.

    Exactly one of the two is set: pass it to ``DataLoader(sampler=..., batch_size=batch_size)`` or
    ``DataLoader(batch_sampler=...)``. ``lengths`` is the per-sample lengths, or, for ``"random"``
    and ``"sequential"`` (which do not need them), just the dataset size. ``batch_size`` is
    ``per_device_train_batch_size``; ``seed`` is ``data_seed`` (or ``seed``); ``drop_last`` is
    ``dataloader_drop_last``.
    """
    if strategy not in SAMPLING_STRATEGIES:
        raise ValueError(
            f"`TrainingArguments(train_sampling_strategy={strategy!r})` is not supported; choose one of: "
            + ", ".join(repr(s) for s in SAMPLING_STRATEGIES)
        )
    world: dict[str, Any] = {"num_replicas": num_replicas, "rank": rank, "seed": seed, "drop_last": drop_last}
    if strategy not in LENGTH_SAMPLING_STRATEGIES:  # "random" / "sequential": the size is enough
        size = lengths if isinstance(lengths, int) else len(lengths)
        return ShardedSampler(size, shuffle=strategy == "random", **world), None
    if isinstance(lengths, int):
        raise ValueError(
            f"`train_sampling_strategy={strategy!r}` needs one length per sample, got only the size {lengths}"
        )
    if strategy == "group_by_length":
        return LengthGroupedSampler(batch_size * gradient_accumulation_steps, lengths=lengths, **world), None
    return None, BatchRebalanceSampler(lengths, batch_size, gradient_accumulation_steps, **world)
