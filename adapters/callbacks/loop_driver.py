"""The HF-event bridge: ``TrainerState``, callback events and logging around each optimizer step.

``HFModule`` (Lightning) calls this driver at the points below; the driver keeps the facade's
``TrainerState`` and fires the ``TrainerCallback`` events in transformers' order. It talks to the
``hf_lightning.Trainer`` only through the public surface typed by
``hf_lightning.adapters.protocols.TrainerFacade`` (the bookkeeping of the run is ``trainer.run``)::

    on_train_begin                                  # Lightning on_train_start
    (eval_on_start: evaluate)
    for epoch:                                      # Lightning epoch loop
        on_epoch_begin                              # Lightning on_train_epoch_start
        for window in epoch:                        # one Lightning training_step
            on_step_begin                           # before the window's first micro-batch
            for micro-batch: training_step; on_substep_end (all but the last)
            clip gradients; on_pre_optimizer_step; optimizer.step(); on_optimizer_step
            scheduler.step(); global_step += 1
            on_step_end; maybe log / evaluate / save
        on_epoch_end; maybe log / evaluate / save   # Lightning on_train_epoch_end
    on_train_end                                    # after fit, once the final metrics are logged
"""

from __future__ import annotations

from typing import Any

import torch

from ..protocols import TrainerFacade

__all__ = ["BRIDGED_EVENTS", "TrainLoopDriver"]

# Where each TrainerCallback event fires (a contract test checks that none is missing).
BRIDGED_EVENTS: dict[str, str] = {
    "on_init_end": "Trainer.__init__",
    "on_train_begin": "HFModule.on_train_start -> TrainLoopDriver.on_train_begin",
    "on_epoch_begin": "HFModule.on_train_epoch_start -> TrainLoopDriver.on_epoch_begin",
    "on_step_begin": "HFModule.training_step, before the window's first micro-batch",
    "on_substep_end": "HFModule.training_step, after each micro-batch but the last",
    "on_pre_optimizer_step": "HFModule.on_before_optimizer_step, after clipping",
    "on_optimizer_step": "HFModule.training_step, after optimizer.step()",
    "on_step_end": "HFModule.training_step, after the scheduler step",
    "on_log": "Trainer.log",
    "on_evaluate": "Trainer.evaluate",
    "on_prediction_step": "Trainer.evaluation_loop, after each batch",
    "on_predict": "Trainer.predict",
    "on_save": "Trainer._maybe_log_save_evaluate (via TrainingRun.log_save_evaluate), after a checkpoint",
    "on_epoch_end": "HFModule.on_train_epoch_end -> TrainLoopDriver.on_epoch_end",
    "on_train_end": "Trainer._inner_training_loop (TrainLauncher), after the final metrics",
    "on_push_begin": "not fired: pushing to the Hub is not supported yet (push_to_hub raises)",
}


