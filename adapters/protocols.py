"""The engine boundary, typed: what the adapters may call on the facade, and what a loop driver offers.

The adapters never import the facade (``hf_lightning.trainer``); they receive it and type it with
these ``Protocol``s. Every name here is public: no adapter reaches into a facade's private state.

- :class:`TrainerFacade` is what ``run_fit``, the loop driver, the JIT checkpoint callback and the
  search backends use of an ``hf_lightning.Trainer``, with its parts :class:`TrainingRunPart`
  (the bookkeeping of one ``train()`` call), :class:`CheckpointPart` and :class:`SearchPart`.
- :class:`LoopDriver` is what ``HFModule`` calls at each point of the Lightning loop
  (``StandaloneDriver`` for a plain Lightning fit, ``TrainLoopDriver`` for the Trainer).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import torch
from torch import nn

from hf_lightning.callbacks import CallbackHandler, TrainerControl, TrainerState

__all__ = ["CheckpointPart", "LoopDriver", "SearchPart", "TrainerFacade", "TrainingRunPart"]


class TrainingRunPart(Protocol):
    """The state of one ``train()`` call, as the loop driver moves it forward."""

    trial: Any
    start_time: float
    state: TrainerState
    control: TrainerControl
    deepspeed: Any
    current_gradient_accumulation_steps: int
    window_items: Any
    """``num_items_in_batch`` of the current step's window (None when the model's loss counts none)."""

    def start(self) -> None:
        """The loop begins: start the clock."""

    def evaluate_on_start(self) -> None:
        """``eval_on_start``: evaluate before the first step."""

    def on_resume_point(self, where: str, skipping: bool = False) -> None:
        """``where`` is "epoch" (each epoch begin) or "step" (each step begin): restore a resumed run's RNG."""

    def train_micro_batch(self, model: nn.Module, inputs: Any, num_items_in_batch: Any) -> torch.Tensor:
        """Train one micro-batch (``Trainer.training_step``) and count it: its loss, FLOPs and input tokens."""

    def after_optimizer_step(self, grad_norm: float | None) -> None:
        """After each optimizer step, before ``on_step_end``: the first non-finite weight is reported."""

    def log_save_evaluate(self, grad_norm: float | None, epoch: float, learning_rate: float | None) -> None:
        """After a step or an epoch: log, evaluate and save as ``control`` asks."""

    def empty_epoch(self) -> None:
        """An epoch yielded no batch: raise when no step of this run happened yet, else warn (training stops)."""


class CheckpointPart(Protocol):
    """The facade's checkpoint policy, as the JIT checkpoint callback uses it."""

    last_save_seconds: float | None

    def save_jit_checkpoint(self, trial: Any = None) -> str | None:
        """Save the state after the last completed step and stop; None when the step was just saved."""


class SearchPart(Protocol):
    """The facade's hyperparameter search, as a backend drives it."""

    base_args: Any

    @property
    def world_size(self) -> int:
        """Processes taking part in training."""

    @property
    def n_gpu(self) -> int:
        """GPUs this process drives."""

    @property
    def evaluates_during_training(self) -> bool:
        """Whether the arguments evaluate during training (``eval_strategy`` is not ``"no"``)."""

    def run_trial(self, trial: Any, resume_from_checkpoint: str | None = None) -> tuple[Any, dict | None]:
        """Train one trial; (objective, final metrics or None)."""

    def clone(self, picklable: bool = False, args: Any = None) -> TrainerFacade:
        """A fresh trainer for one more trial, built as this one was (with ``args`` when given)."""

    def save_tune_checkpoint(self, checkpoint_dir: str) -> str:
        """Write ``checkpoint_dir/checkpoint-{global_step}``; returns the folder."""


class TrainerFacade(Protocol):
    """The public surface of ``hf_lightning.Trainer`` the engine adapters rely on."""

    args: Any  # TrainingArguments
    model: nn.Module
    optimizer: Any
    lr_scheduler: Any
    compute_loss_func: Callable[..., Any] | None
    loss_shifts_labels: bool | None
    callback_handler: CallbackHandler
    state: TrainerState
    control: TrainerControl
    accelerator: Any  # adapters.accelerator.LightningAccelerator
    deepspeed: Any  # the DeepSpeed engine while training under DeepSpeed (transformers' name)
    current_gradient_accumulation_steps: int
    hp_space: Callable[[Any], dict[str, Any]]
    jit_kill_wait: float
    run: TrainingRunPart
    checkpoints: CheckpointPart
    search: SearchPart

    def get_batch_samples(self, epoch_iterator: Any, num_batches: int, device: Any) -> tuple[list, Any]:
        """Up to ``num_batches`` micro-batches from ``epoch_iterator`` and their ``num_items_in_batch``."""

    def _get_learning_rate(self) -> float:
        """The learning rate to log for the update just made (overridable, as in transformers)."""

    def training_step(
        self, model: nn.Module, inputs: dict[str, Any], num_items_in_batch: Any = None
    ) -> torch.Tensor:
        """Forward and backward of one micro-batch; the detached loss."""


class LoopDriver(Protocol):
    """What ``HFModule`` calls at each point of the Lightning loop (see ``adapters/module.py``)."""

    def bind(self, module: Any) -> None:
        """Attach the ``HFModule`` being fitted."""

    def training_step(self, model: nn.Module, inputs: Any, num_items_in_batch: Any) -> torch.Tensor:
        """Forward and backward of one micro-batch; returns the detached loss."""

    def batch_samples(self, window: list) -> tuple[list, Any] | None:
        """A window's micro-batches and ``num_items_in_batch`` as given by someone else (a ``Trainer`` subclass's
        ``get_batch_samples``), or None: ``HFModule`` counts the items of the window it got."""

    def on_train_begin(self) -> None: ...
    def on_epoch_begin(self) -> None: ...
    def on_step_begin(self) -> None: ...
    def on_micro_batch_end(self, inputs: Any, loss: torch.Tensor) -> None: ...
    def on_substep_end(self) -> None: ...
    def on_pre_optimizer_step(self) -> None: ...
    def on_optimizer_step(self) -> None: ...
    def on_step_end(self, grad_norm: float | None, learning_rate: float) -> None: ...
    def should_stop_epoch(self) -> bool: ...
    def on_epoch_end(self) -> None: ...
    def on_train_end(self) -> None: ...
