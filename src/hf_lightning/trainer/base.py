"""What every Trainer mixin may rely on: the attributes ``Trainer.__init__`` sets, declared once.

``Trainer`` is composed of one mixin per group of methods (training, optimizers, data, logging,
evaluation, checkpoints, hyperparameter search). Each mixin reads state that the constructor
creates and calls methods that another mixin defines; this base declares that shared surface for
readers and type checkers. It adds no behaviour.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch.utils.hooks import RemovableHandle

    from hf_lightning.trainer_utils_memory import TrainerMemoryTracker

__all__ = ["TrainerBase"]


class TrainerBase:
    """The attributes shared by the Trainer's mixins (set in ``Trainer.__init__`` and ``train``)."""

    args: Any  # TrainingArguments
    model: Any  # torch.nn.Module
    model_wrapped: Any
    model_init: Callable[..., Any] | None
    processing_class: Any
    data_collator: Callable[..., Any]
    train_dataset: Any
    eval_dataset: Any
    compute_loss_func: Callable[..., Any] | None
    compute_metrics: Callable[..., Any] | None
    preprocess_logits_for_metrics: Callable[..., Any] | None
    optimizer: Any
    lr_scheduler: Any
    optimizer_cls_and_kwargs: Any
    callback_handler: Any  # CallbackHandler
    state: Any  # TrainerState
    control: Any  # TrainerControl
    accelerator: Any  # adapters.accelerator.LightningAccelerator
    label_names: list[str]
    model_accepts_loss_kwargs: bool
    loss_shifts_labels: bool
    current_flos: float
    is_in_train: bool
    hp_name: Callable[..., str] | None
    hp_search_backend: Any
    _tr_loss: Any  # torch.Tensor: the training loss summed since the last log
    _total_loss_scalar: float
    _globalstep_last_logged: int
    _initial_global_step: int
    _initial_num_input_tokens_seen: int
    _train_batch_size: int
    _created_lr_scheduler: bool
    _signature_columns: list[str] | None  # the model's forward arguments, found on first use
    _memory_tracker: TrainerMemoryTracker
    _neftune_handle: RemovableHandle | None
    _resume_checkpoint: str | None  # set while resuming from a checkpoint
    _resume_rng_pending: str | None  # 'epoch' or 'step': where the checkpoint's RNG state is restored
    _resume_for_state: Any  # TrainerState of the run being resumed

    if TYPE_CHECKING:
        # Methods a mixin calls on another mixin (or on Trainer itself) resolve on the composed class.
        def __getattr__(self, name: str) -> Any: ...
