"""Trainer utilities of the HF vocabulary: output tuples, seeding, checkpoint discovery, metric helpers.

Names and behaviour follow ``transformers.trainer_utils`` 5.24, with one documented difference:
`get_last_checkpoint` skips ``checkpoint-N`` folders that still hold ``checkpoint-is-incomplete.txt``
(a save that was interrupted) and logs which it skipped. The memory tracker and the batch-size finder
live in ``trainer_utils_memory`` and are re-exported here; the strategy enums are re-exported from
``hf_lightning.args.enums``.
"""

from __future__ import annotations

import copy
import functools
import importlib
import inspect
import os
import random
import time
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import numpy as np
import torch

from hf_lightning.trainer_utils_memory import TrainerMemoryTracker, find_executable_batch_size
from hf_lightning.utils.logging import get_logger

if TYPE_CHECKING:
    from hf_lightning.args.enums import (
        FSDPOption,
        HPSearchBackend,
        HubStrategy,
        IntervalStrategy,
        SaveStrategy,
        SchedulerType,
    )
    from hf_lightning.checkpoint.sorting import rotate_checkpoints, sort_checkpoints
    from hf_lightning.data import RemoveColumnsCollator

__all__ = [
    "BestRun",
    "EvalLoopOutput",
    "EvalPrediction",
    "FSDPOption",
    "HPSearchBackend",
    "HubStrategy",
    "INCOMPLETE_CHECKPOINT_MARKER",
    "IntervalStrategy",
    "PREFIX_CHECKPOINT_DIR",
    "PredictionOutput",
    "RemoveColumnsCollator",
    "SaveStrategy",
    "SchedulerType",
    "TrainOutput",
    "TrainerMemoryTracker",
    "default_compute_objective",
    "denumpify_detensorize",
    "enable_full_determinism",
    "find_executable_batch_size",
    "get_last_checkpoint",
    "get_model_param_count",
    "has_length",
    "is_main_process",
    "number_of_arguments",
    "rotate_checkpoints",
    "seed_worker",
    "set_seed",
    "sort_checkpoints",
    "speed_metrics",
    "total_processes_number",
]

logger = get_logger(__name__)

PREFIX_CHECKPOINT_DIR = "checkpoint"
#: A checkpoint folder holding this file was not completely written (the save was interrupted).
INCOMPLETE_CHECKPOINT_MARKER = "checkpoint-is-incomplete.txt"
#: names transformers.trainer_utils also exposes, re-exported on first use: name -> home module
_REEXPORTS = {
    **dict.fromkeys(
        ("IntervalStrategy", "SaveStrategy", "SchedulerType", "HubStrategy", "FSDPOption", "HPSearchBackend"),
        "hf_lightning.args.enums",
    ),
    "RemoveColumnsCollator": "hf_lightning.data",
    **dict.fromkeys(("rotate_checkpoints", "sort_checkpoints"), "hf_lightning.checkpoint.sorting"),
}


# --- Outputs ---


class EvalPrediction:
    """What ``compute_metrics`` receives: predictions and labels, plus inputs and losses when requested.

    It unpacks like a tuple of the fields that are present: ``predictions, labels = eval_pred`` without
    inputs and losses, ``predictions, labels, inputs = eval_pred`` with inputs (``include_for_metrics``).
    """

    def __init__(self, predictions, label_ids, inputs=None, losses=None):
        self.predictions = predictions
        self.label_ids = label_ids
        self.inputs = inputs
        self.losses = losses
        elements = [predictions, label_ids]
        elements += [x for x in (inputs, losses) if x is not None]
        self.elements = tuple(elements)

    def __iter__(self):
        return iter(self.elements)

    def __getitem__(self, idx: int):
        if idx < 0 or idx >= len(self.elements):
            raise IndexError("tuple index out of range")
        return self.elements[idx]

    def __len__(self) -> int:
        return len(self.elements)


class EvalLoopOutput(NamedTuple):
    """What the evaluation loop returns."""

    predictions: Any
    label_ids: Any
    metrics: dict[str, float] | None
    num_samples: int | None


