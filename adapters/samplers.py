"""Implements ``TrainingArguments.train_sampling_strategy`` as standalone, rank-aware torch samplers.

A Lightning user can hand any of these to their own ``DataLoader``:

* :class:`ShardedSampler` — ``"random"`` and ``"sequential"``: the epoch's order (a ``seed + epoch``
  permutation, as accelerate's ``SeedableRandomSampler`` draws it for transformers' Trainer, or the
  dataset order), shared between the processes.
* :class:`LengthGroupedSampler` — ``"group_by_length"``: shuffled megabatches of ``50 × batch_size``
  samples, each sorted by length (longest first), with the longest sample of the epoch moved to the
  very first batch so that an out-of-memory error shows up at once; for a given ``(seed, epoch)`` the
  order equals transformers' ``LengthGroupedSampler`` given a generator seeded with ``seed + epoch``.
  :class:`DistributedLengthGroupedSampler` has transformers' class of that name's signature and split.

How the epoch's order is split between processes: given ``per_device_batch_size`` (the Trainer and
:func:`build_train_sampler` pass it), as transformers' Trainer under ``torchrun`` splits it —
accelerate's ``BatchSamplerShard`` cuts the order into batches of that size and deals whole batches
to the ranks in turn (:func:`~hf_lightning.adapters.samplers_common.shard_batches`). Without it,
torch's ``DistributedSampler`` rule: rank ``r`` takes every ``num_replicas``-th index.
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

from hf_lightning.args.enums import LENGTH_SAMPLING_STRATEGIES, SAMPLING_STRATEGIES
from hf_lightning.data.collators import compute_lengths

from .samplers_common import (
    as_length_list,
    resolve_replicas,
    shard_batches,
    shard_length,
)
from .samplers_rebalance import BatchRebalanceSampler

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

    The epoch's order is a ``seed + epoch`` permutation (or the dataset order). With
    ``per_device_batch_size`` each rank gets whole consecutive batches of it, dealt in turn, as
    transformers' Trainer (through accelerate) under several processes; without, torch's
    ``DistributedSampler`` (padded by repetition or trimmed with ``drop_last``, rank ``r`` taking
    every ``num_replicas``-th index). ``num_replicas`` and ``rank`` default to 1 and 0 when no
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
        per_device_batch_size: int | None = None,
    ) -> None:
        self.per_device_batch_size = _batch_size_or_none(per_device_batch_size, "ShardedSampler")
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

    def __iter__(self) -> Iterator[int]:
        if self.per_device_batch_size is None or self.num_replicas == 1:  # one process: the whole order
            return super().__iter__()
        total = len(cast(Sized, self.dataset))
        if self.shuffle:
            order = torch.randperm(
                total, generator=torch.Generator().manual_seed(self.seed + self.epoch)
            ).tolist()
        else:
            order = list(range(total))
        return iter(
            _by_batches(order, self.per_device_batch_size, self.num_replicas, self.rank, self.drop_last)
        )

    def __len__(self) -> int:
        if self.per_device_batch_size is None or self.num_replicas == 1:
            return super().__len__()
        total = len(cast(Sized, self.dataset))
        return shard_length(total, self.per_device_batch_size, self.num_replicas, self.drop_last)


def _batch_size_or_none(value: int | None, owner: str) -> int | None:
    if value is not None and (not isinstance(value, int) or value < 1):
        raise ValueError(f"`{owner}(per_device_batch_size={value!r})` must be a positive integer or None")
    return value


def _by_batches(
    order: list[int], batch_size: int, num_replicas: int, rank: int, drop_last: bool
) -> list[int]:
    return [i for batch in shard_batches(order, batch_size, num_replicas, rank, drop_last) for i in batch]


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
        per_device_batch_size: each rank's batch size: when given, the epoch's order over the whole
            dataset is dealt to the ranks in whole batches of it (transformers' Trainer under
            several processes); when None, rank ``r`` takes every ``num_replicas``-th index.
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
        per_device_batch_size: int | None = None,
    ) -> None:
        owner = type(self).__name__
        self.per_device_batch_size = _batch_size_or_none(per_device_batch_size, owner)
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
        self.dataset: Any = dataset if dataset is not None else self.lengths
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
        if self.per_device_batch_size is not None and self.num_replicas > 1:
            return iter(
                _by_batches(indices, self.per_device_batch_size, self.num_replicas, self.rank, self.drop_last)
            )
        return iter(_shard(indices, self.num_replicas, self.rank, self.total_size))

    def __len__(self) -> int:
        if self.per_device_batch_size is not None and self.num_replicas > 1:
            return shard_length(
                len(self.lengths), self.per_device_batch_size, self.num_replicas, self.drop_last
            )
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
    ``dataloader_drop_last``. Under several processes each rank gets the batches transformers' Trainer
    gives it (whole batches of the epoch's order, dealt in turn); ``batch_rebalance`` splits its own.
    """
    if strategy not in SAMPLING_STRATEGIES:
        raise ValueError(
            f"`TrainingArguments(train_sampling_strategy={strategy!r})` is not supported; choose one of: "
            + ", ".join(repr(s) for s in SAMPLING_STRATEGIES)
        )
    world: dict[str, Any] = {"num_replicas": num_replicas, "rank": rank, "seed": seed, "drop_last": drop_last}
    if strategy not in LENGTH_SAMPLING_STRATEGIES:  # "random" / "sequential": the size is enough
        size = lengths if isinstance(lengths, int) else len(lengths)
        return ShardedSampler(
            size, shuffle=strategy == "random", per_device_batch_size=batch_size, **world
        ), None
    if isinstance(lengths, int):
        raise ValueError(
            f"`train_sampling_strategy={strategy!r}` needs one length per sample, got only the size {lengths}"
        )
    if strategy == "group_by_length":
        megabatch = batch_size * gradient_accumulation_steps
        return LengthGroupedSampler(
            megabatch, lengths=lengths, per_device_batch_size=batch_size, **world
        ), None
    return None, BatchRebalanceSampler(lengths, batch_size, gradient_accumulation_steps, **world)
