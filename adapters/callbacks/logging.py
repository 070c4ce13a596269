"""Implements ``TrainingArguments.report_to`` on Lightning loggers: every HF log reaches each logger.

transformers reports through one integration callback per backend; here one HF callback forwards
the ``logs`` of every ``on_log`` event to the Lightning loggers that ``to_lightning`` built
(TensorBoard, CSV, MLflow, W&B, Comet), at the step that ``log_history`` records.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hf_lightning.callbacks import TrainerCallback

__all__ = ["LightningLoggersCallback", "numeric_logs"]


def numeric_logs(logs: dict[str, Any]) -> dict[str, float]:
    """The scalar entries of ``logs`` (strings and containers are left to the printer)."""
    out = {}
    for key, value in logs.items():
        if hasattr(value, "item") and getattr(value, "ndim", 0) == 0:
            value = value.item()
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        out[key] = float(value)
    return out


class LightningLoggersCallback(TrainerCallback):
    """Forwards HF logs and the run's hyperparameters to Lightning ``Logger`` objects."""

    def __init__(self, loggers: Sequence[Any]) -> None:
        self.loggers = list(loggers)

    def on_train_begin(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            params = {k: v for k, v in args.to_sanitized_dict().items()}
            for logger in self.loggers:
                logger.log_hyperparams(params)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        metrics = numeric_logs(logs)
        for logger in self.loggers:
            logger.log_metrics(metrics, step=state.global_step)

    def on_train_end(self, args, state, control, **kwargs):
        for logger in self.loggers:
            logger.save()
