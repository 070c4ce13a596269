"""The data side of ``trainer.accelerator``: ``gradient_state``, ``dataloader_config`` and ``prepare(DataLoader)``.

accelerate's ``prepare`` deals a DataLoader's batches to the processes: with ``split_batches=False``
process ``r`` of ``W`` takes batches ``r, r + W, r + 2W, ...`` of the loader's batch sampler, and with
``even_batches`` the last round is completed with batches from the start so every process runs as many
steps (its ``BatchSamplerShard``). :class:`ShardedBatchSampler` does the same. On one process the
loader is given back as it is: the Trainer's ``_prepare_inputs`` puts each batch on the device, and
``set_epoch`` reaches its (batch) sampler through the Trainer's loop, as accelerate's loader forwards it,
except that a ``RandomSampler`` is replaced by accelerate's seedable one (``use_seedable_sampler``, the
Trainer's default), so the order is the one accelerate's prepared loader gives.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader, IterableDataset, RandomSampler, Sampler

__all__ = [
    "DataLoaderConfiguration",
    "GradientStateView",
    "SeedableRandomSampler",
    "ShardedBatchSampler",
    "prepare_data_loader",
]


@dataclass
class DataLoaderConfiguration:
    """accelerate's ``DataLoaderConfiguration`` as transformers' Trainer builds it (``accelerator_config`` defaults)."""

    split_batches: bool = False
    dispatch_batches: bool | None = None
    even_batches: bool = True
    use_seedable_sampler: bool = True
    data_seed: int | None = None
    non_blocking: bool = False
    use_stateful_dataloader: bool = False


@dataclass
class GradientStateView:
    """accelerate's ``GradientState`` as the Trainer's loop sets it: ``sync_gradients`` is True on the last
    micro-batch of an optimizer step (and outside training); accumulation is the Trainer's (``num_steps=1``)."""

    sync_gradients: bool = True
    end_of_dataloader: bool = False
    remainder: int = -1
    plugin_kwargs: dict[str, Any] = field(default_factory=lambda: {"num_steps": 1})

    @property
    def num_steps(self) -> int:
        return int(self.plugin_kwargs.get("num_steps", 1))

    @property
    def in_dataloader(self) -> bool:
        return False

    def __repr__(self) -> str:
        return (
            f"Sync Gradients: {self.sync_gradients}\nAt end of current dataloader: {self.end_of_dataloader}\n"
            f"Extra samples added: {self.remainder}\nGradient accumulation plugin: {self.plugin_kwargs}\n"
        )


class ShardedBatchSampler(Sampler[list[int]]):
    """Process ``process_index``'s batches of ``batch_sampler`` (accelerate's ``BatchSamplerShard``, batches not split)."""

    def __init__(
        self, batch_sampler: Any, num_processes: int, process_index: int, even_batches: bool = True
    ) -> None:
        self.batch_sampler = batch_sampler
        self.num_processes, self.process_index = num_processes, process_index
        self.even_batches = even_batches
        self.batch_size = getattr(batch_sampler, "batch_size", None)
        self.drop_last = bool(getattr(batch_sampler, "drop_last", False))

    def set_epoch(self, epoch: int) -> None:
        if hasattr(self.batch_sampler, "set_epoch"):
            self.batch_sampler.set_epoch(epoch)

    def __len__(self) -> int:
        total, world = len(self.batch_sampler), self.num_processes
        if total % world == 0 or self.drop_last:
            return total // world
        if self.even_batches:
            return total // world + 1
        return total // world + (1 if self.process_index < total % world else 0)

    def __iter__(self) -> Iterator[list[int]]:
        world, rank, size = self.num_processes, self.process_index, self.batch_size
        initial: list[int] = []
        pending: list[int] = []
        batch: list[int] = []
        index = -1
        for index, batch in enumerate(self.batch_sampler):
            if not self.drop_last and index < world:
                initial += batch
            if index % world == rank:
                pending = batch
            if index % world == world - 1 and (size is None or len(batch) == size):
                yield pending
                pending = []
        if self.drop_last or not initial:
            return
        if not self.even_batches:
            if pending:
                yield pending
            return
        yield from self._even_out(initial, pending, batch, index)

    def _even_out(
        self, initial: list[int], pending: list[int], batch: list[int], index: int
    ) -> Iterator[list[int]]:
        """The last round completed with samples from the start, as accelerate completes it."""
        world, rank, size = self.num_processes, self.process_index, int(self.batch_size or 0)
        if len(pending) == size:
            yield pending
        while len(initial) < world * size:
            initial += initial
        if len(batch) == size:
            batch, index = [], index + 1
        start = 0
        while index % world != 0 or len(batch) > 0:
            end = start + size - len(batch)
            batch = batch + initial[start:end]
            if index % world == rank:
                yield batch
            start, batch, index = end, [], index + 1


