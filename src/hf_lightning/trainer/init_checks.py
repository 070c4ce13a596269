"""What ``Trainer(...)`` refuses at construction, with transformers' exception types and words.

transformers checks these in ``Trainer.__init__``, before any training step, so a script fails at once
instead of 500 steps later at the first evaluation.
"""

from __future__ import annotations

import inspect
import warnings
from typing import Any

import torch

from hf_lightning.args.trainer_checks import check_output_dir, check_sharding_arguments
from hf_lightning.loss import LabelSmoother
from hf_lightning.trainer_utils import has_length
from hf_lightning.utils.logging import get_logger

__all__ = ["build_label_smoother", "check_trainer_arguments", "warn_overrides_not_called"]

logger = get_logger(__name__)

# transformers.Trainer's methods that only its own training loop calls (and Seq2SeqTrainer's
# _pad_tensors_to_max_len, which its per-batch prediction_step calls: here the evaluation loop pads once,
# docs/divergences.md #3): Lightning runs the loop, so an override of one would never run
# (docs/subclassing.md, "Underscore methods ...")
LOOP_INTERNALS = frozenset(
    {
        "_build_accelerator_args", "_clip_grad_norm", "_defer_fsdp_gradient_reduction", "_finalize_training",
        "_get_grad_norm", "_has_mixed_mesh_grads", "_init_training_state",
        "_issue_warnings_after_load", "_load_scaler", "_mixed_mesh_grad_norm", "_move_model_to_device",
        "_prepare_context_parallel_inputs", "_prepare_for_training", "_run_epoch",
        "_save_optimizer_and_scheduler", "_save_rng_state", "_save_scaler",
        "_sync_replicated_trainable_parameters", "_track_num_input_tokens", "_update_auto_batch_size",
        "_validate_args", "_wrap_model", "get_cp_size", "get_sp_size",
        "_pad_tensors_to_max_len",
    }
)  # fmt: skip


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
        raise ValueError(  # transformers' words, the enum as it prints, its trailing space
            f"You have set `args.eval_strategy` to {args.eval_strategy} but you didn't pass an `eval_dataset` to "
            "`Trainer`. Either set `args.eval_strategy` to `no` or pass an `eval_dataset`. "
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
    length = trainer.plan.length
    # transformers' notes come here, after the model is set up
    if length.max_steps > 0 and length.num_train_epochs > 0:
        logger.info("max_steps is given, it will override any value given in num_train_epochs")
    if trainer.train_dataset is not None and not has_length(trainer.train_dataset) and args.max_steps <= 0:
        raise ValueError(  # transformers' words; checked here, before output_dir is made, as there
            "The train_dataset does not implement __len__, so the number of training steps cannot be inferred; "
            "max_steps has to be specified. The total number of steps must be known in advance to bound the "
            "training loop and to configure the learning rate scheduler."
        )
    if isinstance(trainer.train_dataset, torch.utils.data.IterableDataset):
        logger.info(  # transformers' words, for any strategy
            f"The `train_sampling_strategy='{args.train_sampling_strategy}'` option is ignored when using an "
            "`IterableDataset`. Samplers cannot be used with IterableDataset as they require indexed access to the "
            "dataset."
        )
    check_output_dir(args)


def warn_overrides_not_called(cls: type) -> None:
    """Warn, when a Trainer subclass is defined, about each method it overrides that only transformers' own
    training loop calls: the override would have no effect here."""
    if cls.__module__.startswith("hf_lightning."):  # Seq2SeqTrainer's own _pad_tensors_to_max_len
        return
    for name in sorted(LOOP_INTERNALS & set(vars(cls))):
        warnings.warn(
            f"{cls.__qualname__}.{name} overrides a method that only transformers' own loops call; "
            "hf_lightning runs the loop with Lightning and never calls it, so this override has no effect "
            "(see docs/subclassing.md, 'Underscore methods a subclass overrides or calls').",
            UserWarning,
            stacklevel=3,  # the class statement
        )


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
