"""Splitting a dataset between processes batch by batch, with the names and orders of ``transformers.trainer_pt_utils``.

- :class:`ShardSampler`: indices of a sized dataset, dealt out a batch at a time to each process in turn (the
  last round completed from the start unless ``drop_last``).
- :class:`IterableDatasetShard`: the same for a stream; ``set_epoch`` reseeds the stream's ``generator`` (or calls
  its own ``set_epoch``) so that every process draws the same order.
- :class:`DistributedSamplerWithLoop`: torch's ``DistributedSampler``, its shard lengthened to a whole number of
  batches with the shard's own first indices.

hf_lightning's training and evaluation shard through Lightning's samplers; these are for code that uses them
directly, as scripts and tests written for transformers do.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DistributedSampler, IterableDataset, Sampler

__all__ = ["DistributedSamplerWithLoop", "IterableDatasetShard", "ShardSampler"]


def _round_slots(batch_size: int, process_index: int) -> range:
    """The positions of one process's samples inside a round of ``batch_size × processes`` samples."""
    return range(process_index * batch_size, (process_index + 1) * batch_size)


class _Shard:
    """What both shards are told: the data, the per-process batch, the processes and this one's index."""

    def __init__(
        self,
        dataset: Any,
        batch_size: int = 1,
        drop_last: bool = False,
        num_processes: int = 1,
        process_index: int = 0,
    ) -> None:
        self.dataset = dataset
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.num_processes = num_processes
        self.process_index = process_index


class ShardSampler(_Shard, Sampler[int]):
    """Indices ``0..len(dataset)-1`` in order, in rounds of ``batch_size × num_processes``: this process takes
    its ``batch_size`` slice of each round. Every process gets as many samples, a multiple of ``batch_size``."""

    @property
    def total_batch_size(self) -> int:
        """Samples in one round: ``batch_size × num_processes``."""
        return self.batch_size * self.num_processes

    @property
    def total_num_samples(self) -> int:
        """Samples dealt out in all: whole rounds (the last one dropped with ``drop_last``, else completed)."""
        rounds = len(self.dataset) / self.total_batch_size
        return (math.floor(rounds) if self.drop_last else math.ceil(rounds)) * self.total_batch_size

    def __iter__(self) -> Iterator[int]:
        size = len(self.dataset)
        slots = _round_slots(self.batch_size, self.process_index)
        for start in range(0, self.total_num_samples, self.total_batch_size):
            yield from ((start + slot) % size for slot in slots)  # the last round wraps to the start

    def __len__(self) -> int:
        return self.total_num_samples // self.num_processes


class IterableDatasetShard(_Shard, IterableDataset):
    """One process's share of a stream: of every ``batch_size × num_processes`` consecutive samples, the
    ``batch_size`` at its place. An incomplete last round is dropped (``drop_last``) or completed with the
    stream's first samples. ``num_examples`` counts what the stream yielded in the last pass."""

    def __init__(
        self,
        dataset: Any,
        batch_size: int = 1,
        drop_last: bool = False,
        num_processes: int = 1,
        process_index: int = 0,
        seed: int = 0,
    ) -> None:
        super().__init__(dataset, batch_size, drop_last, num_processes, process_index)
        self.seed = seed
        self.epoch = 0
        self.num_examples = 0

    def set_epoch(self, epoch: int) -> None:
        """Start ``epoch``: the stream's own ``set_epoch`` if it has one, else its generator seeded ``seed + epoch``."""
        self.epoch = epoch
        if hasattr(self.dataset, "set_epoch"):
            self.dataset.set_epoch(epoch)

    def __iter__(self) -> Iterator[Any]:
        self.num_examples = 0
        generator = getattr(self.dataset, "generator", None)
        if not hasattr(self.dataset, "set_epoch") and isinstance(generator, torch.Generator):
            generator.manual_seed(self.seed + self.epoch)
        round_size = self.batch_size * self.num_processes
        slots = _round_slots(self.batch_size, self.process_index)
        first: list[Any] | None = None
        current: list[Any] = []
        for element in self.dataset:
            self.num_examples += 1
            current.append(element)
            if len(current) == round_size:
                yield from (current[i] for i in slots)
                first = current if first is None else first
                current = []
        if current and not self.drop_last:
            start = list(current) if first is None else first
            while len(current) < round_size:  # a stream shorter than one round repeats itself
                current += start
            yield from (current[i] for i in slots)

    def __len__(self) -> int:
        rounds = len(self.dataset) / (self.batch_size * self.num_processes)
        return (math.floor(rounds) if self.drop_last else math.ceil(rounds)) * self.batch_size


class DistributedSamplerWithLoop(DistributedSampler):
    """``DistributedSampler`` (its other arguments as keywords) whose shard is lengthened to a multiple of
    ``batch_size`` with its own first indices (past the one ``DistributedSampler`` may have repeated)."""

    def __init__(self, dataset: Any, batch_size: int, **kwargs: Any) -> None:
        super().__init__(dataset, **kwargs)
        self.batch_size = batch_size

    def __iter__(self) -> Iterator[int]:
        indices = list(super().__iter__())
        missing = -len(indices) % self.batch_size
        # DistributedSampler evened the shards with indices from the front: a rank that got one skips it
        skip = 1 if self.rank < len(self.dataset) % self.num_replicas else 0  # type: ignore[arg-type]
        return iter(indices + indices[skip : skip + missing])