class SeedableRandomSampler(RandomSampler):
    """accelerate's ``SeedableRandomSampler``: a ``RandomSampler`` whose generator is seeded with
    ``initial_seed + epoch`` at each pass (``data_seed``, else torch's initial seed), the same on every process."""

    def __init__(self, *args: Any, data_seed: int | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.initial_seed = data_seed if data_seed is not None else torch.random.initial_seed()
        self.epoch = 0

    def __iter__(self) -> Iterator[int]:
        if self.generator is None:
            self.generator = torch.Generator()
            self.generator.manual_seed(self.initial_seed)
        self.generator.manual_seed(self.epoch + self.initial_seed)
        yield from super().__iter__()
        self.set_epoch(self.epoch + 1)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch


_LOADER_KWARGS = ("num_workers", "collate_fn", "pin_memory", "timeout", "worker_init_fn",
                  "multiprocessing_context", "generator", "persistent_workers", "pin_memory_device")  # fmt: skip


def _rebuilt(loader: DataLoader, batch_sampler: Any) -> DataLoader:
    kwargs = {name: getattr(loader, name) for name in _LOADER_KWARGS if hasattr(loader, name)}
    if loader.num_workers > 0:
        kwargs["prefetch_factor"] = loader.prefetch_factor
    else:
        kwargs.pop("persistent_workers", None)
    return DataLoader(loader.dataset, batch_sampler=batch_sampler, **kwargs)


def _seedable(batch_sampler: Any, config: DataLoaderConfiguration) -> Any:
    """``batch_sampler`` with its ``RandomSampler`` replaced by a :class:`SeedableRandomSampler` (accelerate's
    ``use_seedable_sampler``), else ``batch_sampler`` itself."""
    sampler = getattr(batch_sampler, "sampler", None)
    if (
        not config.use_seedable_sampler
        or type(sampler) is not RandomSampler
        or not isinstance(batch_sampler, BatchSampler)
    ):
        return batch_sampler
    seedable = SeedableRandomSampler(
        sampler.data_source, replacement=sampler.replacement, num_samples=sampler._num_samples,
        generator=sampler.generator, data_seed=config.data_seed,
    )  # fmt: skip
    return BatchSampler(seedable, batch_sampler.batch_size, batch_sampler.drop_last)


def prepare_data_loader(
    loader: DataLoader, num_processes: int, process_index: int, config: DataLoaderConfiguration
) -> Any:
    """``loader`` as process ``process_index`` of ``num_processes`` iterates it (see the module docstring)."""
    if isinstance(loader.dataset, IterableDataset) or loader.batch_sampler is None:
        if num_processes <= 1:
            return loader
        raise NotImplementedError(
            "`trainer.accelerator.prepare(DataLoader)` of an IterableDataset on several processes is not carried; "
            "return the loader of `Trainer.get_train_dataloader()` (each process reads its share)"
        )
    if num_processes > 1 and (config.split_batches or config.dispatch_batches):
        raise NotImplementedError(
            "`trainer.accelerator.prepare(DataLoader)` with split_batches or dispatch_batches is not carried"
        )
    batch_sampler = _seedable(loader.batch_sampler, config)
    if num_processes > 1:
        batch_sampler = ShardedBatchSampler(batch_sampler, num_processes, process_index, config.even_batches)
    prepared = loader if batch_sampler is loader.batch_sampler else _rebuilt(loader, batch_sampler)
    # accelerate's prepared loaders carry the batch of one step over every process
    prepared.total_batch_size = (getattr(loader.batch_sampler, "batch_size", None) or 1) * num_processes  # type: ignore[attr-defined]
    return prepared
