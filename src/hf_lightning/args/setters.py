"""The grouped ``set_*`` helpers of `TrainingArguments`; each sets a family of fields and returns ``self``.

Signatures and defaults are transformers'. Like there, a helper does not re-run ``__post_init__``.
Each function takes the arguments as ``self`` and is bound as a method in the body of
`TrainingArguments` (``set_training = setters.set_training``).
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

from hf_lightning.args.enums import (
    ChoiceEnum,
    HubStrategy,
    IntervalStrategy,
    OptimizerNames,
    SaveStrategy,
    SchedulerType,
)

if TYPE_CHECKING:
    from hf_lightning.args.training_args import TrainingArguments

__all__ = [
    "set_dataloader",
    "set_evaluate",
    "set_logging",
    "set_lr_scheduler",
    "set_optimizer",
    "set_push_to_hub",
    "set_save",
    "set_testing",
    "set_training",
]


def _choice(owner: Any, method: str, param: str, enum: type[ChoiceEnum], value: Any) -> Any:
    """``enum(value)``, or a ValueError naming the helper, the parameter and the allowed values."""
    if value not in enum.values():
        raise ValueError(
            f"`{type(owner).__name__}.{method}({param}={value!r})` is not supported; "
            f"choose one of: {', '.join(enum.values())}"
        )
    return enum(value)


def _positive_steps(owner: Any, method: str, strategy: Any, steps: float) -> None:
    if strategy == "steps" and steps == 0:
        raise ValueError(f"`{type(owner).__name__}.{method}(strategy='steps', steps=0)` needs `steps` > 0")


def set_training(
    self: TrainingArguments,
    learning_rate: float = 5e-5,
    batch_size: int = 8,
    weight_decay: float = 0,
    num_epochs: float = 3,
    max_steps: int = -1,
    gradient_accumulation_steps: int = 1,
    seed: int = 42,
    activation_checkpointing: bool = False,
    gradient_checkpointing: bool | None = None,
) -> TrainingArguments:
    """Set the basic training settings and ``do_train=True``."""
    self.do_train = True
    self.learning_rate = learning_rate
    self.per_device_train_batch_size = batch_size
    self.weight_decay = weight_decay
    self.num_train_epochs = num_epochs
    self.max_steps = max_steps
    self.gradient_accumulation_steps = gradient_accumulation_steps
    self.seed = seed
    if gradient_checkpointing is not None:
        warnings.warn(
            "`gradient_checkpointing` is deprecated and will be removed in v6. Use `activation_checkpointing` instead.",
            FutureWarning,
            stacklevel=2,
        )
        activation_checkpointing = gradient_checkpointing
    self.activation_checkpointing = self.gradient_checkpointing = activation_checkpointing
    return self


def set_evaluate(
    self: TrainingArguments,
    strategy: str | IntervalStrategy = "no",
    steps: int = 500,
    batch_size: int = 8,
    accumulation_steps: int | None = None,
    delay: float | None = None,
    loss_only: bool = False,
) -> TrainingArguments:
    """Set the evaluation settings; a strategy other than ``"no"`` sets ``do_eval=True``."""
    self.eval_strategy = _choice(self, "set_evaluate", "strategy", IntervalStrategy, strategy)
    _positive_steps(self, "set_evaluate", self.eval_strategy, steps)
    self.do_eval = self.eval_strategy != IntervalStrategy.NO
    self.eval_steps = steps
    self.per_device_eval_batch_size = batch_size
    self.eval_accumulation_steps = accumulation_steps
    self.eval_delay = delay  # type: ignore[assignment]  # stored as given (None too), as in transformers
    self.prediction_loss_only = loss_only
    return self


def set_testing(self: TrainingArguments, batch_size: int = 8, loss_only: bool = False) -> TrainingArguments:
    """Set the prediction settings and ``do_predict=True``."""
    self.do_predict = True
    self.per_device_eval_batch_size = batch_size
    self.prediction_loss_only = loss_only
    return self


def set_save(
    self: TrainingArguments,
    strategy: str | IntervalStrategy = "steps",
    steps: int = 500,
    total_limit: int | None = None,
    on_each_node: bool = False,
) -> TrainingArguments:
    """Set the checkpoint-saving settings."""
    self.save_strategy = _choice(self, "set_save", "strategy", SaveStrategy, strategy)
    _positive_steps(self, "set_save", self.save_strategy, steps)
    self.save_steps = steps
    self.save_total_limit = total_limit
    self.save_on_each_node = on_each_node
    return self


def set_logging(
    self: TrainingArguments,
    strategy: str | IntervalStrategy = "steps",
    steps: int = 500,
    report_to: str | list[str] = "none",
    level: str = "passive",
    first_step: bool = False,
    nan_inf_filter: bool = False,
    on_each_node: bool = False,
    replica_level: str = "passive",
) -> TrainingArguments:
    """Set the logging settings (``report_to`` is stored as given, as in transformers)."""
    self.logging_strategy = _choice(self, "set_logging", "strategy", IntervalStrategy, strategy)
    _positive_steps(self, "set_logging", self.logging_strategy, steps)
    self.logging_steps = steps
    self.report_to = report_to
    self.log_level = level
    self.logging_first_step = first_step
    self.logging_nan_inf_filter = nan_inf_filter
    self.log_on_each_node = on_each_node
    self.log_level_replica = replica_level
    return self


def set_push_to_hub(
    self: TrainingArguments,
    model_id: str,
    strategy: str | HubStrategy = "every_save",
    token: str | None = None,
    private_repo: bool | None = None,
    always_push: bool = False,
    revision: str | None = None,
) -> TrainingArguments:
    """Set the Hub settings and ``push_to_hub=True``."""
    self.push_to_hub = True
    self.hub_model_id = model_id
    self.hub_strategy = _choice(self, "set_push_to_hub", "strategy", HubStrategy, strategy)
    self.hub_token = token
    self.hub_private_repo = private_repo
    self.hub_always_push = always_push
    self.hub_revision = revision
    return self


def set_optimizer(
    self: TrainingArguments,
    name: str | OptimizerNames = "adamw_torch",
    learning_rate: float = 5e-5,
    weight_decay: float = 0,
    beta1: float = 0.9,
    beta2: float = 0.999,
    epsilon: float = 1e-8,
    args: str | None = None,
) -> TrainingArguments:
    """Set the optimizer and its hyperparameters."""
    self.optim = _choice(self, "set_optimizer", "name", OptimizerNames, name)
    self.learning_rate = learning_rate
    self.weight_decay = weight_decay
    self.adam_beta1 = beta1
    self.adam_beta2 = beta2
    self.adam_epsilon = epsilon
    self.optim_args = args
    return self


def set_lr_scheduler(
    self: TrainingArguments,
    name: str | SchedulerType = "linear",
    num_epochs: float = 3.0,
    max_steps: int = -1,
    warmup_steps: float = 0,
) -> TrainingArguments:
    """Set the learning-rate schedule, the training length and the warmup."""
    self.lr_scheduler_type = _choice(self, "set_lr_scheduler", "name", SchedulerType, name)
    self.num_train_epochs = num_epochs
    self.max_steps = max_steps
    self.warmup_steps = warmup_steps
    return self


def set_dataloader(
    self: TrainingArguments,
    train_batch_size: int = 8,
    eval_batch_size: int = 8,
    drop_last: bool = False,
    num_workers: int = 0,
    pin_memory: bool = True,
    persistent_workers: bool = False,
    prefetch_factor: int | None = None,
    multiprocessing_context: str | None = None,
    in_order: bool = True,
    auto_find_batch_size: bool = False,
    ignore_data_skip: bool = False,
    sampler_seed: int | None = None,
) -> TrainingArguments:
    """Set the batch sizes and every data-loader setting."""
    self.per_device_train_batch_size = train_batch_size
    self.per_device_eval_batch_size = eval_batch_size
    self.dataloader_drop_last = drop_last
    self.dataloader_num_workers = num_workers
    self.dataloader_pin_memory = pin_memory
    self.dataloader_persistent_workers = persistent_workers
    self.dataloader_prefetch_factor = prefetch_factor
    self.dataloader_multiprocessing_context = multiprocessing_context
    self.dataloader_in_order = in_order
    self.auto_find_batch_size = auto_find_batch_size
    self.ignore_data_skip = ignore_data_skip
    self.data_seed = sampler_seed
    return self
