"""Refuse a training set that yields no batch, before any step runs, naming the dataset and its length.

transformers trains an empty dataset for ``max_steps`` steps that never happen (``global_step=0``,
``training_loss=0.0``) or fails on a missing length; here ``train()`` raises a ``ValueError`` that says
why there is nothing to train on (``docs/divergences.md``). A stream (an ``IterableDataset``) has no length:
:func:`no_batch_error` is raised when its first epoch ends before one complete batch.
"""

from __future__ import annotations

from typing import Any

__all__ = ["check_train_dataloader", "no_batch_error"]


def _length(obj: Any) -> int | None:
    try:
        return len(obj)
    except (TypeError, NotImplementedError, AttributeError):
        return None


def check_train_dataloader(dataloader: Any, dataset: Any, args: Any) -> None:
    """Raise ``ValueError`` when ``dataloader`` (built from ``dataset``) has a length of 0 batches."""
    batches = _length(dataloader)
    if batches is None or batches > 0:
        return
    examples = _length(dataset)
    name = type(dataset).__name__
    if not examples:
        raise ValueError(
            f"`Trainer(train_dataset=...)` is empty: len(train_dataset) == 0 ({name}). There is nothing to "
            "train on; pass a dataset with at least one example."
        )
    if not getattr(args, "dataloader_drop_last", False):
        raise ValueError(
            f"`Trainer(train_dataset=...)` has {examples} examples ({name}), but the training dataloader "
            "has length 0: there is no batch to train on."
        )
    raise ValueError(
        f"`Trainer(train_dataset=...)` has {examples} examples ({name}), fewer than one batch of "
        f"`per_device_train_batch_size={args.per_device_train_batch_size}` per process, and "
        "`TrainingArguments(dataloader_drop_last=True)` drops the incomplete batch: the training "
        "dataloader yields no batch. Lower the batch size or set dataloader_drop_last=False."
    )


def no_batch_error(dataset: Any, args: Any) -> ValueError:
    """The error for a training stream that ended before its first complete batch (no step happened)."""
    name = type(dataset).__name__
    drop = bool(getattr(args, "dataloader_drop_last", False))
    why = (
        f"it holds fewer examples than one batch of `per_device_train_batch_size={args.per_device_train_batch_size}` "
        "per process, and `dataloader_drop_last=True` drops that incomplete batch"
        if drop
        else "it is empty (`dataloader_drop_last=False`)"
    )
    return ValueError(
        f"`Trainer(train_dataset=...)` ({name}) yielded no batch, so not one of the `max_steps={args.max_steps}` "
        f"steps ran: {why}. There is nothing to train on; pass a stream with at least one batch"
        + (" or set dataloader_drop_last=False." if drop else ".")
    )
