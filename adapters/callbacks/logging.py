"""Implements ``TrainingArguments.report_to`` for CSV, MLflow, W&B and Comet on Lightning loggers.

transformers reports through one integration callback per backend, created with the Trainer and
alive as long as it is (so a standalone ``evaluate()`` is reported too). Here one HF callback
forwards the ``logs`` of every ``on_log`` event to Lightning loggers, built on first use from their
``LoggerSpec`` (adapters/loggers.py), at the step that ``log_history`` records and under the names
transformers' callback for that tracker uses:

- W&B: ``train/loss``, ``eval/loss``, ``test/…`` plus ``train/global_step``; the end-of-training
  totals (``train_runtime``, ``train_loss``, ``total_flos``, …) go to the run summary; each search
  trial is a run named after the trial, grouped under ``run_name`` (else ``output_dir``).
- Comet: ``train/…``, ``eval/…``, ``test/…`` at ``global_step``.
- MLflow: the log keys as they are (characters MLflow refuses become ``_``) at ``global_step``.
- CSV (hf_lightning's own): the log keys as they are.

TensorBoard has its own callback (``adapters/callbacks/reporting.py``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Any

from hf_lightning.callbacks import TrainerCallback

from ..loggers import TRACKER_OF_LOGGER_CLASS

__all__ = [
    "LightningLoggersCallback",
    "numeric_logs",
    "prefixed_logs",
    "tracker_metrics",
    "tracker_name",
    "trial_spec",
]

_SUMMARY_KEYS = (
    "train_runtime",
    "train_samples_per_second",
    "train_steps_per_second",
    "train_loss",
    "total_flos",
)


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
    return TRACKER_OF_LOGGER_CLASS.get(type(logger).__name__, "csv")


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


def trial_spec(item: Any, trial_name: str, group: str) -> Any:
    """A W&B ``LoggerSpec`` for one search trial (run ``trial_name`` in group ``group``); others unchanged."""
    if getattr(item, "name", None) != "wandb" or not hasattr(item, "logger_class"):
        return item
    options = {**dict(item.options), "name": trial_name, "group": group}
    return dataclasses.replace(item, options=tuple(options.items()))


class LightningLoggersCallback(TrainerCallback):
    """Forwards HF logs and the run's hyperparameters to Lightning ``Logger`` objects.

    ``loggers`` holds Lightning loggers or ``LoggerSpec`` values; a spec is built on first use.
    """

    def __init__(self, loggers: Sequence[Any]) -> None:
        self._items = list(loggers)
        self._built: list[Any] | None = None
        self._training = False

    @property
    def loggers(self) -> list[Any]:
        """The Lightning loggers (specs are built here, once)."""
        if self._built is None:
            self._built = [item.build() if hasattr(item, "logger_class") else item for item in self._items]
        return self._built

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (a Ray trial) without the built loggers: the copy builds its own from the specs."""
        return {**self.__dict__, "_built": None}

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self._training = True
        if not state.is_world_process_zero:
            return
        if state.is_hyper_param_search and state.trial_name is not None:
            self._start_trial(state.trial_name, args.run_name or args.output_dir)
        params = dict(args.to_sanitized_dict())
        config = getattr(model, "config", None)
        for logger in self.loggers:
            if tracker_name(logger) in ("mlflow", "wandb") and hasattr(config, "to_dict"):
                logger.log_hyperparams({**config.to_dict(), **params})
            else:
                logger.log_hyperparams(params)

    def _start_trial(self, trial_name: str, group: str) -> None:
        """W&B: each search trial is a run of its own, named after the trial, grouped by run_name."""
        if not any(trial_spec(item, trial_name, group) is not item for item in self._items):
            return
        for logger in self._built or []:
            if tracker_name(logger) == "wandb":
                logger.experiment.finish()
        self._items = [trial_spec(item, trial_name, group) for item in self._items]
        self._built = None

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
