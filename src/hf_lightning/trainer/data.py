"""The Trainer's dataloaders: collators, unused columns, samplers — as transformers builds them."""

from __future__ import annotations

import inspect
import logging
from functools import partial
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset

from hf_lightning.data.collators import (
    RemoveColumnsCollator,
    compute_lengths,
    remove_unused_columns,
    signature_columns,
)
from hf_lightning.data.dispatch import DispatchedBatches
from hf_lightning.trainer.base import TrainerBase
from hf_lightning.trainer_utils import has_length, seed_worker

__all__ = ["TrainerDataMixin", "find_labels"]

logger = logging.getLogger(__name__)


def find_labels(model: Any) -> list[str]:
    """The label arguments of ``model.forward``: those containing "label", or the QA positions."""
    params = inspect.signature(model.forward).parameters
    if "QuestionAnswering" in type(model).__name__:
        return [p for p in params if "label" in p or p in ("start_positions", "end_positions")]
    return [p for p in params if "label" in p]


def _is_batch_sampler(sampler: Any) -> bool:
    from hf_lightning.adapters.samplers import BatchRebalanceSampler

    return isinstance(sampler, (BatchRebalanceSampler, torch.utils.data.BatchSampler))


def _tensor_parallel_size(model: Any, args: Any) -> int:
    """The tensor-parallel degree, where transformers reads it: ``model._tp_size``, else ``parallelism_config``."""
    size = getattr(model, "_tp_size", None)
    if size is None:
        size = getattr(args.parallelism_config, "tp_size", None)
        if size is None and isinstance(args.parallelism_config, dict):
            size = args.parallelism_config.get("tp_size")
    return int(size or 1)


class TrainerDataMixin(TrainerBase):
    """``get_train_dataloader`` and the helpers that prepare a dataset for the model."""

    def get_train_dataloader(self) -> DataLoader | DispatchedBatches:
        """The training DataLoader: sampler from ``train_sampling_strategy``, workers from the arguments."""
        if self.train_dataset is None:
            raise ValueError("Trainer: training requires a train_dataset.")
        return self._get_dataloader(
            self.train_dataset,
            "training",
            self._train_batch_size,
            sampler_fn=self._get_train_sampler,
            is_training=True,
        )

    def _signature(self) -> list[str]:
        if self._signature_columns is None:
            self._signature_columns = signature_columns(self.model, self.label_names)
        return self._signature_columns

    def _get_dataloader(
        self,
        dataset: Any,
        description: str,
        batch_size: int,
        sampler_fn: Any = None,
        is_training: bool = False,
    ) -> DataLoader | DispatchedBatches:
        args = self.args
        collator = self.data_collator
        lengths = None
        if (
            is_training
            and args.train_sampling_strategy in ("group_by_length", "batch_rebalance")
            and has_length(dataset)
            and not isinstance(dataset, IterableDataset)
        ):
            lengths = self._lengths(dataset)  # read before unused columns (the length column) are dropped
        if args.remove_unused_columns:
            if hasattr(dataset, "column_names") and hasattr(dataset, "remove_columns"):
                dataset = remove_unused_columns(
                    dataset,
                    self._signature(),
                    self.label_names,
                    description=description,
                    model_name=type(self.model).__name__,
                )
            else:
                collator = RemoveColumnsCollator(
                    collator,
                    self._signature(),
                    logger=logger,
                    model_name=type(self.model).__name__,
                    description=description,
                )
        params: dict[str, Any] = {
            "batch_size": batch_size,
            "collate_fn": collator,
            "num_workers": args.dataloader_num_workers,
            "pin_memory": args.dataloader_pin_memory and torch.cuda.is_available(),
            "persistent_workers": args.dataloader_persistent_workers,
        }
        if args.dataloader_num_workers > 0:
            params["prefetch_factor"] = args.dataloader_prefetch_factor
            params["multiprocessing_context"] = args.dataloader_multiprocessing_context
            params["in_order"] = args.dataloader_in_order
        if not isinstance(dataset, IterableDataset):
            sampler = sampler_fn(dataset, lengths) if sampler_fn is not None else None
            if _is_batch_sampler(sampler):
                params.pop("batch_size")
                params["batch_sampler"] = sampler
            else:
                params["sampler"] = sampler
                params["drop_last"] = args.dataloader_drop_last
            if is_training:
                params["worker_init_fn"] = partial(
                    seed_worker, num_workers=args.dataloader_num_workers, rank=args.process_index
                )
        else:
            # transformers leaves drop_last off for a stream; its documentation promises to drop the last
            # incomplete batch, so the stream's is dropped too (docs/divergences.md).
            params["drop_last"] = args.dataloader_drop_last
        if isinstance(dataset, IterableDataset) and is_training:
            if args.max_steps <= 0:
                raise ValueError(
                    "`TrainingArguments(max_steps=...)` must be a positive number of steps when "
                    "train_dataset is an IterableDataset (it has no length to count epochs with)"
                )
            if args.train_sampling_strategy in ("group_by_length", "batch_rebalance"):
                logger.warning(
                    "`train_sampling_strategy='%s'` is ignored because the training dataset does not implement "
                    "`__len__` (e.g. an `IterableDataset`). Examples will be consumed in the dataset's own order.",
                    args.train_sampling_strategy,
                )
            if (
                args.world_size > 1
            ):  # each process trains on its share of the stream, as accelerate dispatches it
                seed = args.data_seed if args.data_seed is not None else args.seed
                return DispatchedBatches(
                    DataLoader(dataset, **params),
                    args.world_size,
                    args.process_index,
                    drop_last=args.dataloader_drop_last,
                    seed=seed,
                )
        return DataLoader(dataset, **params)

    def _lengths(self, dataset: Any) -> list[int]:
        name = None
        if self.processing_class is not None:
            names = getattr(self.processing_class, "model_input_names", None)
            name = names[0] if names else None
        return compute_lengths(dataset, self.args.length_column_name, name)

    def _get_train_sampler(self, train_dataset: Any = None, lengths: list[int] | None = None) -> Any:
        """The training sampler (or batch sampler) of ``args.train_sampling_strategy``."""
        from hf_lightning.adapters.samplers import build_train_sampler

        dataset = self.train_dataset if train_dataset is None else train_dataset
        if dataset is None or not has_length(dataset):
            return None
        args = self.args
        tp_size = _tensor_parallel_size(self.model, args)
        if args.train_sampling_strategy == "batch_rebalance" and tp_size > 1:
            raise ValueError(
                "`TrainingArguments(train_sampling_strategy='batch_rebalance')` supports data-parallel training "
                f"only, but the model is tensor-parallel (tp_size={tp_size}); "
                "choose one of: 'random', 'sequential', 'group_by_length'"
            )
        seed = args.data_seed if args.data_seed is not None else args.seed
        sampler, batch_sampler = build_train_sampler(
            args.train_sampling_strategy,
            lengths if lengths is not None else len(dataset),
            batch_size=self._train_batch_size,
            gradient_accumulation_steps=args.gradient_accumulation_steps,
            num_replicas=max(args.world_size, 1),
            rank=args.process_index,
            seed=seed,
            drop_last=args.dataloader_drop_last,
        )
        return batch_sampler if batch_sampler is not None else sampler
