"""The HF side of the training loop: state, callback events and logging around each optimizer step.

``HFModule`` (Lightning) calls this driver at the points below; the driver keeps
``TrainerState`` and fires the ``TrainerCallback`` events in transformers' order::

    on_train_begin                                  # Lightning on_train_start
    (eval_on_start: evaluate)
    for epoch:                                      # Lightning epoch loop
        on_epoch_begin                              # Lightning on_train_epoch_start
        for window in epoch:                        # one Lightning training_step
            on_step_begin                           # first micro-batch of the window
            for micro-batch: training_step; on_substep_end (all but the last)
            clip gradients; on_pre_optimizer_step; optimizer.step(); on_optimizer_step
            scheduler.step(); global_step += 1
            on_step_end; maybe log / evaluate / save
        on_epoch_end; maybe log / evaluate / save   # Lightning on_train_epoch_end
    on_train_end                                    # after fit, in Trainer._finalize_training
"""

from __future__ import annotations

import math
import time
from typing import Any

import torch

from hf_lightning.callbacks.nonfinite import observe_loss, observe_step

__all__ = ["BRIDGED_EVENTS", "TrainLoopDriver"]

# Where each TrainerCallback event fires (a contract test checks that none is missing).
BRIDGED_EVENTS: dict[str, str] = {
    "on_init_end": "Trainer.__init__",
    "on_train_begin": "HFModule.on_train_start -> TrainLoopDriver.on_train_begin",
    "on_epoch_begin": "HFModule.on_train_epoch_start -> TrainLoopDriver.on_epoch_begin",
    "on_step_begin": "HFModule.training_step, first micro-batch of the window",
    "on_substep_end": "HFModule.training_step, after each micro-batch but the last",
    "on_pre_optimizer_step": "HFModule.on_before_optimizer_step, after clipping",
    "on_optimizer_step": "HFModule.training_step, after optimizer.step()",
    "on_step_end": "HFModule.training_step, after the scheduler step",
    "on_log": "Trainer.log",
    "on_evaluate": "Trainer.evaluate",
    "on_prediction_step": "Trainer.evaluation_loop, after each batch",
    "on_predict": "Trainer.predict",
    "on_save": "Trainer._maybe_log_save_evaluate, after a checkpoint",
    "on_epoch_end": "HFModule.on_train_epoch_end -> TrainLoopDriver.on_epoch_end",
    "on_train_end": "Trainer._finalize_training, after the final metrics",
    "on_push_begin": "not fired: pushing to the Hub is not supported yet (push_to_hub raises)",
}


class TrainLoopDriver:
    """Drives ``HFModule`` for ``hf_lightning.Trainer``; one instance per ``train()`` call."""

    places_inputs = True
    """``Trainer._prepare_inputs`` puts each micro-batch on the device (as in transformers)."""

    def __init__(
        self,
        trainer: Any,
        *,
        steps_in_epoch: int,
        epochs_trained: int,
        trial: Any,
        ignore_keys_for_eval: list[str] | None,
        steps_trained_in_current_epoch: int = 0,
    ) -> None:
        self.trainer = trainer
        self.steps_in_epoch = steps_in_epoch
        self.epochs_trained = epochs_trained
        self.trial = trial
        self.ignore_keys_for_eval = ignore_keys_for_eval
        self._first_epoch_skip = steps_trained_in_current_epoch
        self.step = -1
        self.grad_norm: float | None = None
        self.learning_rate: float | None = None
        self.start_time = time.time()
        self.module: Any = None

    def bind(self, module: Any) -> None:
        self.module = module

    # --- helpers ---------------------------------------------------------------------------
    def _event(self, name: str, **kwargs: Any) -> None:
        t = self.trainer
        t.control = getattr(t.callback_handler, name)(t.args, t.state, t.control, **kwargs)

    @property
    def epoch(self) -> int:
        return self.epochs_trained + self.module.current_epoch

    def _maybe_log_save_evaluate(self) -> None:
        t = self.trainer
        t._maybe_log_save_evaluate(
            t._tr_loss,
            self.grad_norm,
            t.model,
            self.trial,
            self.epoch,
            self.ignore_keys_for_eval,
            self.start_time,
            learning_rate=self.learning_rate,
        )
        if t.control.should_training_stop:
            self.module.trainer.should_stop = True

    # --- events ----------------------------------------------------------------------------
    def on_train_begin(self) -> None:
        t = self.trainer
        t.model.zero_grad()
        self.start_time = time.time()
        t._train_start_time = self.start_time
        for attr in ("model", "optimizer", "lr_scheduler"):
            setattr(t.callback_handler, attr, getattr(t, attr))
        self._event("on_train_begin")
        if t.args.eval_on_start:
            t._evaluate(self.trial, self.ignore_keys_for_eval, skip_scheduler=True)

    def on_epoch_begin(self) -> None:
        self.step = -1
        skipping = self._first_epoch_skip > 0
        if self._first_epoch_skip:
            self.step = self._first_epoch_skip - 1
            self._first_epoch_skip = 0
        self._event("on_epoch_begin")
        self.trainer._on_resume_point("epoch", skipping=skipping)  # RNG restore (trainer_checkpoint)
        # Lightning counts the epochs of this fit only; a resumed run's data order needs the run's epoch.
        loader: Any = getattr(self.module.trainer, "train_dataloader", None)
        if callable(getattr(loader, "set_epoch", None)):
            loader.set_epoch(self.epoch)

    def training_step(self, model: Any, inputs: Any, num_items_in_batch: Any) -> torch.Tensor:
        t = self.trainer
        t.current_gradient_accumulation_steps = self.module.window_size
        return t.training_step(model, inputs, num_items_in_batch)

    def on_step_begin(self) -> None:
        self.trainer._on_resume_point("step")
        self._event("on_step_begin")

    def on_micro_batch_end(self, inputs: Any, loss: torch.Tensor) -> None:
        t = self.trainer
        self.step += 1
        observe_loss(t, loss)  # non-finite loss: warn once, StopOnNonFinite raises (callbacks/nonfinite.py)
        if t.args.logging_nan_inf_filter and not math.isfinite(loss.item()):  # NaN or ±inf
            t._tr_loss += t._tr_loss / (1 + t.state.global_step - t._globalstep_last_logged)
        else:
            t._tr_loss += loss.to(t._tr_loss.device)
        t.current_flos += float(t.floating_point_ops(inputs))
        t._track_num_input_tokens(inputs)

    def on_substep_end(self) -> None:
        self._event("on_substep_end")

    def on_pre_optimizer_step(self) -> None:
        self._event("on_pre_optimizer_step")

    def on_optimizer_step(self) -> None:
        self._event("on_optimizer_step")

    def on_step_end(self, grad_norm: float | None, learning_rate: float) -> None:
        t = self.trainer
        self.grad_norm, self.learning_rate = grad_norm, learning_rate
        t.state.global_step += 1
        t.state.epoch = self.epoch + (self.step + 1) / self.steps_in_epoch
        observe_step(t, grad_norm)  # first non-finite weight: warn once (callbacks/nonfinite.py)
        self._event("on_step_end")
        self._maybe_log_save_evaluate()

    def should_stop_epoch(self) -> bool:
        control = self.trainer.control
        return bool(control.should_epoch_stop or control.should_training_stop)

    def on_epoch_end(self) -> None:
        t = self.trainer
        if self.step < 0:
            t.control.should_training_stop = True
        self._event("on_epoch_end")
        self._maybe_log_save_evaluate()

    def on_train_end(self) -> None:
        """Nothing here: transformers fires ``on_train_end`` after the final metrics are logged."""
