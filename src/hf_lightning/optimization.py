"""``transformers.optimization``'s path: the schedules, ``get_scheduler`` and Adafactor (home: ``hf_lightning.optim``)."""

from __future__ import annotations

from hf_lightning.args.enums import SchedulerType
from hf_lightning.optim import (
    Adafactor,
    AdafactorSchedule,
    GreedyLR,
    LayerWiseDummyOptimizer,
    LayerWiseDummyScheduler,
    get_adafactor_schedule,
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
    get_wsd_schedule,
)
from hf_lightning.optim.greedy import StreamingAverage

__all__ = [
    "Adafactor",
    "AdafactorSchedule",
    "GreedyLR",
    "LayerWiseDummyOptimizer",
    "LayerWiseDummyScheduler",
    "SchedulerType",
    "StreamingAverage",
    "get_adafactor_schedule",
    "get_constant_schedule",
    "get_constant_schedule_with_warmup",
    "get_cosine_schedule_with_warmup",
    "get_cosine_with_hard_restarts_schedule_with_warmup",
    "get_cosine_with_min_lr_schedule_with_warmup",
    "get_cosine_with_min_lr_schedule_with_warmup_lr_rate",
    "get_greedy_schedule",
    "get_inverse_sqrt_schedule",
    "get_linear_schedule_with_warmup",
    "get_polynomial_decay_schedule_with_warmup",
    "get_reduce_on_plateau_schedule",
    "get_scheduler",
    "get_wsd_schedule",
]
