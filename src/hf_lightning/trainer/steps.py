"""One micro-batch's forward, loss and backward: the Trainer's overridable per-batch methods, and ``BatchSteps``.

``training_step``, ``compute_loss``, ``compute_loss_context_manager``, ``autocast_smart_context_manager`` and
``prepare_inputs`` are methods of ``Trainer`` written here (its class body names them:
``training_step = steps.training_step``), so a micro-batch runs through this file without a forwarding hop;
they keep transformers' signatures, users override them, and ``training_step`` calls the others back through
the Trainer. ``BatchSteps`` (``trainer.steps``) holds what they share: the loss settings of the model,
the label smoother, ``get_batch_samples`` and its count. Whether a loss is already scaled for gradient
accumulation is the one rule of :func:`hf_lightning.loss.loss_is_scaled_for_ga` (``HFModule`` uses it too).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn

from hf_lightning.args.enums import enum_value
from hf_lightning.loss import (
    LabelSmoother,
    LossSettings,
    compute_model_loss,
    loss_is_scaled_for_ga,
)
from hf_lightning.optim.extras import LOMO_OPTIMIZERS
from hf_lightning.trainer_utils import ensure_training_mode

if TYPE_CHECKING:
    from hf_lightning.trainer.trainer import Trainer

__all__ = [
    "BatchSteps",
    "autocast_smart_context_manager",
    "compute_loss",
    "compute_loss_context_manager",
    "prepare_input",
    "prepare_inputs",
    "to_device",
    "training_step",
]


def compute_loss_context_manager(self: Trainer) -> contextlib.ExitStack:
    """``Trainer.compute_loss_context_manager``: the context ``compute_loss`` runs in (the Trainer's
    ``autocast_smart_context_manager``; autocast itself is Lightning's precision plugin's job)."""
    stack = contextlib.ExitStack()
    ctx = self.autocast_smart_context_manager()
    if not isinstance(ctx, contextlib.nullcontext):
        stack.enter_context(ctx)
    return stack


def autocast_smart_context_manager(
    self: Trainer, cache_enabled: bool | None = True
) -> contextlib.AbstractContextManager:
    """``Trainer.autocast_smart_context_manager``: a null context, as Lightning's precision plugin
    already autocasts the training step."""
    return contextlib.nullcontext()


def prepare_input(self: Trainer, data: Any) -> Any:
    """``Trainer._prepare_input``: one tensor, or a nested list / dict of them, on the model's device."""
    return to_device(data, self.accelerator.device, non_blocking=self.accelerator.non_blocking)


def prepare_inputs(self: Trainer, inputs: dict[str, Any]) -> dict[str, Any]:
    """``Trainer._prepare_inputs``: ``inputs`` on the model's device (Lightning has usually moved them), through
    ``_prepare_input`` as in transformers (a subclass's override of it applies)."""
    return self._prepare_input(inputs)


def training_step(
    self: Trainer,
    model: nn.Module,
    inputs: dict[str, Any],
    num_items_in_batch: torch.Tensor | int | None = None,
) -> torch.Tensor:
    """``Trainer.training_step``: forward and backward on one micro-batch; returns the detached loss for logging."""
    ensure_training_mode(model)  # model.train(), without the walk when nothing would change
    switch = getattr(self.optimizer, "train", None)  # schedule-free optimizers: back to train mode
    if callable(switch):
        switch()
    inputs = self._prepare_inputs(inputs)
    with self.compute_loss_context_manager():
        loss = self.compute_loss(model, inputs, num_items_in_batch=num_items_in_batch)
    del inputs
    steps = self.plan.module.torch_empty_cache_steps
    if steps is not None and self.state.global_step % steps == 0 and torch.cuda.is_available():
        torch.cuda.empty_cache()
    scaled = loss_is_scaled_for_ga(
        self.model_accepts_loss_kwargs,
        self.compute_loss_func,
        num_items_in_batch,
        override=self.loss_is_scaled_for_ga,
    )
    if not scaled:
        loss = loss / self.current_gradient_accumulation_steps
    kwargs = {}
    if str(enum_value(self.args.optim)) in LOMO_OPTIMIZERS:  # the optimizer updates during backward
        kwargs["learning_rate"] = self._get_learning_rate()
    self.accelerator.backward(loss, **kwargs)
    return loss.detach()


