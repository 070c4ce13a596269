"""``transformers.trainer_pt_utils``'s path, for the names of it hf_lightning implements.

Homes: the evaluation helpers (``EvalLoopContainer`` too) in :mod:`hf_lightning.eval_utils`, ``LabelSmoother`` in
:mod:`hf_lightning.loss`, ``get_parameter_names`` in :mod:`hf_lightning.optim.optimizers`, the length-grouped
samplers in ``hf_lightning.adapters.samplers`` (loaded on first use, as this module only re-exports them), the
batch-by-batch shards (``ShardSampler``, ``IterableDatasetShard``, ``DistributedSamplerWithLoop``) in
:mod:`hf_lightning.data.shards`; the two padding helpers are written here.
Our ``BatchRebalanceSampler`` is not here: it balances by another rule and takes other arguments than
transformers' class of that name (``docs/data.md``); it is ``hf_lightning.adapters.BatchRebalanceSampler``.
transformers' ``log_metrics``, ``save_metrics``, ``save_state``, ``metrics_format``, ``get_learning_rates``,
``get_num_trainable_parameters`` and ``get_optimizer_group`` there are Trainer methods in disguise (they take
the Trainer): they are ``Trainer`` methods here.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from hf_lightning.args.normalize import AcceleratorConfig
from hf_lightning.data.shards import DistributedSamplerWithLoop, IterableDatasetShard, ShardSampler
from hf_lightning.eval_utils import (
    EvalLoopContainer,
    find_batch_size,
    nested_concat,
    nested_detach,
    nested_numpify,
    nested_truncate,
    pad_and_concatenate,
)
from hf_lightning.loss import LabelSmoother
from hf_lightning.optim import LayerWiseDummyOptimizer, LayerWiseDummyScheduler
from hf_lightning.optim.optimizers import get_parameter_names
from hf_lightning.trainer_utils import get_model_param_count

if TYPE_CHECKING:
    from hf_lightning.adapters.samplers import (
        DistributedLengthGroupedSampler,
        LengthGroupedSampler,
    )

__all__ = [
    "AcceleratorConfig",
    "DistributedLengthGroupedSampler",
    "DistributedSamplerWithLoop",
    "EvalLoopContainer",
    "IterableDatasetShard",
    "LabelSmoother",
    "LayerWiseDummyOptimizer",
    "LayerWiseDummyScheduler",
    "LengthGroupedSampler",
    "ShardSampler",
    "find_batch_size",
    "get_length_grouped_indices",
    "get_model_param_count",
    "get_parameter_names",
    "nested_concat",
    "nested_detach",
    "nested_numpify",
    "nested_truncate",
    "numpy_pad_and_concatenate",
    "torch_distributed_zero_first",
    "torch_pad_and_concatenate",
]

_SAMPLERS = ("DistributedLengthGroupedSampler", "LengthGroupedSampler")


def get_length_grouped_indices(
    lengths: Sequence[int], batch_size: int, mega_batch_mult: int | None = None, generator: Any = None
) -> list[int]:
    """transformers' order of ``group_by_length``: shuffled, megabatches sorted longest first, the longest
    sample of all at the front (``LengthGroupedSampler``'s order)."""
    samplers = importlib.import_module("hf_lightning.adapters.samplers")
    return list(samplers.length_grouped_indices(lengths, batch_size, mega_batch_mult, generator))


def torch_pad_and_concatenate(tensor1: Any, tensor2: Any, padding_index: int = -100) -> Any:
    """Two tensors (scalars as 1-element) end to end along the first axis, the shorter second axis padded."""
    return pad_and_concatenate(torch.as_tensor(tensor1), torch.as_tensor(tensor2), padding_index)


def numpy_pad_and_concatenate(array1: Any, array2: Any, padding_index: int = -100) -> Any:
    """Two arrays (scalars as 1-element) end to end along the first axis, the shorter second axis padded."""
    return pad_and_concatenate(np.asarray(array1), np.asarray(array2), padding_index)


@contextlib.contextmanager
def torch_distributed_zero_first(local_rank: int) -> Iterator[None]:
    """A block the main process of each node runs first: the others wait at a barrier until it is done
    (``local_rank`` -1: not distributed, no barrier)."""
    if local_rank not in (-1, 0):
        torch.distributed.barrier()
    yield
    if local_rank == 0:
        torch.distributed.barrier()


def __getattr__(name: str) -> Any:
    if name in _SAMPLERS:
        value = getattr(importlib.import_module("hf_lightning.adapters.samplers"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'hf_lightning.trainer_pt_utils' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
