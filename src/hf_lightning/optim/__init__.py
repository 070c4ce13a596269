"""Optimizers, parameter groups and learning-rate schedulers, with transformers' names and numbers.

Plain torch: transformers is not needed at run time. The Trainer facade and the Lightning module use
:func:`create_optimizer` (or :func:`get_optimizer_cls_and_kwargs`) and :func:`get_scheduler`.
"""

from __future__ import annotations

from hf_lightning.optim.adafactor import Adafactor, AdafactorSchedule, get_adafactor_schedule
from hf_lightning.optim.factory import OptimizerFactory
from hf_lightning.optim.greedy import GreedyLR
from hf_lightning.optim.layerwise import LayerWiseDummyOptimizer, LayerWiseDummyScheduler
from hf_lightning.optim.optimizers import (
    PACKAGE_OPTIMIZERS,
    SUPPORTED_OPTIMIZERS,
    create_optimizer,
    current_learning_rate,
    get_decay_parameter_names,
    get_learning_rates,
    get_optimizer_cls_and_kwargs,
    parse_optim_args,
)
from hf_lightning.optim.schedulers import (
    METRIC_DRIVEN_SCHEDULERS,
    SCHEDULER_NAMES,
    get_constant_schedule,
    get_constant_schedule_with_warmup,
    get_cosine_schedule_with_warmup,
    get_cosine_with_hard_restarts_schedule_with_warmup,
    get_cosine_with_min_lr_schedule_with_warmup,
    get_cosine_with_min_lr_schedule_with_warmup_lr_rate,
    get_greedy_schedule,
    get_inverse_sqrt_schedule,
    get_linear_schedule_with_warmup,
    get_polynomial_decay_schedule_with_warmup,
    get_reduce_on_plateau_schedule,
    get_scheduler,
    get_trainer_scheduler,
    get_wsd_schedule,
    steps_on_metric,
    steps_per_update,
)

__all__ = [
    "METRIC_DRIVEN_SCHEDULERS",
    "SCHEDULER_NAMES",
    "PACKAGE_OPTIMIZERS",
    "SUPPORTED_OPTIMIZERS",
    "Adafactor",
    "AdafactorSchedule",
    "GreedyLR",
    "LayerWiseDummyOptimizer",
    "LayerWiseDummyScheduler",
    "OptimizerFactory",
    "create_optimizer",
    "current_learning_rate",
    "get_adafactor_schedule",
    "get_constant_schedule",
    "get_constant_schedule_with_warmup",
    "get_cosine_schedule_with_warmup",
    "get_cosine_with_hard_restarts_schedule_with_warmup",
    "get_cosine_with_min_lr_schedule_with_warmup",
    "get_cosine_with_min_lr_schedule_with_warmup_lr_rate",
    "get_decay_parameter_names",
    "get_greedy_schedule",
    "get_inverse_sqrt_schedule",
    "get_learning_rates",
    "get_linear_schedule_with_warmup",
    "get_optimizer_cls_and_kwargs",
    "get_polynomial_decay_schedule_with_warmup",
    "get_reduce_on_plateau_schedule",
    "get_scheduler",
    "get_trainer_scheduler",
    "get_wsd_schedule",
    "parse_optim_args",
    "steps_on_metric",
    "steps_per_update",
]
