"""What ``Trainer(...)`` refuses at construction, with transformers' exception types and words.

transformers checks these in ``Trainer.__init__``, before any training step, so a script fails at once
instead of 500 steps later at the first evaluation.
"""

from __future__ import annotations

import errno
import inspect
import os
import warnings
from typing import Any

from hf_lightning.args.enums import enum_value
from hf_lightning.loss import LabelSmoother
from hf_lightning.trainer.engine_door import ENGINE

__all__ = ["build_label_smoother", "check_output_dir", "check_sharding_arguments", "check_trainer_arguments"]


def check_trainer_arguments(trainer: Any) -> None:
    """Raise the first problem transformers raises for the Trainer's constructor arguments."""
    args, compute_metrics, eval_dataset = trainer.args, trainer.compute_metrics, trainer.eval_dataset
    optimizer, lr_scheduler, model_init = trainer.optimizer, trainer.lr_scheduler, trainer.model_init
    optimizer_cls_and_kwargs = trainer.optimizer_cls_and_kwargs
    if args.batch_eval_metrics and compute_metrics is not None:
        if "compute_result" not in inspect.signature(compute_metrics).parameters:
            raise ValueError(
                "When using `batch_eval_metrics`, your `compute_metrics` function must take a `compute_result` "
                "boolean argument which will be triggered after the last batch of the eval set to signal that "
                "the summary statistics should be returned by the function."
            )
    eval_strategy = enum_value(args.eval_strategy)
    if eval_strategy is not None and eval_strategy != "no" and eval_dataset is None:
        raise ValueError(
            f"You have set `args.eval_strategy` to {eval_strategy} but you didn't pass an `eval_dataset` to "
            "`Trainer`. Either set `args.eval_strategy` to `no` or pass an `eval_dataset`."
        )
    if (enum_value(args.save_strategy) == "best" or args.load_best_model_at_end) and (
        args.metric_for_best_model is None
    ):
        raise ValueError(
            "`args.metric_for_best_model` must be provided when using 'best' save_strategy or if "
            "`args.load_best_model_at_end` is set to `True`."
        )
    if optimizer_cls_and_kwargs is not None and optimizer is not None:
        raise RuntimeError(
            "Passing both `optimizers` and `optimizer_cls_and_kwargs` arguments is incompatible."
        )
    if model_init is not None and (optimizer is not None or lr_scheduler is not None):
        raise RuntimeError(
            "Passing a `model_init` is incompatible with providing the `optimizers` argument. "
            "You should subclass `Trainer` and override the `create_optimizer_and_scheduler` method."
        )
    check_sharding_arguments(args, given_optimizers=optimizer is not None or lr_scheduler is not None)
    check_output_dir(args)


def check_output_dir(args: Any) -> None:
    """Refuse an ``output_dir`` that is a file, or lies below one, on the saving process.

    transformers creates ``output_dir`` in ``Trainer.__init__`` (``os.makedirs``) and so fails there with a
    bare ``FileExistsError`` / ``NotADirectoryError``; the same types are raised here, naming the argument.
    """
    if not args.should_save or args.output_dir is None:
        return
    path = os.path.abspath(os.fspath(args.output_dir))
    call = f"`TrainingArguments(output_dir={os.fspath(args.output_dir)!r})`"
    if os.path.exists(path) and not os.path.isdir(path):
        raise FileExistsError(
            errno.EEXIST,
            f"{call} is an existing file, not a folder: the Trainer writes its checkpoints, model and logs "
            "into output_dir. Pass the path of a folder (created when missing)",
        )
    parent = os.path.dirname(path)
    while not os.path.exists(parent) and os.path.dirname(parent) != parent:
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise NotADirectoryError(
            errno.ENOTDIR,
            f"{call} lies inside `{parent}`, which is a file, not a folder: the Trainer cannot create "
            "output_dir there. Pass the path of a folder",
        )


def check_sharding_arguments(args: Any, *, given_optimizers: bool) -> None:
    """What transformers refuses at construction under FSDP and DeepSpeed, with its words."""
    fsdp, deepspeed = bool(args.fsdp), bool(args.deepspeed)
    config = args.fsdp_config or {}
    if fsdp and config.get("activation_checkpointing") and args.activation_checkpointing:
        raise ValueError(
            "`fsdp_config['activation_checkpointing']` (FSDP's own activation checkpointing) and the "
            "`activation_checkpointing` training argument can't both be set to True. Use FSDP's activation "
            "checkpointing when using FSDP."
        )
    if args.save_only_model and (deepspeed or fsdp) and args.load_best_model_at_end:
        wrapper = "DeepSpeed" if deepspeed else "FSDP"
        raise ValueError(
            f"{wrapper} can't be used with `save_only_model` along with `load_best_model_at_end`."
        )
    if deepspeed and args.auto_find_batch_size and _zero_stage(args) == 3:
        raise ValueError(
            "`auto_find_batch_size` isn't supported yet with DeepSpeed Zero-3. Please consider using Zero-2, "
            "Zero-1, or FSDP"
        )
    if (
        args.save_only_model
        and fsdp
        and "SHARDED_STATE_DICT" in str(config.get("state_dict_type", "")).upper()
    ):
        raise ValueError(
            "save_only_model option is not compatible with FSDP state dict type 'SHARDED_STATE_DICT'"
        )
    if fsdp and given_optimizers:
        raise RuntimeError(
            "Passing `optimizers` is not allowed if PyTorch FSDP is enabled. "
            "You should subclass `Trainer` and override the `create_optimizer_and_scheduler` method."
        )


def _zero_stage(args: Any) -> int:
    return ENGINE.deepspeed_zero_stage(args.deepspeed)


def build_label_smoother(args: Any, model: Any) -> LabelSmoother | None:
    """``Trainer.label_smoother``: ``None`` without ``label_smoothing_factor``, and (with a warning) for a
    multi-label classification model, which label smoothing does not apply to."""
    if not args.label_smoothing_factor:
        return None
    if getattr(getattr(model, "config", None), "problem_type", None) == "multi_label_classification":
        warnings.warn(
            "Label smoothing is not compatible with multi-label classification. "
            "Disabling label smoothing for this training run.",
            UserWarning,
            stacklevel=3,
        )
        return None
    return LabelSmoother(epsilon=args.label_smoothing_factor)
