"""The training arguments as a model card lists them (transformers' ``TrainingSummary`` hyperparameters).

``hyperparameters_of(args)`` names and values each hyperparameter as transformers' card does; the card
itself is written by ``hf_lightning.trainer.model_card``.
"""

from __future__ import annotations

from typing import Any

from hf_lightning.args.enums import enum_value

__all__ = ["hyperparameters_of"]


def hyperparameters_of(args: Any) -> dict[str, Any]:
    """The training hyperparameters a card lists, named and valued as transformers lists them."""
    params: dict[str, Any] = {
        name: getattr(args, name) for name in ("learning_rate", "train_batch_size", "eval_batch_size", "seed")
    }
    mode = enum_value(args.parallel_mode)
    if mode not in ("not_parallel", "not_distributed"):
        params["distributed_type"] = "multi-GPU" if mode == "distributed" else mode
    world = args.world_size
    if world > 1:
        params["num_devices"] = world
    if args.gradient_accumulation_steps > 1:
        params["gradient_accumulation_steps"] = args.gradient_accumulation_steps
    total_train = args.train_batch_size * world * args.gradient_accumulation_steps
    if total_train != params["train_batch_size"]:
        params["total_train_batch_size"] = total_train
    if args.eval_batch_size * world != params["eval_batch_size"]:
        params["total_eval_batch_size"] = args.eval_batch_size * world
    if args.optim:
        params["optimizer"] = _optimizer_line(args)
    params["lr_scheduler_type"] = enum_value(args.lr_scheduler_type)
    if args.warmup_steps != 0.0:
        params["lr_scheduler_warmup_steps"] = args.warmup_steps
    if args.max_steps != -1:
        params["training_steps"] = args.max_steps
    else:
        params["num_epochs"] = args.num_train_epochs
    if args.fp16:
        params["mixed_precision_training"] = "Native AMP"
    if args.label_smoothing_factor != 0.0:
        params["label_smoothing_factor"] = args.label_smoothing_factor
    return params


def _optimizer_line(args: Any) -> str:
    # transformers formats the option itself: an OptimizerNames reads ``OptimizerNames.ADAMW_TORCH``
    name, extra = f"{args.optim}", args.optim_args or "No additional optimizer arguments"
    if "adam" in str(enum_value(args.optim)).lower():
        return (
            f"Use {name} with betas=({args.adam_beta1},{args.adam_beta2}) and epsilon={args.adam_epsilon}"
            f" and optimizer_args={extra}"
        )
    return f"Use {name} and the args are:\n{extra}"
