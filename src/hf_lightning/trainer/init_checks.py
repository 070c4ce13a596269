"""What ``Trainer(...)`` refuses at construction, with transformers' exception types and words.

transformers checks these in ``Trainer.__init__``, before any training step, so a script fails at once
instead of 500 steps later at the first evaluation.
"""

from __future__ import annotations

import inspect
import warnings
from typing import Any

from hf_lightning.args.trainer_checks import check_output_dir, check_sharding_arguments
from hf_lightning.loss import LabelSmoother
from hf_lightning.trainer_utils import has_length

__all__ = ["build_label_smoother", "check_trainer_arguments"]


def check_trainer_arguments(trainer: Any) -> None:
    """Raise the first problem transformers raises for the Trainer's constructor arguments."""
    args, compute_metrics, eval_dataset = trainer.args, trainer.compute_metrics, trainer.eval_dataset
    schedule = trainer.plan.schedule
    optimizer, lr_scheduler, model_init = trainer.optimizer, trainer.lr_scheduler, trainer.model_init
    optimizer_cls_and_kwargs = trainer.optimizer_cls_and_kwargs
    if trainer.plan.evaluation.batch_eval_metrics and compute_metrics is not None:
        if "compute_result" not in inspect.signature(compute_metrics).parameters:
            raise ValueError(
                "When using `batch_eval_metrics`, your `compute_metrics` function must take a `compute_result` "
                "boolean argument which will be triggered after the last batch of the eval set to signal that "
                "the summary statistics should be returned by the function."
            )
    eval_strategy = schedule.eval_strategy
    if eval_strategy is not None and eval_strategy != "no" and eval_dataset is None:
        raise ValueError(
            f"You have set `args.eval_strategy` to {eval_strategy} but you didn't pass an `eval_dataset` to "
            "`Trainer`. Either set `args.eval_strategy` to `no` or pass an `eval_dataset`."
        )
    if (schedule.save_strategy == "best" or schedule.load_best_model_at_end) and (
        schedule.metric_for_best_model is None
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
    given_optimizers = optimizer is not None or lr_scheduler is not None
    check_sharding_arguments(args, given_optimizers=given_optimizers)
    if trainer.train_dataset is not None and not has_length(trainer.train_dataset) and args.max_steps <= 0:
        raise ValueError(  # transformers' words; checked here, before output_dir is made, as there
            "The train_dataset does not implement __len__, so the number of training steps cannot be inferred; "
            "max_steps has to be specified. The total number of steps must be known in advance to bound the "
            "training loop and to configure the learning rate scheduler."
        )
    check_output_dir(args)


def build_label_smoother(settings: Any, model: Any) -> LabelSmoother | None:
    """``Trainer.label_smoother``: ``None`` without ``label_smoothing_factor``, and (with a warning) for a
    multi-label classification model, which label smoothing does not apply to."""
    if not settings.label_smoothing_factor:
        return None
    if getattr(getattr(model, "config", None), "problem_type", None) == "multi_label_classification":
        warnings.warn(
            "Label smoothing is not compatible with multi-label classification. "
            "Disabling label smoothing for this training run.",
            UserWarning,
            stacklevel=3,
        )
        return None
    return LabelSmoother(epsilon=settings.label_smoothing_factor)
