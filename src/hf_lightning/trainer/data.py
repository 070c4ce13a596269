"""``DataLoaderBuilder`` (``trainer.loaders``): the Trainer's dataloaders, as transformers builds them.

Collators, unused columns, samplers and workers for training, evaluation and prediction. The
Trainer's ``get_*_dataloader``, ``_get_dataloader``, ``_get_train_sampler`` and ``_get_eval_sampler``
keep transformers' signatures (users override them) and call this part; the part calls the
samplers back through the Trainer, so an override is used.
"""

from __future__ import annotations

import inspect
from functools import partial
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.data import DataLoader, DistributedSampler, IterableDataset, RandomSampler, SequentialSampler

from hf_lightning.args.enums import LENGTH_SAMPLING_STRATEGIES, SAMPLING_STRATEGIES
from hf_lightning.data.collators import (
    RemoveColumnsCollator,
    compute_lengths,
    remove_unused_columns,
    signature_columns,
)
from hf_lightning.data.dispatch import DispatchedBatches
from hf_lightning.trainer.engine_door import ENGINE
from hf_lightning.trainer_utils import has_length, seed_worker
from hf_lightning.utils.logging import get_logger

if TYPE_CHECKING:
    from hf_lightning.trainer.trainer import Trainer

__all__ = ["DataLoaderBuilder", "UnknownEvalDatasetError", "find_labels"]

logger = get_logger(__name__)


def find_labels(model: Any) -> list[str]:
    """The label arguments of ``model.forward``: those containing "label", or the QA positions."""
    params = inspect.signature(model.forward).parameters
    if "QuestionAnswering" in type(model).__name__:
        return [p for p in params if "label" in p or p in ("start_positions", "end_positions")]
    return [p for p in params if "label" in p]


def _is_batch_sampler(sampler: Any) -> bool:
    return isinstance(sampler, (ENGINE.BatchRebalanceSampler, torch.utils.data.BatchSampler))


def _tensor_parallel_size(model: Any, data: Any) -> int:
    """The tensor-parallel degree, where transformers reads it: ``model._tp_size``, else ``parallelism_config``."""
    size = getattr(model, "_tp_size", None)
    if size is None:
        size = data.parallelism_tp_size
    return int(size or 1)


class UnknownEvalDatasetError(KeyError, ValueError):
    """An eval dataset name that ``eval_dataset`` (a dict) lacks: a ``KeyError`` as transformers' lookup
    raises, and a ``ValueError`` naming the choices."""

    def __str__(self) -> str:  # KeyError's own would quote the message
        return str(self.args[0])


