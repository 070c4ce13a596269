"""Checks an ``HFModule`` runs before Lightning would fail late or train wrongly, each naming the fix.

- ``accumulate_grad_batches`` on the ``lightning.Trainer``: Lightning's automatic accumulation does
  not apply to manual optimization; ``HFModule`` accumulates over ``AccumulationWindows``.
- Several processes and an ``AccumulationWindows`` over an unsharded DataLoader: Lightning adds a
  ``DistributedSampler`` only to DataLoaders, so every process would train on the same rows.
- Evaluation labels below 0 other than -100 (an unlabelled split, GLUE's test labels are -1).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch.utils.data import IterableDataset

from hf_lightning.loss import IGNORE_INDEX

from .windows import AccumulationWindows

__all__ = ["batch_rows", "check_eval_labels", "check_windows_are_sharded", "refuse_lightning_accumulation"]


def refuse_lightning_accumulation(trainer: Any) -> None:
    """Raise when ``lightning.Trainer(accumulate_grad_batches=N)`` is set for an ``HFModule``."""
    steps = getattr(trainer, "accumulate_grad_batches", 1)
    if steps != 1:
        raise ValueError(
            f"HFModule accumulates gradients itself: remove `lightning.Trainer(accumulate_grad_batches={steps})` "
            f"and pass `TrainingArguments(gradient_accumulation_steps={steps})` to HFModule with the training "
            f"DataLoader wrapped as `AccumulationWindows(loader, {steps})` (hf_lightning.adapters)"
        )


def check_windows_are_sharded(trainer: Any) -> None:
    """Raise when several processes would each iterate the whole dataset of an ``AccumulationWindows``."""
    world = int(getattr(trainer, "world_size", 1))
    if world < 2:
        return
    for loader in _train_loaders(getattr(trainer, "train_dataloader", None)):
        if not isinstance(loader, AccumulationWindows):
            continue
        inner = loader.loader
        dataset = getattr(inner, "dataset", None)
        if dataset is None or isinstance(dataset, IterableDataset) or _is_sharded(inner):
            continue
        raise ValueError(
            f"`AccumulationWindows` wraps a DataLoader whose sampler is not sharded across the {world} "
            "processes (Lightning adds a DistributedSampler only to a plain DataLoader), so every process "
            "would train on the same rows: build the inner DataLoader with "
            "`sampler=torch.utils.data.DistributedSampler(dataset)` (or `hf_lightning.adapters.ShardedSampler`)"
        )


def check_engine_module(module: Any, trainer: Any) -> None:
    """Raise when the module under Lightning's ``DeepSpeedStrategy`` or ``FSDPStrategy`` is not the form made
    for it: under ZeRO a plain module would keep only the last micro-batch's gradients of a window, and
    under FSDP1 it would clip by the norm of its own shards."""
    from lightning.pytorch.strategies import DeepSpeedStrategy, FSDPStrategy

    strategy = getattr(trainer, "strategy", None)
    for kind, flag, form, anchor in (
        (DeepSpeedStrategy, "drives_deepspeed", "DeepSpeedModule", "which tells DeepSpeed where each "
         "accumulation window ends (docs/distributed.md#deepspeed)"),
        (FSDPStrategy, "drives_fsdp1", "FSDP1Module", "with `to_lightning(args).strategy`, which shards the "
         "model and clips over every shard (docs/lightning.md)"),
    ):  # fmt: skip
        if isinstance(strategy, kind) and not getattr(module, flag, False):
            raise TypeError(
                f"`{type(module).__name__}` under Lightning's {kind.__name__}: use "
                f"`hf_lightning.adapters.{form}` (the same arguments), {anchor}"
            )


def _train_loaders(loaders: Any) -> Iterable[Any]:
    if isinstance(loaders, Mapping):
        return list(loaders.values())
    if isinstance(loaders, (list, tuple)):
        return list(loaders)
    return [loaders]


def _is_sharded(loader: Any) -> bool:
    batch_sampler = getattr(loader, "batch_sampler", None)
    candidates = (getattr(loader, "sampler", None), batch_sampler, getattr(batch_sampler, "sampler", None))
    return any(int(getattr(c, "num_replicas", 1) or 1) > 1 for c in candidates if c is not None)


def check_eval_labels(inputs: Mapping[str, Any], stage: str) -> None:
    """Raise when a ``stage`` batch's labels hold negative values other than -100 (an unlabelled split)."""
    labels = inputs.get("labels")
    if not isinstance(labels, torch.Tensor) or labels.is_floating_point():
        return
    if bool(((labels < 0) & (labels != IGNORE_INDEX)).any()):
        found = int(labels[(labels < 0) & (labels != IGNORE_INDEX)][0])
        raise ValueError(
            f"The {stage} batch has `labels` of {found} (an unlabelled split?): a loss needs real labels. "
            "Drop the `labels` column (e.g. `dataset.remove_columns('labels')`) to run without a loss, or "
            "call `trainer.predict` for the model's outputs"
        )


def batch_rows(inputs: Mapping[str, Any]) -> int:
    """The number of samples in a batch: the first dimension of its first tensor (1 if none)."""
    for value in inputs.values():
        if isinstance(value, torch.Tensor) and value.dim() > 0:
            return int(value.shape[0])
    return 1
