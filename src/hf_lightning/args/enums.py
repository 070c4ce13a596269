"""String enums of the `TrainingArguments` vocabulary, with the same names and values as transformers.

Each enum mixes in ``str`` so ``args.eval_strategy == "steps"`` holds, and an unknown value raises a
``ValueError`` that lists the allowed values.
"""

from __future__ import annotations

import sys
from enum import Enum
from typing import Any

__all__ = [
    "LENGTH_SAMPLING_STRATEGIES",
    "METRIC_DRIVEN_SCHEDULERS",
    "SAMPLING_STRATEGIES",
    "SAVING_STRATEGIES",
    "ChoiceEnum",
    "DebugOption",
    "FSDPOption",
    "HPSearchBackend",
    "HubStrategy",
    "IntervalStrategy",
    "OptimizerNames",
    "ParallelMode",
    "SaveStrategy",
    "SchedulerType",
    "enum_value",
]

LENGTH_SAMPLING_STRATEGIES: tuple[str, ...] = ("group_by_length", "batch_rebalance")
"""The ``train_sampling_strategy`` values that need per-sample lengths."""

SAMPLING_STRATEGIES: tuple[str, ...] = ("random", "sequential", *LENGTH_SAMPLING_STRATEGIES)
"""Values accepted by ``train_sampling_strategy``."""


SAVING_STRATEGIES: tuple[str, ...] = ("steps", "epoch", "best")
"""The ``save_strategy`` values that write checkpoints during training (all but ``"no"``)."""


def enum_value(value: Any) -> Any:
    """The plain value of an enum member (``IntervalStrategy.STEPS`` -> ``"steps"``); anything else unchanged."""
    return value.value if isinstance(value, Enum) else value


class ChoiceEnum(str, Enum):
    """A ``str`` enum whose lookup error lists every allowed value."""

    @classmethod
    def _missing_(cls, value: object) -> ChoiceEnum:
        raise ValueError(f"{value!r} is not a valid {cls.__name__}; choose one of: {', '.join(cls.values())}")

    @classmethod
    def values(cls) -> list[str]:
        """Every allowed value, in declaration order."""
        return [member.value for member in cls]


class IntervalStrategy(ChoiceEnum):
    """When to log or evaluate: never, every ``*_steps`` optimizer steps, or at each epoch end."""

    NO = "no"
    STEPS = "steps"
    EPOCH = "epoch"


class SaveStrategy(ChoiceEnum):
    """When to write a checkpoint; ``"best"`` writes one each time the tracked metric improves."""

    NO = "no"
    STEPS = "steps"
    EPOCH = "epoch"
    BEST = "best"


class HubStrategy(ChoiceEnum):
    """What is pushed to the Hub, and when."""

    END = "end"
    EVERY_SAVE = "every_save"
    CHECKPOINT = "checkpoint"
    ALL_CHECKPOINTS = "all_checkpoints"


class SchedulerType(ChoiceEnum):
    """Names accepted by ``lr_scheduler_type``."""

    LINEAR = "linear"
    COSINE = "cosine"
    COSINE_WITH_RESTARTS = "cosine_with_restarts"
    POLYNOMIAL = "polynomial"
    CONSTANT = "constant"
    CONSTANT_WITH_WARMUP = "constant_with_warmup"
    INVERSE_SQRT = "inverse_sqrt"
    REDUCE_ON_PLATEAU = "reduce_lr_on_plateau"
    COSINE_WITH_MIN_LR = "cosine_with_min_lr"
    COSINE_WARMUP_WITH_MIN_LR = "cosine_warmup_with_min_lr"
    WARMUP_STABLE_DECAY = "warmup_stable_decay"
    GREEDY = "greedy"


METRIC_DRIVEN_SCHEDULERS: tuple[str, ...] = (
    SchedulerType.REDUCE_ON_PLATEAU.value,
    SchedulerType.GREEDY.value,
)
"""The ``lr_scheduler_type`` values stepped with an evaluation metric instead of once per optimizer update."""


