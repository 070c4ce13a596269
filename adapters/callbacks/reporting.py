"""The ``report_to`` callbacks of a Trainer, created with it and alive as long as it is.

``reporting_callbacks(args)`` turns the ``LoggerSpec`` values of ``report_to`` (adapters/loggers.py)
into HF callbacks, one per tracker in the order given, as transformers' integration callbacks:
TensorBoard gets :class:`TensorBoardReporter`; CSV, MLflow, W&B and Comet each get a
``LightningLoggersCallback``; Trackio gets ``TrackioReporter`` (adapters/callbacks/trackio.py). Because the Trainer holds them from construction, a standalone
``evaluate()`` is reported too.

:class:`TensorBoardReporter` writes what transformers' ``TensorBoardCallback`` writes, through
Lightning's ``TensorBoardLogger`` (its ``SummaryWriter``):

- where: ``$TENSORBOARD_LOGGING_DIR``, else ``<output_dir>/runs/<Mon DD_HH-MM-SS>_<host>`` chosen
  when training begins; in a hyperparameter-search trial
  ``<output_dir>/runs/<Mon DD_HH-MM-SS>_<host>/<trial name>``; logs that arrive before any training
  (an ``evaluate()`` first) go where a bare ``SummaryWriter()`` writes, ``./runs/<date>_<host>``;
- what: the arguments (``args``) and the model config (``model_config``) as text when training
  begins; every log at ``state.global_step`` as ``train/<key>``, ``eval/<key>`` or ``test/<key>``
  (numbers as scalars, strings as text), flushed after each log; the writer closes when training
  ends and reopens in the same folder for later logs.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from hf_lightning.args.trackers import tracker_settings
from hf_lightning.callbacks import TrainerCallback
from hf_lightning.plan.arguments import json_text_of

from ..loggers import LoggerSpec, logger_specs, normalize_report_to
from .logging import LightningLoggersCallback, prefixed_logs

__all__ = ["TensorBoardReporter", "default_run_dir", "reporting_callbacks"]

logger = logging.getLogger(__name__)


def default_run_dir() -> str:
    """``runs/<Mon DD_HH-MM-SS>_<host>``: the run folder PyTorch's ``SummaryWriter`` picks by default."""
    return os.path.join("runs", datetime.now().strftime("%b%d_%H-%M-%S") + "_" + socket.gethostname())


class TensorBoardReporter(TrainerCallback):
    """``report_to="tensorboard"``: transformers' TensorBoard layout, tags and text summaries."""

    transformers_names = ("TensorBoardCallback",)  # pop_callback(transformers' class) finds it (handler.py)

    def __init__(self, logging_dir: str | None = None) -> None:
        self.logging_dir = os.path.expanduser(logging_dir) if logging_dir else None
        self.tb_logger: Any = None  # lightning's TensorBoardLogger while a writer is open

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (a Ray trial) without the open writer: the copy opens its own."""
        return {**self.__dict__, "tb_logger": None}

    @property
    def writer(self) -> Any:
        """The open ``SummaryWriter`` (opened in ``logging_dir`` on first use)."""
        if self.tb_logger is None:
            from lightning.pytorch.loggers import TensorBoardLogger

            log_dir = self.logging_dir if self.logging_dir is not None else default_run_dir()
            self.tb_logger = TensorBoardLogger(save_dir=log_dir, name="", version="", default_hp_metric=False)
        return self.tb_logger.experiment

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if not state.is_world_process_zero:
            return
        if state.is_hyper_param_search and state.trial_name is not None:
            self.logging_dir = os.path.join(args.output_dir, default_run_dir(), state.trial_name)
        if self.logging_dir is None:
            self.logging_dir = os.path.join(args.output_dir, default_run_dir())
        self.writer.add_text("args", json_text_of(args))
        config = getattr(model, "config", None)
        if config is not None and hasattr(config, "to_json_string"):
            self.writer.add_text("model_config", config.to_json_string())

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero:
            return
        writer = self.writer
        for key, value in prefixed_logs(logs or {}).items():
            if isinstance(value, (int, float)):
                writer.add_scalar(key, value, state.global_step)
            elif isinstance(value, str):
                writer.add_text(key, value, state.global_step)
            else:
                logger.warning(
                    f"TensorBoard records numbers and text only: the log {key!r} holds a "
                    f"{type(value).__name__} ({value!r}) and is left out."
                )
        writer.flush()

    def on_train_end(self, args, state, control, **kwargs):
        if self.tb_logger is not None:
            self.tb_logger.experiment.close()
            self.tb_logger = None


def _callback_for(spec: LoggerSpec, env: Mapping[str, str]) -> TrainerCallback:
    if spec.name == "tensorboard":
        return TensorBoardReporter(env.get("TENSORBOARD_LOGGING_DIR"))
    return LightningLoggersCallback([spec])


def reporting_callbacks(args: Any, env: Mapping[str, str] | None = None) -> list[TrainerCallback]:
    """One callback per ``report_to`` tracker, in order; a missing tracker package raises ImportError."""
    env = dict(os.environ) if env is None else env
    callbacks = [_callback_for(spec, env) for spec in logger_specs(tracker_settings(args), env)]
    if "trackio" in normalize_report_to(args.report_to):
        from .trackio import TrackioReporter

        callbacks.append(TrackioReporter())
    if "kubeflow" in normalize_report_to(args.report_to):
        from hf_lightning.callbacks.kubeflow import KubeflowCallback

        callbacks.append(KubeflowCallback())
    return callbacks