class PredictionOutput(NamedTuple):
    """What ``Trainer.predict`` returns."""

    predictions: Any
    label_ids: Any
    metrics: dict[str, float] | None


class TrainOutput(NamedTuple):
    """What ``Trainer.train`` returns."""

    global_step: int
    training_loss: float
    metrics: dict[str, float]


class BestRun(NamedTuple):
    """The best trial of ``hyperparameter_search``: its id (checkpoints in ``run-{run_id}``), objective,
    hyperparameters and, for Ray, the experiment analysis."""

    run_id: str
    objective: float | list[float]
    hyperparameters: dict[str, Any]
    run_summary: Any | None = None


# --- Seeding ---


def set_seed(seed: int, deterministic: bool = False) -> None:
    """Seed ``random``, NumPy and torch (every device); with ``deterministic``, also ask torch for
    deterministic algorithms."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)  # a no-op without CUDA
    if deterministic:
        torch.use_deterministic_algorithms(True)


def enable_full_determinism(seed: int, warn_only: bool = False) -> None:
    """`set_seed`, then make torch deterministic: deterministic algorithms (``warn_only`` warns instead of
    raising on an op without one), deterministic cuDNN without benchmarking, and the environment variables
    CUDA, cuBLAS, Ascend and flash-attention need for it."""
    set_seed(seed)
    os.environ["CUDA_LAUNCH_BLOCKING"] = "1"
    os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":16:8"
    os.environ["ASCEND_LAUNCH_BLOCKING"] = "1"
    os.environ["HCCL_DETERMINISTIC"] = "1"
    os.environ["FLASH_ATTENTION_DETERMINISTIC"] = "1"
    torch.use_deterministic_algorithms(True, warn_only=warn_only)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False


def seed_worker(worker_id: int, num_workers: int, rank: int) -> None:
    """``worker_init_fn`` for data loaders: seed a worker from torch's initial seed, its rank and the worker
    count, as transformers does."""
    init_seed = torch.initial_seed() % 2**32
    set_seed(num_workers * rank + init_seed)


# --- Checkpoints ---


def get_last_checkpoint(folder: str | os.PathLike) -> str | None:
    """The newest complete ``checkpoint-N`` folder in ``folder``, or None if there is none.

    Unlike transformers (which takes the highest N regardless), folders that are incomplete — still
    holding ``checkpoint-is-incomplete.txt`` from an interrupted save, or missing the weights or
    ``trainer_state.json`` — are skipped, and a warning names each one and why.
    """
    from hf_lightning.checkpoint.store import find_resumable_checkpoint

    return find_resumable_checkpoint(folder, logger)


# --- Metrics ---


def speed_metrics(
    split: str,
    start_time: float,
    num_samples: int | None = None,
    num_steps: int | None = None,
    num_tokens: int | None = None,
) -> dict[str, float]:
    """``{split}_runtime`` since ``start_time`` (``time.time()``) and, for each count given, its rate:
    ``{split}_samples_per_second``, ``{split}_steps_per_second``, ``{split}_tokens_per_second``."""
    runtime = time.time() - start_time
    result = {f"{split}_runtime": round(runtime, 4)}
    if runtime == 0:
        return result
    for kind, count in (("samples", num_samples), ("steps", num_steps), ("tokens", num_tokens)):
        if count is not None:
            result[f"{split}_{kind}_per_second"] = round(count / runtime, 3)
    return result


def denumpify_detensorize(metrics: Any) -> Any:
    """Turn NumPy scalars and one-element tensors into Python numbers, inside lists, tuples and dicts too."""
    if isinstance(metrics, (list, tuple)):
        return type(metrics)(denumpify_detensorize(m) for m in metrics)
    if isinstance(metrics, dict):
        return type(metrics)({k: denumpify_detensorize(v) for k, v in metrics.items()})
    if isinstance(metrics, np.generic):
        return metrics.item()
    if isinstance(metrics, torch.Tensor) and metrics.numel() == 1:
        return metrics.item()
    return metrics


def default_compute_objective(metrics: dict[str, float]) -> float:
    """The objective of a hyperparameter search: the evaluation loss if there are no other metrics, else the
    sum of the metrics (without ``epoch``, ``*_runtime`` and ``*_per_second``)."""
    metrics = copy.deepcopy(metrics)
    loss = metrics.pop("eval_loss", None)
    metrics.pop("epoch", None)
    for name in [m for m in metrics if m.endswith("_runtime") or m.endswith("_per_second")]:
        metrics.pop(name)
    # transformers' annotation: the loss is None only when there are no metrics at all
    return cast(float, loss) if len(metrics) == 0 else sum(metrics.values())


# --- Introspection ---


def has_length(dataset: Any) -> bool:
    """Whether ``len(dataset)`` works (iterable datasets and some streaming datasets do not have one)."""
    try:
        return len(dataset) is not None
    except (TypeError, AttributeError):
        return False


def number_of_arguments(func: Any) -> int:
    """How many parameters ``func`` takes; for a ``functools.partial``, those not already bound."""
    if isinstance(func, functools.partial):
        total = len(inspect.signature(func.func).parameters)
        return total - len(func.args) - len(func.keywords)
    return len(inspect.signature(func).parameters)


_MODE_ONLY_TRAIN: dict[type, bool] = {}


def _train_sets_mode_only(cls: type) -> bool:
    """Whether ``cls.train(True)`` only sets the ``training`` flags when they are already set.

    True for ``nn.Module.train`` and transformers' ``PreTrainedModel.train`` (which re-applies its
    kernels only when the mode changes); an override anywhere else may do more, so it is always called.
    """
    known = _MODE_ONLY_TRAIN.get(cls)
    if known is None:
        train = cast(Any, cls).train
        known = train is torch.nn.Module.train or (
            train.__qualname__ == "PreTrainedModel.train" and train.__module__.startswith("transformers.")
        )
        _MODE_ONLY_TRAIN[cls] = known
    return known


def ensure_training_mode(model: torch.nn.Module) -> None:
    """``model.train()``, skipped when every submodule is already training and ``train`` would do nothing else.

    transformers puts the model in training mode before every micro-batch; the call walks the tree
    and sets a flag on every submodule (~150 us on a small GPT-2). Reading the flags is a few times
    cheaper, and a submodule left in eval mode (or a custom ``train``) still gets the real call.
    """
    # A plain walk over ``_modules``: ``model.modules()`` builds every submodule's dotted name.
    stack: list[Any] = [model]
    pop, push = stack.pop, stack.extend
    while stack:
        module = pop()
        if module is None:  # a registered ``None`` submodule
            continue
        if not module.training or not (
            _MODE_ONLY_TRAIN.get(type(module)) or _train_sets_mode_only(type(module))
        ):
            model.train()
            return
        push(module._modules.values())


def get_model_param_count(model: torch.nn.Module, trainable_only: bool = False) -> int:
    """Number of parameters of ``model`` (only those requiring grad with ``trainable_only``); a DeepSpeed
    ZeRO-3 partitioned parameter counts its full size (``ds_numel``)."""
    return sum(
        getattr(p, "ds_numel", None) or p.numel()
        for p in model.parameters()
        if not trainable_only or p.requires_grad
    )


def is_main_process(local_rank: int) -> bool:
    """Whether ``local_rank`` (-1: not distributed) is the main process of its node."""
    return local_rank in (-1, 0)


def total_processes_number(local_rank: int) -> int:
    """The processes training together: the process group's size when ``local_rank`` is set (not -1), else 1."""
    if local_rank != -1 and torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_world_size()
    return 1


def __getattr__(name: str) -> Any:
    """Re-export the strategy and search-backend enums (``hf_lightning.args.enums``), ``RemoveColumnsCollator``
    and the checkpoint sorting and rotation (``hf_lightning.checkpoint.sorting``) on first use."""
    home = _REEXPORTS.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        module = importlib.import_module(home)
    except ModuleNotFoundError as error:
        if error.name != home:
            raise
        raise AttributeError(f"{name} is defined in {home}, which is not installed") from error
    value = getattr(module, name)
    globals()[name] = value
    return value
