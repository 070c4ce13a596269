"""The plan's reporting group: what the engine's loggers read (``report_to`` and where each tracker writes)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["TrackerSettings"]


@dataclass(frozen=True)
class TrackerSettings:
    """The values Lightning's loggers are built from; :func:`hf_lightning.args.trackers.tracker_settings`
    builds it from ``TrainingArguments``."""

    report_to: Any
    """``report_to`` as given (a name, a list of names, ``"all"`` or ``"none"``), normalised by the engine."""
    output_dir: str
    """``output_dir`` (``"trainer_output"`` when unset): TensorBoard's ``runs/`` and the CSV ``logs/`` go under it."""
    run_name: str | None
    """``run_name``: the version folder of TensorBoard and CSV, and the run's name in the hosted trackers."""
    project: str
    """``project`` (``"huggingface"`` when unset): the hosted trackers' project unless their variable names one."""
