"""Implements ``TrainingArguments.report_to`` for CSV, MLflow, W&B and Comet on Lightning loggers.

transformers reports through one integration callback per backend, created with the Trainer and
alive as long as it is (so a standalone ``evaluate()`` is reported too). Here one HF callback
forwards the ``logs`` of every ``on_log`` event to Lightning loggers, built on first use from their
``LoggerSpec`` (adapters/loggers.py), at the step that ``log_history`` records and under the names
transformers' callback for that tracker uses:

- W&B: ``train/loss``, ``eval/loss``, ``test/…`` plus ``train/global_step``; the end-of-training
  totals (``train_runtime``, ``train_loss``, ``total_flos``, …) go to the run summary.
- Comet: ``train/…``, ``eval/…``, ``test/…`` at ``global_step``.
- MLflow: the log keys as they are (characters MLflow refuses become ``_``) at ``global_step``.
- CSV (hf_lightning's own): the log keys as they are.

TensorBoard has its own callback (``adapters/callbacks/reporting.py``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from hf_lightning.callbacks import TrainerCallback

__all__ = ["LightningLoggersCallback", "numeric_logs", "tracker_name", "tracker_metrics", "prefixed_logs"]

_SUMMARY_KEYS = (
    "train_runtime",
    "train_samples_per_second",
    "train_steps_per_second",
    "train_loss",
    "total_flos",
)
_CLASS_TO_TRACKER = {
    "TensorBoardLogger": "tensorboard",
    "CSVLogger": "csv",
    "MLFlowLogger": "mlflow",
    "WandbLogger": "wandb",
    "CometLogger": "comet_ml",
}


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


def prefixed_logs(logs: dict[str, Any]) -> dict[str, Any]:
    """``eval_x`` → ``eval/x``, ``test_x`` → ``test/x``, anything else → ``train/x`` (transformers' tracker names)."""
    out = {}
    for key, value in logs.items():
        if key.startswith("eval_"):
            out["eval/" + key[len("eval_") :]] = value
        elif key.startswith("test_"):
            out["test/" + key[len("test_") :]] = value
        else:
            out["train/" + key] = value
    return out


def tracker_name(logger: Any) -> str:
    """The ``report_to`` name of a Lightning logger (its class decides; unknown loggers count as csv)."""
    return _CLASS_TO_TRACKER.get(type(logger).__name__, "csv")


def tracker_metrics(name: str, logs: dict[str, Any], step: int) -> tuple[dict[str, float], int | None]:
    """The metrics and step that tracker ``name`` records for one ``on_log`` (summary keys excluded)."""
    metrics = numeric_logs(logs)
    if name == "wandb":
        metrics = prefixed_logs({k: v for k, v in metrics.items() if k not in _SUMMARY_KEYS})
        return {**metrics, "train/global_step": step}, None
    if name in ("comet_ml", "tensorboard"):
        return prefixed_logs(metrics), step
    if name == "mlflow":
        return {re.sub(r"[^0-9A-Za-z_\-. :/]", "_", k): v for k, v in metrics.items()}, step
    return metrics, step


class LightningLoggersCallback(TrainerCallback):
    """Forwards HF logs and the run's hyperparameters to Lightning ``Logger`` objects.

    ``loggers`` holds Lightning loggers or ``LoggerSpec`` values; a spec is built on first use.
    """

    def __init__(self, loggers: Sequence[Any]) -> None:
        self._items = list(loggers)
        self._training = False

    @property
    def loggers(self) -> list[Any]:
        """The Lightning loggers (specs are built here, once)."""
        self._items = [item.build() if hasattr(item, "logger_class") else item for item in self._items]
        return self._items

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self._training = True
        if not state.is_world_process_zero:
            return
        params = dict(args.to_sanitized_dict())
        config = getattr(model, "config", None)
        for logger in self.loggers:
            if tracker_name(logger) in ("mlflow", "wandb") and hasattr(config, "to_dict"):
                logger.log_hyperparams({**config.to_dict(), **params})
            else:
                logger.log_hyperparams(params)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        for logger in self.loggers:
            name = tracker_name(logger)
            if name == "wandb":
                summary = logger.experiment.summary
                for key in _SUMMARY_KEYS:
                    if key in logs:
                        summary[key] = logs[key]
            metrics, step = tracker_metrics(name, logs, state.global_step)
            logger.log_metrics(metrics, step=step)
            if not self._training:  # a standalone evaluate(): nothing else will save it
                logger.save()

    def on_train_end(self, args, state, control, **kwargs):
        self._training = False
        if not state.is_world_process_zero:
            return
        for logger in self.loggers:
            logger.save()
            logger.finalize("success")
