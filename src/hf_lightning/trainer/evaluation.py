"""``evaluate``, ``predict``, their dataloaders, and evaluation during training, as transformers runs them.

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
code turns the latter into ``state.best_model_checkpoint``).
"""

from __future__ import annotations

import math
import time
from typing import Any, cast

import numpy as np
import torch
from torch.utils.data import DataLoader, SequentialSampler

from hf_lightning.trainer.eval_loop import TrainerEvalLoopMixin
from hf_lightning.trainer.metrics import TrainerMetricsMixin
from hf_lightning.trainer_utils import PredictionOutput, has_length, speed_metrics
from hf_lightning.trainer_utils_memory import is_out_of_memory_error

__all__ = ["TrainerEvalMixin"]


def _value(strategy: Any) -> Any:
    return getattr(strategy, "value", strategy)


class TrainerEvalMixin(TrainerEvalLoopMixin, TrainerMetricsMixin):
    """``evaluate``, ``predict``, the eval/test dataloaders and evaluation during training."""

    # --- dataloaders -----------------------------------------------------------------------
    def get_eval_dataloader(self, eval_dataset: Any = None) -> DataLoader:
        """The evaluation DataLoader of ``eval_dataset`` (a dataset, or the name of one of a dict of eval
        datasets), else of ``self.eval_dataset``; in order, sharded by batches over data-parallel ranks."""
        if eval_dataset is None and self.eval_dataset is None:
            raise ValueError("Trainer: evaluation requires an eval_dataset.")
        key = eval_dataset if isinstance(eval_dataset, str) else "eval"
        cache = self.__dict__.setdefault("_eval_dataloaders", {})
        if self.args.dataloader_persistent_workers and key in cache:
            return cache[key]
        if isinstance(eval_dataset, str):
            dataset = self._named_eval_dataset(eval_dataset)
        else:
            dataset = eval_dataset if eval_dataset is not None else self.eval_dataset
        loader = self._get_dataloader(
            dataset, "Evaluation", self.args.eval_batch_size, sampler_fn=self._get_eval_sampler
        )
        if self.args.dataloader_persistent_workers:
            cache[key] = loader
        return loader

    def get_test_dataloader(self, test_dataset: Any) -> DataLoader:
        """The DataLoader ``predict`` runs over: like the evaluation one, for ``test_dataset``."""
        return self._get_dataloader(
            test_dataset, "test", self.args.eval_batch_size, sampler_fn=self._get_eval_sampler
        )

    def _named_eval_dataset(self, name: str) -> Any:
        datasets = self.eval_dataset
        if not isinstance(datasets, dict) or name not in datasets:
            names = (
                ", ".join(repr(k) for k in datasets) if isinstance(datasets, dict) else "none (not a dict)"
            )
            raise ValueError(f"`get_eval_dataloader({name!r})` names no eval dataset; choose one of: {names}")
        return datasets[name]

    def _get_eval_sampler(self, eval_dataset: Any, lengths: list[int] | None = None) -> Any:
        """Sequential order on one process; whole batches dealt to the ranks with several."""
        from hf_lightning.adapters.evaluation import EvalEngine, EvalShardSampler

        if eval_dataset is None or not has_length(eval_dataset):
            return None
        args = self.args
        world_size, rank = EvalEngine(self.accelerator, args).world()
        if world_size > 1:
            return EvalShardSampler(
                len(eval_dataset), args.eval_batch_size, world_size, rank, drop_last=args.dataloader_drop_last
            )
        if args.train_sampling_strategy == "group_by_length":
            from hf_lightning.adapters.samplers import LengthGroupedSampler

            seed = args.data_seed if args.data_seed is not None else args.seed
            names = getattr(self.processing_class, "model_input_names", None)
            return LengthGroupedSampler(
                args.eval_batch_size,
                dataset=eval_dataset,
                lengths=lengths,
                model_input_name=names[0] if names else None,
                length_column_name=args.length_column_name,
                generator=torch.Generator().manual_seed(seed),
                num_replicas=1,
                rank=0,
            )
        return SequentialSampler(eval_dataset)

    # --- evaluate / predict ----------------------------------------------------------------
    def evaluate(
        self, eval_dataset: Any = None, ignore_keys: list[str] | None = None, metric_key_prefix: str = "eval"
    ) -> dict[str, float]:
        """Evaluate on ``eval_dataset`` (default ``self.eval_dataset``; a dict evaluates each dataset with
        ``{metric_key_prefix}_{name}_`` keys); log the metrics, fire ``on_evaluate`` and return them."""
        override = eval_dataset is not None
        eval_dataset = eval_dataset if override else self.eval_dataset
        if isinstance(eval_dataset, dict):
            metrics: dict[str, float] = {}
            for name, dataset in eval_dataset.items():
                metrics.update(
                    self.evaluate(
                        eval_dataset=dataset if override else name,
                        ignore_keys=ignore_keys,
                        metric_key_prefix=f"{metric_key_prefix}_{name}",
                    )
                )
            return metrics
        self._memory_tracker.start()
        dataloader = self.get_eval_dataloader(eval_dataset)
        start_time = time.time()
        output = self.evaluation_loop(
            dataloader,
            description="Evaluation",
            prediction_loss_only=True if self.compute_metrics is None else None,  # nothing to gather for
            ignore_keys=ignore_keys,
            metric_key_prefix=metric_key_prefix,
        )
        self._add_speed_metrics(output, metric_key_prefix, start_time)
        self.log(output.metrics)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, output.metrics)
        self._memory_tracker.stop_and_update_metrics(output.metrics)
        return cast(dict[str, float], output.metrics)  # the evaluation loop always fills them

    def predict(
        self, test_dataset: Any, ignore_keys: list[str] | None = None, metric_key_prefix: str = "test"
    ) -> PredictionOutput:
        """Predictions (padded with -100 where lengths differ), labels if present, and metrics on
        ``test_dataset``, in dataset order; fires ``on_predict``."""
        self._memory_tracker.start()
        dataloader = self.get_test_dataloader(test_dataset)
        start_time = time.time()
        output = self.evaluation_loop(
            dataloader, description="Prediction", ignore_keys=ignore_keys, metric_key_prefix=metric_key_prefix
        )
        self._add_speed_metrics(output, metric_key_prefix, start_time)
        self.control = self.callback_handler.on_predict(self.args, self.state, self.control, output.metrics)
        self._memory_tracker.stop_and_update_metrics(output.metrics)
        return PredictionOutput(
            predictions=output.predictions, label_ids=output.label_ids, metrics=output.metrics
        )

    def _add_speed_metrics(self, output: Any, prefix: str, start_time: float) -> None:
        from hf_lightning.adapters.evaluation import EvalEngine

        world_size, _ = EvalEngine(self.accelerator, self.args).world()
        total_batch_size = self.args.eval_batch_size * world_size
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
    def _evaluate(
        self, trial: Any, ignore_keys_for_eval: list[str] | None, skip_scheduler: bool = False
    ) -> dict[str, float]:
        """Evaluate during training; report to a hyperparameter search; step a metric-driven scheduler."""
        try:
            metrics = self.evaluate(ignore_keys=ignore_keys_for_eval)
        except RuntimeError as error:
            # the batch-size finder shrinks the training batch only: an evaluation OOM must not reach it
            if self.args.auto_find_batch_size and is_out_of_memory_error(error):
                raise RuntimeError(
                    "Evaluation ran out of memory. `TrainingArguments(auto_find_batch_size=True)` only adjusts "
                    "the training batch size; reduce `per_device_eval_batch_size` instead."
                ) from error
            raise
        report = getattr(self, "_report_to_hp_search", None)
        if callable(report):
            report(trial, self.state.global_step, metrics)
        if not skip_scheduler and self._scheduler_needs_metric():
            self.lr_scheduler.step(metrics[self._best_metric_key(metrics)])
        return metrics

    def _scheduler_needs_metric(self) -> bool:
        from hf_lightning.optim.greedy import GreedyLR

        return isinstance(self.lr_scheduler, (torch.optim.lr_scheduler.ReduceLROnPlateau, GreedyLR))

    def _best_metric_key(self, metrics: dict[str, float]) -> str:
        """``metric_for_best_model`` with its ``eval_`` prefix; a clear KeyError when evaluation lacks it."""
        name = self.args.metric_for_best_model
        if name is None:
            raise ValueError(
                "`TrainingArguments(metric_for_best_model=None)`: a metric-driven scheduler and "
                "best-model tracking need the name of an evaluation metric, e.g. 'loss'"
            )
        key = name if name.startswith("eval_") else f"eval_{name}"
        if key not in metrics:
            raise KeyError(
                f"`TrainingArguments(metric_for_best_model={name!r})` names {key!r}, which evaluation did not "
                f"return; choose one of: {', '.join(sorted(metrics))}. Return it from `compute_metrics` or "
                "change `metric_for_best_model`."
            )
        return key

    def _determine_best_metric(self, metrics: dict[str, float], trial: Any) -> bool:
        """Whether ``metrics`` hold a new best ``metric_for_best_model``; updates ``state.best_metric`` and,
        when checkpoints are saved, ``state.best_global_step``."""
        if self.args.metric_for_best_model is None:
            return False
        value = metrics[self._best_metric_key(metrics)]
        greater = bool(self.args.greater_is_better)
        better = np.greater if greater else np.less
        if self.state.best_metric is None:
            self.state.best_metric = float("-inf") if greater else float("inf")
        if not better(value, self.state.best_metric):
            return False
        self.state.best_metric = value
        if _value(self.args.save_strategy) in ("steps", "epoch", "best"):
            self.state.best_global_step = self.state.global_step
        return True
