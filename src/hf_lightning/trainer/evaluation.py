"""``Evaluator`` (``trainer.evaluations``): ``evaluate``, ``predict`` and evaluation during training, as
transformers runs them (the loop over batches is ``EvaluationLoop``, the dataloaders ``DataLoaderBuilder``).

``evaluate()`` returns transformers' metrics: ``eval_loss`` (the mean over samples), the
``compute_metrics`` results prefixed with ``eval_``, ``eval_runtime``, ``eval_samples_per_second``,
``eval_steps_per_second`` and ``epoch``; it logs them (``state.log_history``) and fires
``on_evaluate``. A dict of eval datasets is evaluated one by one with ``eval_{name}_`` prefixes.
``predict()`` returns ``PredictionOutput(predictions, label_ids, metrics)`` and fires ``on_predict``.

During ``train()`` the loop driver asks for an evaluation when ``DefaultFlowCallback`` sets
``control.should_evaluate`` (``eval_strategy``, ``eval_steps``, ``eval_delay``) and before the first
step with ``eval_on_start``; ``_evaluate`` runs it, reports it to a hyperparameter search and steps
a metric-driven scheduler (``ReduceLROnPlateau``, ``GreedyLR``); ``_determine_best_metric`` keeps
``state.best_metric`` and ``state.best_global_step`` for ``metric_for_best_model`` (the checkpoint
policy turns the latter into ``state.best_model_checkpoint``).
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any, cast

from hf_lightning.args.enums import SAVING_STRATEGIES
from hf_lightning.best_metric import improves
from hf_lightning.optim import steps_on_metric
from hf_lightning.trainer.engine_door import ENGINE
from hf_lightning.trainer_utils import PredictionOutput, speed_metrics
from hf_lightning.trainer_utils_memory import is_out_of_memory_error

if TYPE_CHECKING:
    from hf_lightning.trainer.trainer import Trainer

__all__ = ["Evaluator"]


class Evaluator:
    """Runs ``evaluate`` / ``predict`` through the Trainer's overridable methods; keeps the best metric."""

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer

    def evaluate(
        self, eval_dataset: Any = None, ignore_keys: list[str] | None = None, metric_key_prefix: str = "eval"
    ) -> dict[str, float]:
        """Evaluate on ``eval_dataset`` (default ``trainer.eval_dataset``; a dict evaluates each dataset with
        ``{metric_key_prefix}_{name}_`` keys); log the metrics, fire ``on_evaluate`` and return them."""
        t = self.trainer
        override = eval_dataset is not None
        eval_dataset = eval_dataset if override else t.eval_dataset
        if isinstance(eval_dataset, dict):
            metrics: dict[str, float] = {}
            for name, dataset in eval_dataset.items():
                metrics.update(
                    t.evaluate(
                        eval_dataset=dataset if override else name,
                        ignore_keys=ignore_keys,
                        metric_key_prefix=f"{metric_key_prefix}_{name}",
                    )
                )
            return metrics
        t._memory_tracker.start("eval")
        dataloader = t.get_eval_dataloader(eval_dataset)
        start_time = time.time()
        output = t.evaluation_loop(
            dataloader,
            description="Evaluation",
            prediction_loss_only=True if t.compute_metrics is None else None,  # nothing to gather for
            ignore_keys=ignore_keys,
            metric_key_prefix=metric_key_prefix,
        )
        self._add_speed_metrics(output, metric_key_prefix, start_time)
        t.log(output.metrics)
        run = t.run  # the run object holds control
        run.control = t.callback_handler.on_evaluate(t.args, t.state, t.control, output.metrics)
        t._memory_tracker.stop_and_update_metrics(output.metrics, stage="eval")
        return cast(dict[str, float], output.metrics)  # the evaluation loop always fills them

    def predict(
        self, test_dataset: Any, ignore_keys: list[str] | None = None, metric_key_prefix: str = "test"
    ) -> PredictionOutput:
        """Predictions (padded with -100 where lengths differ), labels if present, and metrics on
        ``test_dataset``, in dataset order; fires ``on_predict``."""
        t = self.trainer
        t._memory_tracker.start("test")
        dataloader = t.get_test_dataloader(test_dataset)
        start_time = time.time()
        output = t.evaluation_loop(
            dataloader, description="Prediction", ignore_keys=ignore_keys, metric_key_prefix=metric_key_prefix
        )
        self._add_speed_metrics(output, metric_key_prefix, start_time)
        run = t.run
        run.control = t.callback_handler.on_predict(t.args, t.state, t.control, output.metrics)
        t._memory_tracker.stop_and_update_metrics(output.metrics, stage="test")
        return PredictionOutput(
            predictions=output.predictions, label_ids=output.label_ids, metrics=output.metrics
        )

    def _add_speed_metrics(self, output: Any, prefix: str, start_time: float) -> None:
        t = self.trainer
        world_size, _ = ENGINE.EvalEngine(t.accelerator, settings=t.plan.eval_placement).world()
        total_batch_size = t.args.eval_batch_size * world_size
        start_time += output.metrics.get(f"{prefix}_model_preparation_time", 0)
        output.metrics.update(
            speed_metrics(
                prefix,
                start_time,
                num_samples=output.num_samples,
                num_steps=math.ceil(output.num_samples / total_batch_size),
            )
        )

    # --- evaluation during training --------------------------------------------------------
    def evaluate_in_training(
        self, trial: Any, ignore_keys_for_eval: list[str] | None, skip_scheduler: bool = False
    ) -> dict[str, float]:
        """``Trainer._evaluate``: evaluate; report to a hyperparameter search; step a metric-driven scheduler."""
        t = self.trainer
        try:
            metrics = t.evaluate(ignore_keys=ignore_keys_for_eval)
        except RuntimeError as error:
            # the batch-size finder shrinks the training batch only: an evaluation OOM must not reach it
            if t.plan.length.auto_find_batch_size and is_out_of_memory_error(error):
                raise RuntimeError(
                    "Evaluation ran out of memory. `TrainingArguments(auto_find_batch_size=True)` only adjusts "
                    "the training batch size; reduce `per_device_eval_batch_size` instead."
                ) from error
            raise
        t._report_to_hp_search(trial, t.state.global_step, metrics)
        if not skip_scheduler and steps_on_metric(t.lr_scheduler):
            t.lr_scheduler.step(metrics[self.best_metric_key(metrics, for_scheduler=True)])
        return metrics

    def best_metric_key(self, metrics: dict[str, float], for_scheduler: bool = False) -> str:
        """``metric_for_best_model`` with its ``eval_`` prefix; a clear KeyError when evaluation lacks it."""
        name = self.trainer.plan.schedule.metric_for_best_model
        if name is None:
            raise ValueError(
                "`TrainingArguments(metric_for_best_model=None)`: a metric-driven scheduler and "
                "best-model tracking need the name of an evaluation metric, e.g. 'loss'"
            )
        key = name if name.startswith("eval_") else f"eval_{name}"
        if key not in metrics:  # transformers' words, chained from the KeyError of the lookup as there
            ensure = (
                f"Please ensure that the `compute_metrics` function returns a dictionary that includes '{key}' or "
                "consider changing"
                if for_scheduler
                else "Consider changing"
            )
            raise KeyError(
                f"The `metric_for_best_model` training argument is set to '{key}', which is not found in the "
                f"evaluation metrics. The available evaluation metrics are: {list(metrics.keys())}. {ensure} the "
                "`metric_for_best_model` via the TrainingArguments."
            ) from KeyError(key)
        return key

    def determine_best_metric(self, metrics: dict[str, float], trial: Any = None) -> bool:
        """``Trainer._determine_best_metric``: whether ``metrics`` hold a new best ``metric_for_best_model``;
        updates ``state.best_metric`` and, when checkpoints are saved, ``state.best_global_step``."""
        t = self.trainer
        state = t.state
        schedule = t.plan.schedule
        if schedule.metric_for_best_model is None:
            return False
        value = metrics[self.best_metric_key(metrics)]
        greater = bool(schedule.greater_is_better)
        if state.best_metric is None:  # transformers starts from the worst value: a NaN is never a best
            state.best_metric = float("-inf") if greater else float("inf")
        if not improves(value, state.best_metric, greater):
            return False
        state.best_metric = value
        if schedule.save_strategy in SAVING_STRATEGIES:
            state.best_global_step = state.global_step
        return True
