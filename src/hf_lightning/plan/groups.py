"""The plan's step, data and evaluation groups: what ``HFModule``, the data loaders and the evaluation
engine read (and the facade with them, through ``Trainer.plan``).

Each group is a frozen dataclass of values, built from ``TrainingArguments`` by one pure function
of ``hf_lightning.args.translate`` (``module_settings``, ``data_settings``, ``eval_settings``); its
``build_plan`` and the engine's ``to_lightning`` put them in their plans. The consumers read only these
values, never the arguments: where a rule needs them whole (transformers' optimizer of ``args.optim``,
DeepSpeed's ``"auto"`` filling), the group holds a callable made from them when the plan was built
(``OptimizerFactory``, ``DeepSpeedSettings.filler``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import torch

from hf_lightning.args.runtime import sampler_seed

__all__ = ["DataSettings", "EvalSettings", "ModuleSettings"]


@dataclass(frozen=True)
class ModuleSettings:
    """The training-step settings: ``HFModule`` reads these, never the arguments.

    ``logging_nan_inf_filter``, ``include_num_input_tokens_seen``, ``neftune_noise_alpha``,
    ``torch_empty_cache_steps`` and ``activation_checkpointing*`` are not read by ``HFModule``: the
    ``hf_lightning.Trainer`` facade carries them (``docs/arguments.md``); they are listed here so a
    printed plan shows the whole step.
    """

    gradient_accumulation_steps: int
    max_grad_norm: float | None
    """Clip the global gradient norm to this; ``None`` or 0 disables clipping."""
    average_tokens_across_devices: bool
    label_smoothing_factor: float
    logging_nan_inf_filter: bool
    include_num_input_tokens_seen: str
    """``"no"``, ``"all"`` or ``"non_padding"`` (booleans map to ``"all"`` / ``"no"``)."""
    neftune_noise_alpha: float | None
    torch_empty_cache_steps: int | None
    torch_compile: bool
    """On when asked for, or when a backend or mode is given."""
    torch_compile_backend: str | None
    torch_compile_mode: str | None
    activation_checkpointing: bool
    activation_checkpointing_kwargs: Mapping[str, Any] | None
    lr_scheduler_type: str = "linear"
    """The schedule ``HFModule`` builds when it is given no scheduler."""
    lr_scheduler_kwargs: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    warmup_steps: float = 0
    """Warm-up steps (>= 1) or a ratio of the training steps (< 1), as ``TrainingArguments.get_warmup_steps``."""
    optimizer_factory: Callable[[Any], Any] | None = None
    """Builds the optimizer ``HFModule`` uses when it is given none (``hf_lightning.optim.OptimizerFactory``)."""
    saved_arguments: Any = None
    """What a checkpoint of the module records as ``training_args.bin`` / ``.json`` (``plan.arguments.SavedArguments``)."""


@dataclass(frozen=True)
class DataSettings:
    """What the data loaders and samplers need."""

    per_device_train_batch_size: int
    dataloader_drop_last: bool
    dataloader_num_workers: int
    dataloader_pin_memory: bool
    """The argument as given, as transformers passes it (its ``__post_init__`` turns it off with ``use_cpu``)."""
    dataloader_persistent_workers: bool
    dataloader_prefetch_factor: int | None
    dataloader_multiprocessing_context: str | None
    dataloader_in_order: bool
    seed: int
    data_seed: int | None
    train_sampling_strategy: str
    length_column_name: str
    remove_unused_columns: bool
    label_names: tuple[str, ...] | None
    cuda_available: bool = False
    """Whether this machine has a CUDA device: memory is pinned only then (``loader_kwargs``)."""
    parallelism_tp_size: int | None = None
    """``parallelism_config``'s ``tp_size`` (an object's attribute or a dict's key), else ``None``."""

    @property
    def sampler_seed(self) -> int:
        """The seed of the samplers' generator: ``data_seed``, else ``seed`` (``args.runtime.sampler_seed``)."""
        return sampler_seed(self.seed, self.data_seed)

    def loader_kwargs(self) -> dict[str, Any]:
        """``DataLoader`` keyword arguments shared by training and evaluation (no batch size, sampler).

        The worker options (``prefetch_factor``, ``multiprocessing_context``, ``in_order``) are given
        only with workers: torch refuses the first two when ``num_workers`` is 0. Memory is pinned when
        ``dataloader_pin_memory`` asks for it and a CUDA device is there; transformers pins on a machine
        without one too, where torch warns that pinning is useless (``docs/divergences.md``).
        """
        kwargs: dict[str, Any] = {
            "num_workers": self.dataloader_num_workers,
            "pin_memory": self.dataloader_pin_memory and self.cuda_available,
            "persistent_workers": self.dataloader_persistent_workers,
        }
        if self.dataloader_num_workers > 0:
            kwargs["prefetch_factor"] = self.dataloader_prefetch_factor
            kwargs["multiprocessing_context"] = self.dataloader_multiprocessing_context
            kwargs["in_order"] = self.dataloader_in_order
        return kwargs


@dataclass(frozen=True)
class EvalSettings:
    """Where a standalone evaluation (outside ``train()``) runs and how ranks meet: ``EvalEngine`` reads these."""

    device: torch.device
    """``TrainingArguments.device``: ``cpu`` with ``use_cpu`` or without CUDA, else this rank's GPU."""
    mixed_precision: str | None
    """``"bf16-mixed"`` / ``"16-mixed"`` with ``bf16`` / ``fp16``, else ``None``."""
    eval_dtype: torch.dtype | None
    """The dtype the model is cast to with ``bf16_full_eval`` / ``fp16_full_eval``, else ``None``."""
    process_group_backend: str | None
    """``ddp_backend``, for a process group the evaluation initialises itself."""
    timeout_s: int
    """``ddp_timeout`` in seconds."""