def compute_loss(
    self: Trainer,
    model: nn.Module,
    inputs: dict[str, Any],
    return_outputs: bool = False,
    num_items_in_batch: torch.Tensor | int | None = None,
) -> Any:
    """``Trainer.compute_loss``: the loss of ``model`` on ``inputs`` (its first output, or ``compute_loss_func``'s
    result)."""
    settings = self.steps.loss_settings(label_smoother=self.label_smoother)
    return compute_model_loss(
        model, inputs, settings, num_items_in_batch=num_items_in_batch, return_outputs=return_outputs
    )


class BatchSteps:
    """What the per-batch methods share: the model's loss settings, the label smoother, ``get_batch_samples``."""

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer

    def loss_settings(self, label_smoother: LabelSmoother | None = None) -> LossSettings:
        """The loss settings of the Trainer's model (its rule is asked of the model at the first batch)."""
        t = self.trainer
        return LossSettings.for_model(
            t.model,
            accepts_loss_kwargs=t.model_accepts_loss_kwargs,
            shift_labels=t.loss_shifts_labels,
            label_smoother=label_smoother,
            compute_loss_func=t.compute_loss_func,
            average_tokens_across_devices=t.plan.module.average_tokens_across_devices,
            # tensor-parallel ranks share a batch: transformers scales by the data-parallel processes only
            world_size=t.accelerator.num_processes // t.get_tp_size(),
        )

    def label_smoother(self) -> LabelSmoother | None:
        """``Trainer.label_smoother``: ``label_smoothing_factor``'s smoother, built at ``Trainer()`` (none, with
        transformers' warning, for a multi-label classification model)."""
        return self.trainer.label_smoother

    def batch_samples(self, epoch_iterator: Any, num_batches: int, device: Any = None) -> tuple[list, Any]:
        """``Trainer.get_batch_samples``: up to ``num_batches`` micro-batches and their target-token count
        (``Trainer._get_num_items_in_batch``). The loop calls it when a subclass overrides either."""
        batches = []
        for _ in range(num_batches):
            try:
                batches.append(next(epoch_iterator))
            except StopIteration:
                break
        return batches, self.trainer._get_num_items_in_batch(batches, device)

    def num_items(self, batch_samples: list, device: Any = None) -> Any:
        """``Trainer._get_num_items_in_batch``: the target tokens of ``batch_samples`` (summed over processes),
        on ``device`` when given; None when the model's loss counts none."""
        t = self.trainer
        processes = t.accelerator.num_processes
        reduce_sum = (lambda count: t.accelerator.reduce(count, "sum")) if processes > 1 else None
        # on ``device`` before the processes sum it (a CPU count cannot be all-reduced over NCCL), as transformers
        return self.loss_settings().step_items(t.model, batch_samples, reduce_sum, device=device)


def to_device(data: Any, device: torch.device, *, non_blocking: bool = False) -> Any:
    """``data`` (nested mappings, lists, tuples of tensors) with every tensor on ``device``
    (``non_blocking``: accelerate's copy from pinned memory, ``accelerator_config``)."""
    if isinstance(data, Mapping):  # dict, or a mapping such as BatchEncoding
        return cast(Any, type(data))(
            {k: to_device(v, device, non_blocking=non_blocking) for k, v in data.items()}
        )
    if isinstance(data, (list, tuple)):
        return type(data)(to_device(v, device, non_blocking=non_blocking) for v in data)
    if isinstance(data, torch.Tensor) and data.device != device:
        return data.to(device, non_blocking=non_blocking)
    return data
