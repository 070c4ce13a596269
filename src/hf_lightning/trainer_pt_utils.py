"""``transformers.trainer_pt_utils``'s path, for the names of it hf_lightning implements.

Homes: the evaluation helpers in :mod:`hf_lightning.eval_utils`, ``LabelSmoother`` in :mod:`hf_lightning.loss`,
the samplers in ``hf_lightning.adapters.samplers`` (loaded on first use, as this module only re-exports them).
Our ``BatchRebalanceSampler`` is not here: it balances by another rule and takes other arguments than
transformers' class of that name (``docs/data.md``); it is ``hf_lightning.adapters.BatchRebalanceSampler``.
transformers' ``log_metrics``, ``save_metrics``, ``save_state``, ``metrics_format``, ``get_learning_rates``,
``get_num_trainable_parameters`` and ``get_optimizer_group`` there are Trainer methods in disguise (they take
the Trainer): they are ``Trainer`` methods here.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from hf_lightning.eval_utils import (
    find_batch_size,
    nested_concat,
    nested_detach,
    nested_numpify,
    nested_truncate,
)
from hf_lightning.loss import LabelSmoother
from hf_lightning.optim import LayerWiseDummyOptimizer, LayerWiseDummyScheduler
from hf_lightning.trainer_utils import get_model_param_count

if TYPE_CHECKING:
    from hf_lightning.adapters.samplers import (
        DistributedLengthGroupedSampler,
        LengthGroupedSampler,
    )

__all__ = [
    "DistributedLengthGroupedSampler",
    "LabelSmoother",
    "LayerWiseDummyOptimizer",
    "LayerWiseDummyScheduler",
    "LengthGroupedSampler",
    "find_batch_size",
    "get_length_grouped_indices",
    "get_model_param_count",
    "nested_concat",
    "nested_detach",
    "nested_numpify",
    "nested_truncate",
]

_SAMPLERS = ("DistributedLengthGroupedSampler", "LengthGroupedSampler")


def get_length_grouped_indices(
    lengths: Sequence[int], batch_size: int, mega_batch_mult: int | None = None, generator: Any = None
) -> list[int]:
    """transformers' order of ``group_by_length``: shuffled, megabatches sorted longest first, the longest
    sample of all at the front (``LengthGroupedSampler``'s order)."""
    samplers = importlib.import_module("hf_lightning.adapters.samplers")
    return list(samplers.length_grouped_indices(lengths, batch_size, mega_batch_mult, generator))


def __getattr__(name: str) -> Any:
    if name in _SAMPLERS:
        value = getattr(importlib.import_module("hf_lightning.adapters.samplers"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'hf_lightning.trainer_pt_utils' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