class DataLoaderBuilder:
    """Builds the training, evaluation and test DataLoaders; owns the evaluation-loader cache."""

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer
        self.eval_dataloaders: dict[str, DataLoader | DispatchedBatches] = {}
        """Evaluation loaders kept with ``dataloader_persistent_workers``."""
        self.columns: list[str] | None = None
        """transformers' ``trainer._signature_columns``: the model's inputs, found on first use."""

    # --- training ----------------------------------------------------------------------------
    def train_dataloader(self) -> DataLoader | DispatchedBatches:
        """The training DataLoader: sampler from ``train_sampling_strategy``, workers from the arguments."""
        t = self.trainer
        if t.train_dataset is None:
            raise ValueError("Trainer: training requires a train_dataset.")
        return t._get_dataloader(
            t.train_dataset,
            "Training",
            t._train_batch_size,
            sampler_fn=t._get_train_sampler,
            is_training=True,
        )

    def train_sampler(self, train_dataset: Any = None, lengths: list[int] | None = None) -> Any:
        """``Trainer._get_train_sampler``: the sampler (or batch sampler) of ``args.train_sampling_strategy``."""
        t = self.trainer
        dataset = t.train_dataset if train_dataset is None else train_dataset
        if dataset is None or not has_length(dataset):
            return None
        args, data = t.args, t.plan.data
        tp_size = _tensor_parallel_size(t.model, data)
        if data.train_sampling_strategy == "batch_rebalance" and tp_size > 1:
            raise ValueError(
                "`TrainingArguments(train_sampling_strategy='batch_rebalance')` supports data-parallel training "
                f"only, but the model is tensor-parallel (tp_size={tp_size}); "
                f"choose one of: {', '.join(repr(s) for s in SAMPLING_STRATEGIES if s != 'batch_rebalance')}"
            )
        if data.train_sampling_strategy == "random" and not t.accelerator.use_seedable_sampler:
            return RandomSampler(dataset)  # accelerator_config: the order drawn from torch's global generator
        seed = data.sampler_seed
        sampler, batch_sampler = ENGINE.build_train_sampler(
            data.train_sampling_strategy,
            lengths if lengths is not None else len(dataset),
            batch_size=self.per_process(t._train_batch_size, max(args.world_size, 1)),
            gradient_accumulation_steps=t.plan.module.gradient_accumulation_steps,
            num_replicas=max(args.world_size, 1),
            rank=args.process_index,
            seed=seed,
            drop_last=data.dataloader_drop_last,
        )
        return batch_sampler if batch_sampler is not None else sampler

    # --- evaluation and prediction ------------------------------------------------------------
    def eval_dataloader(self, eval_dataset: Any = None) -> DataLoader | DispatchedBatches:
        """``Trainer.get_eval_dataloader``: of ``eval_dataset`` (a dataset or the name of one), else of
        ``trainer.eval_dataset``; in order, sharded by batches over data-parallel ranks."""
        t = self.trainer
        if eval_dataset is None and t.eval_dataset is None:
            raise ValueError("Trainer: evaluation requires an eval_dataset.")
        key = eval_dataset if isinstance(eval_dataset, str) else "eval"
        persistent = t.plan.data.dataloader_persistent_workers
        if persistent and key in self.eval_dataloaders:
            return self.eval_dataloaders[key]
        if isinstance(eval_dataset, str):
            dataset = self._named_eval_dataset(eval_dataset)
        else:
            dataset = eval_dataset if eval_dataset is not None else t.eval_dataset
        loader = t._get_dataloader(
            dataset, "Evaluation", t.args.eval_batch_size, sampler_fn=t._get_eval_sampler
        )
        if persistent:
            self.eval_dataloaders[key] = loader
        return loader

    def test_dataloader(self, test_dataset: Any) -> DataLoader | DispatchedBatches:
        """``Trainer.get_test_dataloader``: like the evaluation one, for ``test_dataset``."""
        t = self.trainer
        return t._get_dataloader(test_dataset, "test", t.args.eval_batch_size, sampler_fn=t._get_eval_sampler)

    def _named_eval_dataset(self, name: str) -> Any:
        datasets = self.trainer.eval_dataset
        if not isinstance(datasets, dict) or name not in datasets:
            names = (
                ", ".join(repr(k) for k in datasets) if isinstance(datasets, dict) else "none (not a dict)"
            )
            raise UnknownEvalDatasetError(
                f"`get_eval_dataloader({name!r})` names no eval dataset; choose one of: {names}"
            )
        return datasets[name]

    def eval_sampler(self, eval_dataset: Any, lengths: list[int] | None = None) -> Any:
        """``Trainer._get_eval_sampler``: sequential on one process; whole batches dealt to several ranks."""
        if eval_dataset is None or not has_length(eval_dataset):
            return None
        t = self.trainer
        args, data = t.args, t.plan.data
        world_size, rank = ENGINE.EvalEngine(t.accelerator, settings=t.plan.eval_placement).world()
        if world_size > 1:
            return ENGINE.EvalShardSampler(
                len(eval_dataset),
                self.per_process(args.eval_batch_size, world_size),
                world_size,
                rank,
                drop_last=data.dataloader_drop_last,
            )
        if data.train_sampling_strategy == "group_by_length":
            seed = data.sampler_seed
            names = getattr(t.processing_class, "model_input_names", None)
            return ENGINE.LengthGroupedSampler(
                args.eval_batch_size,
                dataset=eval_dataset,
                lengths=lengths,
                model_input_name=names[0] if names else None,
                length_column_name=data.length_column_name,
                generator=torch.Generator().manual_seed(seed),
                num_replicas=1,
                rank=0,
            )
        return SequentialSampler(eval_dataset)

    # --- one DataLoader ------------------------------------------------------------------------
    def build(
        self,
        dataset: Any,
        description: str,
        batch_size: int,
        sampler_fn: Any = None,
        is_training: bool = False,
        dataloader_key: str | None = None,
    ) -> DataLoader | DispatchedBatches:
        """``Trainer._get_dataloader``: columns, collator, sampler and workers for ``dataset``.

        A DataLoader's ``total_batch_size`` is the batch of one step over every process (accelerate's
        prepared loaders, which transformers returns, have it; ``DispatchedBatches`` counts its own).
        ``dataloader_key`` (transformers' cache key for persistent-worker loaders) is accepted; every call
        builds a new loader here."""
        del dataloader_key
        loader = self._build(dataset, description, batch_size, sampler_fn, is_training)
        if isinstance(loader, DataLoader):
            world = max(1, self.trainer.args.world_size)
            split = self.per_process(batch_size, world) != batch_size
            loader.total_batch_size = batch_size if split else batch_size * world
        return loader

    def per_process(self, batch_size: int, world_size: int) -> int:
        """The rows of a batch one process takes: all of them, or its slice with ``accelerator_config``'s
        ``split_batches`` (accelerate's rule: the batch divides evenly between the processes)."""
        if world_size <= 1 or not self.trainer.accelerator.split_batches:
            return batch_size
        if batch_size % world_size:
            raise ValueError(
                f"To use a `DataLoader` in `split_batches` mode, the batch size ({batch_size}) needs to be a "
                f"round multiple of the number of processes ({world_size})."
            )
        return batch_size // world_size

    def _build(
        self, dataset: Any, description: str, batch_size: int, sampler_fn: Any, is_training: bool
    ) -> DataLoader | DispatchedBatches:
        args, data = self.trainer.args, self.trainer.plan.data
        lengths = None
        if (
            is_training
            and data.train_sampling_strategy in LENGTH_SAMPLING_STRATEGIES
            and has_length(dataset)
            and not isinstance(dataset, IterableDataset)
        ):
            lengths = self._lengths(dataset)  # read before unused columns (the length column) are dropped
        dataset, collator = self._without_unused_columns(dataset, description)
        params = self._loader_params(self.per_process(batch_size, max(args.world_size, 1)), collator)
        if not isinstance(dataset, IterableDataset):
            sampler = _call_sampler_fn(sampler_fn, dataset, lengths)
            if _is_batch_sampler(sampler):
                params.pop("batch_size")
                params["batch_sampler"] = sampler
            else:
                params["sampler"] = sampler
                params["drop_last"] = data.dataloader_drop_last
            if is_training:
                params["worker_init_fn"] = partial(
                    seed_worker, num_workers=data.dataloader_num_workers, rank=args.process_index
                )
            if _deals_processes(sampler):
                return DataLoader(dataset, **params)
            # a sampler of a subclass's _get_*_sampler: accelerate's prepare, as transformers' loader gets
            # (a RandomSampler drawn seeded, the batches dealt to the processes)
            return self.trainer.accelerator.prepare_data_loader(DataLoader(dataset, **params))
        # transformers leaves drop_last off for a stream; its documentation promises to drop the last
        # incomplete batch, so the stream's is dropped too (docs/divergences.md).
        params["drop_last"] = data.dataloader_drop_last
        if is_training:
            return self._stream_loader(dataset, params)
        return DataLoader(dataset, **params)

    def _loader_params(self, batch_size: int, collator: Any) -> dict[str, Any]:
        """Batch size and collator, plus the worker and pinning options the plan translates once."""
        settings = self.trainer.plan.data
        return {"batch_size": batch_size, "collate_fn": collator, **settings.loader_kwargs()}

    def _without_unused_columns(self, dataset: Any, description: str) -> tuple[Any, Any]:
        """(dataset, collator) with the columns the model does not take removed (``remove_unused_columns``),
        through the Trainer's ``_remove_unused_columns`` / ``_get_collator_with_removed_columns``."""
        t = self.trainer
        if hasattr(dataset, "column_names") and hasattr(dataset, "remove_columns"):
            return t._remove_unused_columns(dataset, description=description), t.data_collator
        return dataset, t._get_collator_with_removed_columns(t.data_collator, description=description)

    def remove_unused_columns(self, dataset: Any, description: str | None = None) -> Any:
        """``Trainer._remove_unused_columns``: ``dataset`` without the columns outside ``_signature_columns``."""
        t = self.trainer
        if not t.plan.data.remove_unused_columns:
            return dataset
        return remove_unused_columns(
            dataset,
            self._signature(),
            t.label_names,
            description=description,
            model_name=type(t.model).__name__,
        )

    def collator_with_removed_columns(self, data_collator: Any, description: str | None = None) -> Any:
        """``Trainer._get_collator_with_removed_columns``: ``data_collator`` dropping the unused keys of each feature."""
        t = self.trainer
        if not t.plan.data.remove_unused_columns:
            return data_collator
        return RemoveColumnsCollator(
            data_collator,
            self._signature(),
            logger=logger,
            model_name=type(t.model).__name__,
            description=description,
        )

    def _stream_loader(self, dataset: Any, params: dict[str, Any]) -> DataLoader | DispatchedBatches:
        """The training loader of an ``IterableDataset`` (each process reads its share of the stream)."""
        args, data = self.trainer.args, self.trainer.plan.data
        if self.trainer.plan.length.max_steps <= 0:
            raise ValueError(
                "`TrainingArguments(max_steps=...)` must be a positive number of steps when "
                "train_dataset is an IterableDataset (it has no length to count epochs with)"
            )
        if data.train_sampling_strategy in LENGTH_SAMPLING_STRATEGIES:
            logger.warning(
                "`train_sampling_strategy='%s'` is ignored because the training dataset does not implement "
                "`__len__` (e.g. an `IterableDataset`). Examples will be consumed in the dataset's own order.",
                data.train_sampling_strategy,
            )
        if args.world_size > 1:  # each process trains on its share of the stream, as accelerate dispatches it
            seed = data.sampler_seed
            return DispatchedBatches(
                DataLoader(dataset, **params),
                args.world_size,
                args.process_index,
                drop_last=data.dataloader_drop_last,
                seed=seed,
            )
        return DataLoader(dataset, **params)

    def set_signature_columns(self) -> None:
        """``Trainer._set_signature_columns_if_needed``: ``trainer._signature_columns``, the model's ``forward``
        arguments (a PEFT model's base model's) and the label names, unless already set."""
        t = self.trainer
        if t._signature_columns is None:
            self.columns = signature_columns(t.model, t.label_names)

    def _signature(self) -> list[str]:
        t = self.trainer
        t._set_signature_columns_if_needed()  # a subclass (TRL's) may set its own columns
        return list(t._signature_columns or [])

    def _lengths(self, dataset: Any) -> list[int]:
        processing_class = self.trainer.processing_class
        name = None
        if processing_class is not None:
            names = getattr(processing_class, "model_input_names", None)
            name = names[0] if names else None
        return compute_lengths(dataset, self.trainer.plan.data.length_column_name, name)


def _deals_processes(sampler: Any) -> bool:
    """Whether ``sampler`` is one of the Trainer's own: they draw the seeded order and deal each process its
    share themselves (so does any ``DistributedSampler``)."""
    return isinstance(sampler, DistributedSampler) or getattr(sampler, "deals_processes", False)


def _call_sampler_fn(sampler_fn: Any, dataset: Any, lengths: list[int] | None) -> Any:
    """``sampler_fn(dataset)``, as transformers calls it, with the lengths only where it takes a second
    argument (a subclass's ``_get_train_sampler(self, train_dataset=None)`` takes one)."""
    if sampler_fn is None:
        return None
    try:
        params = list(inspect.signature(sampler_fn).parameters.values())
    except (TypeError, ValueError):
        return sampler_fn(dataset)
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) >= 2 or any(p.kind is p.VAR_POSITIONAL for p in params):
        return sampler_fn(dataset, lengths)
    return sampler_fn(dataset)
