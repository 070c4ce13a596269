"""The callback vocabulary: ``TrainerCallback``, its state and control, the handler and the built-in callbacks."""

from __future__ import annotations

from hf_lightning.callbacks.api import (
    TRAINER_EVENTS,
    ExportableState,
    TrainerCallback,
    TrainerControl,
    TrainerState,
)
from hf_lightning.callbacks.background_checkpointing import BackgroundCheckpointing
from hf_lightning.callbacks.builtin import (
    DefaultFlowCallback,
    EarlyStoppingCallback,
    PrinterCallback,
    ProgressCallback,
)
from hf_lightning.callbacks.handler import (
    CallbackHandler,
)
from hf_lightning.callbacks.kubeflow import (
    KubeflowCallback,
    is_kubeflow_available,
)
from hf_lightning.callbacks.nonfinite import NonFiniteError, StopOnNonFinite

__all__ = [
    "BackgroundCheckpointing",
    "KubeflowCallback",
    "is_kubeflow_available",
    "CallbackHandler",
    "DefaultFlowCallback",
    "EarlyStoppingCallback",
    "ExportableState",
    "NonFiniteError",
    "PrinterCallback",
    "ProgressCallback",
    "StopOnNonFinite",
    "TRAINER_EVENTS",
    "TrainerCallback",
    "TrainerControl",
    "TrainerState",
]
