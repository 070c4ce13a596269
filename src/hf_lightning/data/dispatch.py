"""Batches of an ``IterableDataset`` shared out across data-parallel processes.

transformers (through accelerate's batch dispatching, the default for an ``IterableDataset``) lets
process 0 read ``num_processes`` batches of the stream, joins them and hands process ``r`` the
``r``-th slice: every process trains on different examples and together they cover the stream in
order. ``DispatchedBatches`` gives each process the same slices without the broadcast: every process
reads the stream itself and keeps its own part. That needs the stream in the same order on every
process, which the documentation already asks of a randomised ``IterableDataset`` under DDP (a
``torch.Generator`` attribute, seeded by the trainer every epoch, or a ``set_epoch()`` method).

The end of the stream follows accelerate: the last group's rows are split evenly; when they do not
divide by the number of processes, rows from the start of the epoch complete it (unless
``drop_last``, which drops an incomplete last group).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, cast

import torch

__all__ = ["DispatchedBatches"]


class DispatchedBatches:
    """The batches of process ``process_index`` out of a loader that every process iterates alike.

    Args:
        loader: the training DataLoader over the ``IterableDataset`` (its batches: tensors, or dicts,
            lists or tuples of tensors).
        num_processes: data-parallel world size.
        process_index: this process's rank.
        drop_last: drop the last group of batches when it is incomplete (``dataloader_drop_last``).
        seed: the seed of the dataset's ``generator`` attribute at epoch 0 (``seed + epoch`` later),
            used when the dataset has a ``torch.Generator`` named ``generator`` and no ``set_epoch``.
    """

    def __init__(
        self,
        loader: Iterable[Any],
        num_processes: int,
        process_index: int,
        *,
        drop_last: bool = False,
        seed: int = 0,
    ) -> None:
        if num_processes < 1 or not 0 <= process_index < num_processes:
            raise ValueError(
                f"DispatchedBatches: process_index={process_index} is not a rank of "
                f"num_processes={num_processes}"
            )
        self.loader = loader
        self.num_processes = num_processes
        self.process_index = process_index
        self.drop_last = drop_last
        self.seed = seed
        self.epoch = 0
        self.total_batch_size: int | None = getattr(loader, "batch_size", None)
        """One step's batch over every process (the inner loader's batch on each of them), as accelerate's."""
        if self.total_batch_size is not None:
            self.total_batch_size *= num_processes

    @property
    def dataset(self) -> Any:
        return getattr(self.loader, "dataset", None)

    @property
    def batch_size(self) -> int | None:
        return getattr(self.loader, "batch_size", None)

    def set_epoch(self, epoch: int) -> None:
        """Remember the epoch and forward it to the dataset's own ``set_epoch``."""
        self.epoch = epoch
        dataset = self.dataset
        if hasattr(dataset, "set_epoch"):
            dataset.set_epoch(epoch)

    def _seed_generator(self) -> None:
        dataset = self.dataset
        if not hasattr(dataset, "set_epoch") and isinstance(
            getattr(dataset, "generator", None), torch.Generator
        ):
            dataset.generator.manual_seed(self.seed + self.epoch)

    def __iter__(self) -> Iterator[Any]:
        self._seed_generator()
        iterator = iter(self.loader)
        group = list(itertools.islice(iterator, self.num_processes))
        first_group = group  # its first rows complete an uneven last group
        while group:
            following = list(itertools.islice(iterator, self.num_processes))
            if not following and len(group) < self.num_processes and self.drop_last:
                return
            rows = [_num_rows(batch) for batch in group]
            if len(group) == self.num_processes and len(set(rows)) == 1:
                # The usual case: the r-th batch is exactly the r-th slice of the joined group.
                yield group[self.process_index]
            else:
                joined = _concatenate(group)
                total = sum(rows)
                size = total // self.num_processes
                if total % self.num_processes and not self.drop_last:
                    start = joined if group is first_group else _concatenate(first_group)
                    joined = _concatenate([joined, _slice(start, 0, self.num_processes)])
                    size += 1
                if size:
                    yield _slice(joined, self.process_index * size, (self.process_index + 1) * size)
            group = following


def _num_rows(batch: Any) -> int:
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() else 1
    if isinstance(batch, Mapping):
        for value in batch.values():
            return _num_rows(value)
    if isinstance(batch, (list, tuple)) and batch:
        return _num_rows(batch[0])
    raise TypeError(
        f"DispatchedBatches: cannot find the batch size of a {type(batch).__name__} batch; the "
        "collator of an IterableDataset trained on several processes must return tensors, or dicts, "
        "lists or tuples of tensors"
    )


def _slice(batch: Any, start: int, stop: int) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch[start:stop]
    if isinstance(batch, Mapping):
        return cast(Any, type(batch))({key: _slice(value, start, stop) for key, value in batch.items()})
    if isinstance(batch, (list, tuple)):
        return type(batch)(_slice(value, start, stop) for value in batch)
    return batch


def _concatenate(batches: list[Any]) -> Any:
    head = batches[0]
    if isinstance(head, torch.Tensor):
        try:
            return torch.cat(batches, dim=0)
        except RuntimeError as error:
            shapes = ", ".join(str(tuple(b.shape)) for b in batches)
            raise ValueError(
                "An IterableDataset trained on several processes is shared out by joining the batches of the "
                f"stream's last group, but they have different shapes ({shapes}): pad every batch of the stream "
                "to the same length (e.g. `DataCollatorWithPadding(padding='max_length')`) or set "
                "`TrainingArguments(dataloader_drop_last=True)`"
            ) from error
    if isinstance(head, Mapping):
        return cast(Any, type(head))({key: _concatenate([b[key] for b in batches]) for key in head})
    if isinstance(head, (list, tuple)):
        return type(head)(_concatenate(list(values)) for values in zip(*batches))
    return head
