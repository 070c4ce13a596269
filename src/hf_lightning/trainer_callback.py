"""``transformers.trainer_callback``'s path: the callback API (home: ``hf_lightning.callbacks``)."""

from __future__ import annotations

from hf_lightning.args.enums import IntervalStrategy, SaveStrategy
from hf_lightning.args.training_args import TrainingArguments
from hf_lightning.callbacks import (
    CallbackHandler,
    DefaultFlowCallback,
    EarlyStoppingCallback,
    ExportableState,
    PrinterCallback,
    ProgressCallback,
    TrainerCallback,
    TrainerControl,
    TrainerState,
)
from hf_lightning.callbacks.handler import logger
from hf_lightning.trainer_utils import has_length

__all__ = [
    "CallbackHandler",
    "DefaultFlowCallback",
    "EarlyStoppingCallback",
    "ExportableState",
    "IntervalStrategy",
    "PrinterCallback",
    "ProgressCallback",
    "SaveStrategy",
    "TrainerCallback",
    "TrainerControl",
    "TrainerState",
    "TrainingArguments",
    "has_length",
    "logger",
]
