"""Experiment trackers: ``report_to`` → Lightning loggers.

Implements ``TrainingArguments.report_to``, ``run_name`` and ``project``. Each name becomes a
:class:`LoggerSpec` (a plain, comparable description) when the plan is made; the Lightning logger
itself is built from the spec only when it is first needed, because some (Comet) start a remote
experiment in their constructor. A tracker whose package is missing fails when the plan is made,
with the ``pip install`` line that fixes it.

==============  ==================================  ==========================================
``report_to``   Lightning logger                    where it writes
==============  ==================================  ==========================================
tensorboard     ``TensorBoardLogger``               ``$TENSORBOARD_LOGGING_DIR``, else
                                                    ``output_dir/runs/<run_name or version_N>``
csv             ``CSVLogger``                       ``output_dir/logs/<run_name or version_N>``
mlflow          ``MLFlowLogger``                    ``$MLFLOW_TRACKING_URI`` / experiment
                                                    ``$MLFLOW_EXPERIMENT_NAME``
wandb           ``WandbLogger``                     project ``$WANDB_PROJECT``, else ``project``
comet_ml        ``CometLogger``                     project ``$COMET_PROJECT_NAME``, else ``project``
trackio         (an HF callback: ``TrackioReporter``) Trackio's local database, project ``project``
==============  ==================================  ==========================================

These are the loggers of a plain ``lightning.Trainer`` built from ``to_lightning(args)``. The
``hf_lightning.Trainer`` reports through callbacks built from the same specs
(``adapters/callbacks/reporting.py``), where TensorBoard writes transformers' layout instead:
``$TENSORBOARD_LOGGING_DIR`` or ``output_dir/runs/<date>_<host>`` with ``train/…``, ``eval/…`` tags.

``"all"`` means every tracker above (except csv, which transformers does not have) whose package is
installed; ``"none"`` means no logger.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hf_lightning.args import trackers
from hf_lightning.plan.reporting import TrackerSettings

__all__ = [
    "CALLBACK_REPORTERS",
    "REPORTERS",
    "TRACKER_OF_LOGGER_CLASS",
    "LoggerSpec",
    "logger_specs",
    "normalize_report_to",
]

# name -> Lightning logger class (what each needs installed: ``hf_lightning.args.trackers``)
_LOGGERS: dict[str, str] = {
    "tensorboard": "TensorBoardLogger",
    "csv": "CSVLogger",
    "mlflow": "MLFlowLogger",
    "wandb": "WandbLogger",
    "comet_ml": "CometLogger",
}
TRACKER_OF_LOGGER_CLASS = {logger_class: name for name, logger_class in _LOGGERS.items()}
"""The ``report_to`` name of each Lightning logger class above (``TensorBoardLogger`` -> "tensorboard")."""
CALLBACK_REPORTERS = ("kubeflow", "trackio")
"""``report_to`` values carried by an HF callback alone (no Lightning logger): ``KubeflowCallback``,
``TrackioReporter`` (adapters/callbacks/trackio.py)."""
REPORTERS = (*_LOGGERS, *CALLBACK_REPORTERS)
"""Values of ``report_to`` that hf_lightning carries (besides ``"all"`` and ``"none"``)."""

_HF_ONLY = ("azure_ml", "clearml", "codecarbon", "dagshub", "dvclive", "flyte", "swanlab")


@dataclass(frozen=True)
class LoggerSpec:
    """A Lightning logger described by value: its ``report_to`` name and constructor options."""

    name: str
    """The ``report_to`` value."""
    options: tuple[tuple[str, Any], ...]
    """Keyword arguments of the Lightning logger, in order."""

    @property
    def logger_class(self) -> str:
        """The name of the Lightning logger class."""
        return _LOGGERS[self.name]

    def build(self) -> Any:
        """Construct the Lightning logger."""
        from lightning.pytorch import loggers

        return getattr(loggers, self.logger_class)(**dict(self.options))

    def describe(self) -> str:
        """The constructor call, e.g. ``CSVLogger(save_dir='out', name='logs')``."""
        options = ", ".join(f"{key}={value!r}" for key, value in self.options)
        return f"{self.logger_class}({options})"


def _value_error(value: Any) -> ValueError:
    known = ", ".join(repr(name) for name in (*REPORTERS, "all", "none"))
    hint = " (a transformers integration that hf_lightning does not carry yet)" if value in _HF_ONLY else ""
    return ValueError(
        f"`TrainingArguments(report_to={value!r})` is not supported{hint}; choose from: {known}"
    )


def normalize_report_to(report_to: Any) -> tuple[str, ...]:
    """``report_to`` as a tuple of supported names: ``"none"``/``None`` → ``()``, ``"all"`` → installed ones."""
    if report_to is None:
        return ()
    items = [report_to] if isinstance(report_to, str) else list(report_to)
    names: list[str] = []
    for item in items:
        if item == "none":
            continue
        if item == "all":
            candidates = [name for name in _LOGGERS if name != "csv" and trackers.installed(name)]
        elif isinstance(item, str) and item in REPORTERS:
            candidates = [item]
        else:
            raise _value_error(item)
        names += [name for name in candidates if name not in names]
    return tuple(names)


def _require_installed(name: str) -> None:
    if not trackers.installed(name):
        raise ImportError(
            f"`TrainingArguments(report_to={name!r})` needs the {name} package: pip install {trackers.pip_package(name)}"
        )


def _options(name: str, settings: TrackerSettings, env: Mapping[str, str]) -> dict[str, Any]:
    output_dir, run_name, project = settings.output_dir, settings.run_name, settings.project
    if name == "tensorboard":
        log_dir = env.get("TENSORBOARD_LOGGING_DIR")
        if log_dir:
            return {
                "save_dir": os.path.expanduser(log_dir),
                "name": "",
                "version": "",
                "default_hp_metric": False,
            }
        return {"save_dir": output_dir, "name": "runs", "version": run_name, "default_hp_metric": False}
    if name == "csv":
        return {"save_dir": output_dir, "name": "logs", "version": run_name}
    if name == "mlflow":
        return {
            "experiment_name": env.get("MLFLOW_EXPERIMENT_NAME", "Default"),
            "run_name": run_name,
            "tracking_uri": env.get("MLFLOW_TRACKING_URI"),
            "run_id": env.get("MLFLOW_RUN_ID"),
        }
    if name == "wandb":
        # no save_dir: wandb's own default (./wandb), where transformers' W&B callback writes
        return {"name": run_name, "project": env.get("WANDB_PROJECT", project)}
    options: dict[str, Any] = {"project": env.get("COMET_PROJECT_NAME", project)}
    if run_name is not None:
        options["name"] = run_name
    return options


def logger_specs(settings: TrackerSettings, env: Mapping[str, str]) -> tuple[LoggerSpec, ...]:
    """One :class:`LoggerSpec` per tracker in ``settings.report_to``; checks each package is installed."""
    specs = []
    for name in normalize_report_to(settings.report_to):
        if name in CALLBACK_REPORTERS:
            continue
        _require_installed(name)
        specs.append(LoggerSpec(name, tuple(_options(name, settings, env).items())))
    return tuple(specs)