class OptimizerNames(ChoiceEnum):
    """Every optimizer name transformers knows; which ones the trainer can build is decided by ``optim``."""

    ADAMW_TORCH = "adamw_torch"
    ADAMW_TORCH_FUSED = "adamw_torch_fused"
    ADAMW_TORCH_XLA = "adamw_torch_xla"
    ADAMW_TORCH_NPU_FUSED = "adamw_torch_npu_fused"
    ADAFACTOR = "adafactor"
    ADAMW_ANYPRECISION = "adamw_anyprecision"
    ADAMW_TORCH_4BIT = "adamw_torch_4bit"
    ADAMW_TORCH_8BIT = "adamw_torch_8bit"
    ADEMAMIX = "ademamix"
    SGD = "sgd"
    ADAGRAD = "adagrad"
    ADAMW_BNB = "adamw_bnb_8bit"
    ADAMW_8BIT = "adamw_8bit"
    ADEMAMIX_8BIT = "ademamix_8bit"
    LION_8BIT = "lion_8bit"
    LION = "lion_32bit"
    PAGED_ADAMW = "paged_adamw_32bit"
    PAGED_ADAMW_8BIT = "paged_adamw_8bit"
    PAGED_ADEMAMIX = "paged_ademamix_32bit"
    PAGED_ADEMAMIX_8BIT = "paged_ademamix_8bit"
    PAGED_LION = "paged_lion_32bit"
    PAGED_LION_8BIT = "paged_lion_8bit"
    RMSPROP = "rmsprop"
    RMSPROP_BNB = "rmsprop_bnb"
    RMSPROP_8BIT = "rmsprop_bnb_8bit"
    RMSPROP_32BIT = "rmsprop_bnb_32bit"
    GALORE_ADAMW = "galore_adamw"
    GALORE_ADAMW_8BIT = "galore_adamw_8bit"
    GALORE_ADAFACTOR = "galore_adafactor"
    GALORE_ADAMW_LAYERWISE = "galore_adamw_layerwise"
    GALORE_ADAMW_8BIT_LAYERWISE = "galore_adamw_8bit_layerwise"
    GALORE_ADAFACTOR_LAYERWISE = "galore_adafactor_layerwise"
    LOMO = "lomo"
    ADALOMO = "adalomo"
    GROKADAMW = "grokadamw"
    SCHEDULE_FREE_RADAM = "schedule_free_radam"
    SCHEDULE_FREE_ADAMW = "schedule_free_adamw"
    SCHEDULE_FREE_SGD = "schedule_free_sgd"
    APOLLO_ADAMW = "apollo_adamw"
    APOLLO_ADAMW_LAYERWISE = "apollo_adamw_layerwise"
    STABLE_ADAMW = "stable_adamw"


class DebugOption(ChoiceEnum):
    """Words accepted by ``debug``."""

    UNDERFLOW_OVERFLOW = "underflow_overflow"
    TPU_METRICS_DEBUG = "tpu_metrics_debug"


class HPSearchBackend(ChoiceEnum):
    """The search engines ``hyperparameter_search`` can run on, in the order it picks a default."""

    OPTUNA = "optuna"
    RAY = "ray"


class FSDPOption(ChoiceEnum):
    """Words of the legacy string form of ``fsdp`` (e.g. ``"full_shard auto_wrap"``)."""

    FULL_SHARD = "full_shard"
    SHARD_GRAD_OP = "shard_grad_op"
    NO_SHARD = "no_shard"
    HYBRID_SHARD = "hybrid_shard"
    HYBRID_SHARD_ZERO2 = "hybrid_shard_zero2"
    OFFLOAD = "offload"
    AUTO_WRAP = "auto_wrap"


class ParallelMode(Enum):
    """How this process takes part in parallel training (``TrainingArguments.parallel_mode``)."""

    NOT_PARALLEL = "not_parallel"
    NOT_DISTRIBUTED = "not_distributed"
    DISTRIBUTED = "distributed"
    SAGEMAKER_MODEL_PARALLEL = "sagemaker_model_parallel"
    SAGEMAKER_DATA_PARALLEL = "sagemaker_data_parallel"
    TPU = "tpu"

    def __eq__(self, other: object) -> bool:
        """Equal to transformers' member of the same value too: its code (``nested_gather``, which TRL calls)
        compares ``args.parallel_mode`` with its own ``ParallelMode.DISTRIBUTED``."""
        if self is other:
            return True
        # transformers' own class, when its module is loaded (no member of it exists otherwise)
        theirs = getattr(sys.modules.get("transformers.training_args"), "ParallelMode", None)
        if isinstance(theirs, type) and isinstance(other, theirs) and isinstance(other, Enum):
            return bool(self.value == other.value)
        return NotImplemented if not isinstance(other, Enum) else False

    __hash__ = Enum.__hash__  # by name, as transformers' members: equal members hash alike