class TrainLoopDriver:
    """Drives ``HFModule`` for ``hf_lightning.Trainer``; one instance per ``train()`` call."""

    places_inputs = True
    """``Trainer._prepare_inputs`` puts each micro-batch on the device (as in transformers)."""

    def __init__(
        self,
        trainer: TrainerFacade,
        *,
        steps_in_epoch: int,
        epochs_trained: int,
        steps_trained_in_current_epoch: int = 0,
    ) -> None:
        self.trainer = trainer
        self.run = trainer.run
        """The run object this fit moves forward (it holds ``state`` and ``control``)."""
        self.steps_in_epoch = steps_in_epoch
        self.epochs_trained = epochs_trained
        self.first_epoch_skip = steps_trained_in_current_epoch
        self.step = -1
        self.grad_norm: float | None = None
        self.learning_rate: float | None = None
        self.module: Any = None
        self.began = False
        """Whether ``on_train_begin`` ran (Lightning skips its loop when a resumed run is already at max_steps)."""
        self.micro_batch = 0
        """The index of the running micro-batch in its accumulation window."""
        self.training_step = trainer.run.train_micro_batch
        """One micro-batch, called by ``HFModule.training_step``: straight into the run object (the overridable
        ``Trainer.training_step``, then the loss, FLOPs and tokens added), the engine's one call into the facade."""
        self.own_learning_rate = _overridden(trainer, "_get_learning_rate")
        """Whether a subclass (or the instance) replaced ``Trainer._get_learning_rate``: then it gives the rate
        logged at each step, as in transformers."""
        self.asked_learning_rate: float | None = None
        self.own_batch_samples = any(
            _overridden(trainer, n) for n in ("get_batch_samples", "_get_num_items_in_batch")
        )
        """Whether a subclass gives each window's micro-batches and item count (transformers' loop asks them of
        ``get_batch_samples``, which counts with ``_get_num_items_in_batch``)."""

    @property
    def trial(self) -> Any:
        """The search trial of this run (None outside a hyperparameter search)."""
        return self.trainer.run.trial

    def bind(self, module: Any) -> None:
        self.module = module

    # --- helpers ---------------------------------------------------------------------------
    def _event(self, name: str, **kwargs: Any) -> None:
        t = self.trainer
        self.run.control = getattr(t.callback_handler, name)(t.args, t.state, t.control, **kwargs)

    @property
    def epoch(self) -> int:
        return self.epochs_trained + self.module.current_epoch

    def _log_save_evaluate(self, grad_norm: float | None, learning_rate: float | None) -> None:
        t = self.trainer
        t.run.log_save_evaluate(grad_norm, self.epoch, learning_rate)
        if t.control.should_training_stop:
            self.module.trainer.should_stop = True

    # --- events ----------------------------------------------------------------------------
    def on_train_begin(self) -> None:
        t = self.trainer
        self.began = True
        t.model.zero_grad()
        engine = getattr(self.module.trainer.strategy, "deepspeed_engine", None)
        if engine is not None:  # transformers' trainer.deepspeed: the engine training the model
            self.run.deepspeed = engine
        t.run.start()
        for attr in ("model", "optimizer", "lr_scheduler"):
            setattr(t.callback_handler, attr, getattr(t, attr))
        self._event("on_train_begin")
        t.run.evaluate_on_start()  # when eval_on_start

    def on_epoch_begin(self) -> None:
        self.step = -1
        skipping = self.first_epoch_skip > 0
        if self.first_epoch_skip:
            self.step = self.first_epoch_skip - 1
            self.first_epoch_skip = 0
        self._event("on_epoch_begin")
        self.trainer.run.on_resume_point("epoch", skipping=skipping)  # RNG restore of a resumed run
        # Lightning counts the epochs of this fit only; a resumed run's data order needs the run's epoch.
        loader: Any = getattr(self.module.trainer, "train_dataloader", None)
        if callable(getattr(loader, "set_epoch", None)):
            loader.set_epoch(self.epoch)

    def on_step_begin(self) -> None:
        self.micro_batch = 0
        self.run.current_gradient_accumulation_steps = self.module.window_size
        # the window's items: read only when the loss looks degenerate (no target)
        self.run.window_items = self.module.window_items
        self._sync_gradients()
        self.trainer.run.on_resume_point("step")
        self._event("on_step_begin")

    def _sync_gradients(self) -> None:
        """accelerate's ``sync_gradients``: True from the micro-batch that completes the optimizer step until the
        next window begins."""
        self.trainer.accelerator.gradient_state.sync_gradients = (
            self.micro_batch >= self.module.window_size - 1
        )

    def on_micro_batch_end(self, inputs: Any, loss: torch.Tensor) -> None:
        self.step += 1
        self.micro_batch += 1  # (its loss, FLOPs and tokens were added by ``run.train_micro_batch``)
        self._sync_gradients()

    def on_substep_end(self) -> None:
        self._event("on_substep_end")

    def on_pre_optimizer_step(self) -> None:
        self._event("on_pre_optimizer_step")

    def on_optimizer_step(self) -> None:
        self._event("on_optimizer_step")
        if self.own_learning_rate:  # transformers asks it between the update and the scheduler's step
            self.asked_learning_rate = self.trainer._get_learning_rate()

    def on_step_end(self, grad_norm: float | None, learning_rate: float) -> None:
        t = self.trainer
        if self.own_learning_rate and self.asked_learning_rate is not None:
            learning_rate = self.asked_learning_rate
        self.run.state.global_step += 1
        self.run.state.epoch = self.epoch + (self.step + 1) / self.steps_in_epoch
        self.grad_norm, self.learning_rate = grad_norm, learning_rate
        t.run.after_optimizer_step(grad_norm)
        self._event("on_step_end")
        self._log_save_evaluate(grad_norm, learning_rate)

    def batch_samples(self, window: list) -> tuple[list, Any] | None:
        """The window's micro-batches and ``num_items_in_batch`` as the Trainer subclass's ``get_batch_samples``
        gives them (on the training device: transformers passes ``args.device``); None when not overridden."""
        if not self.own_batch_samples:
            return None
        t = self.trainer
        batches, count = t.get_batch_samples(iter(window), len(window), t.accelerator.device)
        if not batches:
            raise ValueError(
                f"{type(t).__name__}.get_batch_samples returned no micro-batch for a window of {len(window)}: "
                "it must return the list of micro-batches of one optimizer step and their item count"
            )
        return list(batches), count

    def should_stop_epoch(self) -> bool:
        control = self.trainer.control
        return bool(control.should_epoch_stop or control.should_training_stop)

    def on_epoch_end(self) -> None:
        t = self.trainer
        if self.step < 0:  # the epoch yielded no batch: an error before the run's first step, else a warning
            t.run.empty_epoch()
            self.run.control.should_training_stop = True
        self._event("on_epoch_end")
        self._log_save_evaluate(self.grad_norm, self.learning_rate)

    def on_train_end(self) -> None:
        """Nothing here: transformers fires ``on_train_end`` after the final metrics are logged."""


def _overridden(trainer: Any, name: str) -> bool:
    """Whether ``trainer``'s method ``name`` is not hf_lightning's own (a subclass's, or patched on the instance)."""
    if name in vars(trainer):
        return True
    owner = next(klass for klass in type(trainer).__mro__ if name in vars(klass))
    return not owner.__module__.startswith("hf_lightning.")
