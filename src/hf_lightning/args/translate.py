"""``TrainingArguments`` translated into the plan's groups (``hf_lightning.plan``): one pure function per
group, reading the arguments once; :func:`build_plan` gathers them into a ``TrainerPlan``.

This is the one place of the vocabulary where the facade's settings are read from the arguments; the
Trainer reads ``trainer.plan`` (``docs/architecture.md``: the path of one argument).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import torch

from hf_lightning.args.enums import enum_value
from hf_lightning.optim.factory import OptimizerFactory
from hf_lightning.plan.arguments import SavedArguments
from hf_lightning.plan.facade import (
    CheckpointSettings,
    EvalLoopSettings,
    HubSettings,
    RunLength,
    RuntimeSettings,
    ScheduleSettings,
)
from hf_lightning.plan.groups import DataSettings, EvalSettings, ModuleSettings
from hf_lightning.plan.trainer_plan import TrainerPlan

__all__ = [
    "build_plan",
    "checkpoint_settings",
    "checkpointing",
    "data_settings",
    "eval_loop_settings",
    "eval_settings",
    "hub_settings",
    "module_settings",
    "precisions",
    "run_length",
    "runtime_settings",
    "schedule_settings",
]


def build_plan(args: Any) -> TrainerPlan:
    """The ``TrainerPlan`` of ``args`` (pure: reads the arguments and whether CUDA is there)."""
    return TrainerPlan(
        module=module_settings(args),
        data=data_settings(args, cuda_available=torch.cuda.is_available()),
        schedule=schedule_settings(args),
        checkpoint=checkpoint_settings(args),
        hub=hub_settings(args),
        evaluation=eval_loop_settings(args),
        length=run_length(args),
        runtime=runtime_settings(args),
        eval_placement=eval_settings(args),
    )


def precisions(args: Any, *, cpu: bool = False) -> tuple[str, str | None, torch.dtype | None]:
    """``(training precision, evaluation precision, evaluation dtype)``; refuses contradictory flags.

    ``cpu``: the run's device is the CPU. There ``fp16`` trains in 32 bits, as under transformers: accelerate
    turns fp16 mixed precision off on the CPU (no autocast, no gradient scaler) unless DeepSpeed runs it."""
    if args.bf16 and args.fp16:
        raise ValueError("`TrainingArguments(bf16=True, fp16=True)` is contradictory; set at most one")
    if args.bf16_full_eval and args.fp16_full_eval:
        raise ValueError(
            "`TrainingArguments(bf16_full_eval=True, fp16_full_eval=True)` is contradictory; set at most one"
        )
    fp16 = args.fp16 and not (cpu and not args.deepspeed)
    precision = "bf16-mixed" if args.bf16 else "16-mixed" if fp16 else "32-true"
    if args.bf16_full_eval:
        return precision, "bf16-true", torch.bfloat16
    if args.fp16_full_eval:
        return precision, "16-true", torch.float16
    return precision, None, None


def _tokens_seen(value: Any) -> str:
    if isinstance(value, bool) or value is None:
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
        optimizer_factory=OptimizerFactory(args),
        saved_arguments=SavedArguments.of(args),
    )


def data_settings(args: Any, *, cuda_available: bool = False) -> DataSettings:
    """The :class:`DataSettings` of ``args``; pass ``torch.cuda.is_available()`` as ``cuda_available``."""
    return DataSettings(
        per_device_train_batch_size=int(args.per_device_train_batch_size),
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
        parallelism_tp_size=_tp_size(args.parallelism_config),
    )


def _tp_size(config: Any) -> int | None:
    size = getattr(config, "tp_size", None)
    if size is None and isinstance(config, dict):
        size = config.get("tp_size")
    return size


def eval_settings(args: Any) -> EvalSettings:
    """The :class:`EvalSettings` of ``args``, built with the plan (``args.device``: this process's device)."""
    device = torch.device(args.device)
    precision, _, eval_dtype = precisions(args, cpu=device.type == "cpu")
    return EvalSettings(
        device=device,
        mixed_precision=None if precision == "32-true" else precision,
        eval_dtype=eval_dtype,
        process_group_backend=args.ddp_backend,
        timeout_s=int(args.ddp_timeout),
    )


def _name(value: Any) -> Any:
    return None if value is None else str(enum_value(value))


def schedule_settings(args: Any) -> ScheduleSettings:
    """The :class:`ScheduleSettings` of ``args``."""
    return ScheduleSettings(
        logging_strategy=_name(args.logging_strategy),
        eval_strategy=_name(args.eval_strategy),
        eval_on_start=bool(args.eval_on_start),
        save_strategy=_name(args.save_strategy),
        metric_for_best_model=args.metric_for_best_model,
        greater_is_better=args.greater_is_better,
        load_best_model_at_end=bool(args.load_best_model_at_end),
    )


def checkpoint_settings(args: Any) -> CheckpointSettings:
    """The :class:`CheckpointSettings` of ``args``."""
    return CheckpointSettings(
        output_dir=None if args.output_dir is None else str(args.output_dir),
        save_total_limit=args.save_total_limit,
        save_on_each_node=bool(args.save_on_each_node),
        save_only_model=bool(args.save_only_model),
        restore_callback_states_from_checkpoint=bool(args.restore_callback_states_from_checkpoint),
        deepspeed=args.deepspeed,
    )


def hub_settings(args: Any) -> HubSettings:
    """The :class:`HubSettings` of ``args``."""
    return HubSettings(
        push_to_hub=bool(args.push_to_hub),
        hub_model_id=args.hub_model_id,
        hub_token=args.hub_token,
        hub_revision=args.hub_revision,
        hub_strategy=_name(args.hub_strategy),
        hub_private_repo=args.hub_private_repo,
        hub_always_push=bool(args.hub_always_push),
    )


def eval_loop_settings(args: Any) -> EvalLoopSettings:
    """The :class:`EvalLoopSettings` of ``args``."""
    return EvalLoopSettings(
        prediction_loss_only=bool(args.prediction_loss_only),
        eval_do_concat_batches=bool(args.eval_do_concat_batches),
        batch_eval_metrics=bool(args.batch_eval_metrics),
        include_for_metrics=tuple(args.include_for_metrics or ()),
        eval_accumulation_steps=args.eval_accumulation_steps,
        eval_use_gather_object=bool(args.eval_use_gather_object),
    )


def run_length(args: Any) -> RunLength:
    """The :class:`RunLength` of ``args``."""
    return RunLength(
        max_steps=int(args.max_steps),
        num_train_epochs=args.num_train_epochs,
        ignore_data_skip=bool(args.ignore_data_skip),
        auto_find_batch_size=bool(args.auto_find_batch_size),
    )


def runtime_settings(args: Any) -> RuntimeSettings:
    """The :class:`RuntimeSettings` of ``args``."""
    return RuntimeSettings(
        seed=int(args.seed),
        full_determinism=bool(args.full_determinism),
        tf32=args.tf32,
        use_liger_kernel=bool(args.use_liger_kernel),
        liger_kernel_config=args.liger_kernel_config,
        skip_memory_metrics=bool(args.skip_memory_metrics),
        disable_tqdm=bool(args.disable_tqdm),
        use_cache=bool(args.use_cache),
    )
