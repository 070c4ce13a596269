"""The plan's groups: the settings ``HFModule``, the data loaders and the evaluation engine read.

Each group is a frozen dataclass of plain values, built from ``TrainingArguments`` by one function
(``module_settings``, ``data_settings``, ``eval_settings``); :func:`~hf_lightning.adapters.plan.to_lightning`
puts the first two in the plan. The consumers read only these values, never the arguments.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import torch

from hf_lightning.args.enums import enum_value
from hf_lightning.args.runtime import sampler_seed

__all__ = [
    "DataSettings",
    "EvalSettings",
    "ModuleSettings",
    "checkpointing",
    "data_settings",
    "eval_settings",
    "module_settings",
    "precisions",
]


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


@dataclass(frozen=True)
class DataSettings:
    """What the data loaders and samplers need."""

    per_device_train_batch_size: int
    per_device_eval_batch_size: int
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


def precisions(args: Any) -> tuple[str, str | None, torch.dtype | None]:
    """``(training precision, evaluation precision, evaluation dtype)``; refuses contradictory flags."""
    if args.bf16 and args.fp16:
        raise ValueError("`TrainingArguments(bf16=True, fp16=True)` is contradictory; set at most one")
    if args.bf16_full_eval and args.fp16_full_eval:
        raise ValueError(
            "`TrainingArguments(bf16_full_eval=True, fp16_full_eval=True)` is contradictory; set at most one"
        )
    precision = "bf16-mixed" if args.bf16 else "16-mixed" if args.fp16 else "32-true"
    if args.bf16_full_eval:
        return precision, "bf16-true", torch.bfloat16
    if args.fp16_full_eval:
        return precision, "16-true", torch.float16
    return precision, None, None


def _tokens_seen(value: Any) -> str:
    if isinstance(value, bool):
        return "all" if value else "no"
    return str(enum_value(value))


def checkpointing(args: Any) -> tuple[bool, Mapping[str, Any] | None]:
    """``activation_checkpointing`` and its kwargs, falling back to the deprecated ``gradient_*`` names."""
    enabled = getattr(args, "activation_checkpointing", None)
    if enabled is None:
        enabled = getattr(args, "gradient_checkpointing", None)
    kwargs = getattr(args, "activation_checkpointing_kwargs", None)
    if kwargs is None:
        kwargs = getattr(args, "gradient_checkpointing_kwargs", None)
    return bool(enabled), (MappingProxyType(dict(kwargs)) if kwargs else None)


def module_settings(args: Any) -> ModuleSettings:
    """The :class:`ModuleSettings` of ``args`` (what ``HFModule`` builds when given no plan)."""
    compile_on = bool(args.torch_compile or args.torch_compile_backend or args.torch_compile_mode)
    backend = args.torch_compile_backend or ("inductor" if compile_on else None)
    checkpointing_on, checkpointing_kwargs = checkpointing(args)
    return ModuleSettings(
        gradient_accumulation_steps=int(args.gradient_accumulation_steps),
        max_grad_norm=args.max_grad_norm,
        average_tokens_across_devices=bool(args.average_tokens_across_devices),
        label_smoothing_factor=float(args.label_smoothing_factor),
        logging_nan_inf_filter=bool(args.logging_nan_inf_filter),
        include_num_input_tokens_seen=_tokens_seen(args.include_num_input_tokens_seen),
        neftune_noise_alpha=args.neftune_noise_alpha,
        torch_empty_cache_steps=args.torch_empty_cache_steps,
        torch_compile=compile_on,
        torch_compile_backend=backend,
        torch_compile_mode=args.torch_compile_mode,
        activation_checkpointing=checkpointing_on,
        activation_checkpointing_kwargs=checkpointing_kwargs,
        lr_scheduler_type=str(enum_value(args.lr_scheduler_type)),
        lr_scheduler_kwargs=MappingProxyType(dict(args.lr_scheduler_kwargs or {})),
        warmup_steps=args.warmup_steps,
    )


def data_settings(args: Any, *, cuda_available: bool = False) -> DataSettings:
    """The :class:`DataSettings` of ``args``; pass ``torch.cuda.is_available()`` as ``cuda_available``."""
    return DataSettings(
        per_device_train_batch_size=int(args.per_device_train_batch_size),
        per_device_eval_batch_size=int(args.per_device_eval_batch_size),
        dataloader_drop_last=bool(args.dataloader_drop_last),
        dataloader_num_workers=int(args.dataloader_num_workers),
        dataloader_pin_memory=bool(args.dataloader_pin_memory),
        dataloader_persistent_workers=bool(args.dataloader_persistent_workers),
        dataloader_prefetch_factor=args.dataloader_prefetch_factor,
        dataloader_multiprocessing_context=args.dataloader_multiprocessing_context,
        dataloader_in_order=bool(args.dataloader_in_order),
        seed=int(args.seed),
        data_seed=args.data_seed,
        train_sampling_strategy=str(enum_value(args.train_sampling_strategy)),
        length_column_name=args.length_column_name,
        remove_unused_columns=bool(args.remove_unused_columns),
        label_names=tuple(args.label_names) if args.label_names is not None else None,
        cuda_available=bool(cuda_available),
    )


def eval_settings(args: Any) -> EvalSettings:
    """The :class:`EvalSettings` of ``args`` (read when an evaluation starts: ``args.device`` is per process)."""
    precision, _, eval_dtype = precisions(args)
    return EvalSettings(
        device=torch.device(args.device),
        mixed_precision=None if precision == "32-true" else precision,
        eval_dtype=eval_dtype,
        process_group_backend=args.ddp_backend,
        timeout_s=int(args.ddp_timeout),
    )
