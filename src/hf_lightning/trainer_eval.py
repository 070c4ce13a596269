"""Evaluation and prediction (placeholder until the evaluation issue lands)."""

from __future__ import annotations

from typing import Any

__all__ = ["TrainerEvalMixin"]


class TrainerEvalMixin:
    """``evaluate``, ``predict`` and evaluation during training."""

    def _evaluate(self, trial: Any, ignore_keys_for_eval: Any, skip_scheduler: bool = False) -> dict[str, float]:
        raise NotImplementedError(
            "Evaluation (`TrainingArguments(eval_strategy=...)`, `eval_on_start`, `Trainer.evaluate`) is not "
            "implemented in hf_lightning yet")

    def _determine_best_metric(self, metrics: dict[str, float], trial: Any) -> bool:
        raise NotImplementedError("`metric_for_best_model` needs evaluation, which is not implemented yet")
