"""`CallbackHandler`: holds the Trainer's callbacks and calls each of them, in order, for every event.

Before dispatching, some events clear the control flag they own, as transformers' handler does:
``on_train_begin`` clears ``should_training_stop``, ``on_epoch_begin`` ``should_epoch_stop``,
``on_step_begin`` ``should_log`` / ``should_evaluate`` / ``should_save``, and ``on_evaluate``,
``on_save`` and ``on_log`` the flag of what they just did.
"""

from __future__ import annotations

from typing import Any

from hf_lightning.callbacks.api import TrainerCallback, TrainerControl
from hf_lightning.utils.logging import get_logger

__all__ = ["CallbackHandler"]

logger = get_logger(__name__)


class CallbackHandler(TrainerCallback):
    """Calls every callback for each event with the Trainer's objects, and returns the resulting control.

    Each callback receives ``model``, ``processing_class``, ``optimizer``, ``lr_scheduler``,
    ``train_dataloader`` and ``eval_dataloader`` (the Trainer sets the last two on the handler) plus the
    event's own keywords. A callback that returns a `TrainerControl` replaces the control passed to the
    callbacks after it and returned to the Trainer.
    """

    def __init__(self, callbacks, model, processing_class, optimizer, lr_scheduler):
        self.callbacks: list[TrainerCallback] = []
        for callback in callbacks:
            self.add_callback(callback)
        self.model = model
        self.processing_class = processing_class
        self.optimizer = optimizer
        self.lr_scheduler = lr_scheduler
        self.train_dataloader = None
        self.eval_dataloader = None
        from hf_lightning.callbacks.builtin import DefaultFlowCallback

        if not any(isinstance(cb, DefaultFlowCallback) for cb in self.callbacks):
            logger.warning(  # transformers' words, to the character, formatted before the call as there
                "The Trainer will not work properly if you don't have a `DefaultFlowCallback` in its callbacks. You\n"
                "should add one before training with `trainer.add_callback(DefaultFlowCallback). The current list of"
                f"callbacks is\n:{self.callback_list}"
            )

    # --- Managing the list ---

    def add_callback(self, callback) -> None:
        """Append a callback; a class is instantiated first. Warns when one of that class is already there."""
        instance = callback() if isinstance(callback, type) else callback
        cls = callback if isinstance(callback, type) else type(callback)
        if any(type(cb) is cls or _stands_for(cb, cls) for cb in self.callbacks):
            logger.warning(  # transformers' words, to the character, formatted before the call as there
                f"You are adding a {cls} to the callbacks of this Trainer, but there is already one. The current"
                f"list of callbacks is\n:{self.callback_list}"
            )
        self.callbacks.append(instance)

    def pop_callback(self, callback) -> TrainerCallback | None:
        """Remove and return the first callback of this class, or this very instance; None if absent."""
        for cb in self.callbacks:
            if _is_of_class(cb, callback) if isinstance(callback, type) else cb == callback:
                self.callbacks.remove(cb)
                return cb
        return None

    def remove_callback(self, callback) -> None:
        """Remove the first callback of this class (no-op if none), or this instance (ValueError if absent)."""
        if isinstance(callback, type):
            self.pop_callback(callback)
            return
        if callback not in self.callbacks:
            raise ValueError(
                f"`remove_callback({callback!r})`: this callback is not in the list; current callbacks:\n"
                + self.callback_list
            )
        self.callbacks.remove(callback)

    @property
    def callback_list(self) -> str:
        """The class names of the callbacks, one per line."""
        return "\n".join(type(cb).__name__ for cb in self.callbacks)

    # --- Events ---

    def on_init_end(self, args, state, control, **kwargs):
        return self.call_event("on_init_end", args, state, control, **kwargs)

    def on_train_begin(self, args, state, control, **kwargs):
        control.should_training_stop = False
        return self.call_event("on_train_begin", args, state, control, **kwargs)

    def on_train_end(self, args, state, control, **kwargs):
        return self.call_event("on_train_end", args, state, control, **kwargs)

    def on_epoch_begin(self, args, state, control, **kwargs):
        control.should_epoch_stop = False
        return self.call_event("on_epoch_begin", args, state, control, **kwargs)

    def on_epoch_end(self, args, state, control, **kwargs):
        return self.call_event("on_epoch_end", args, state, control, **kwargs)

    def on_step_begin(self, args, state, control, **kwargs):
        control.should_log = False
        control.should_evaluate = False
        control.should_save = False
        return self.call_event("on_step_begin", args, state, control, **kwargs)

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        return self.call_event("on_pre_optimizer_step", args, state, control, **kwargs)

    def on_optimizer_step(self, args, state, control, **kwargs):
        return self.call_event("on_optimizer_step", args, state, control, **kwargs)

    def on_substep_end(self, args, state, control, **kwargs):
        return self.call_event("on_substep_end", args, state, control, **kwargs)

    def on_step_end(self, args, state, control, **kwargs):
        return self.call_event("on_step_end", args, state, control, **kwargs)

    def on_evaluate(self, args, state, control, metrics, **kwargs):
        control.should_evaluate = False
        return self.call_event("on_evaluate", args, state, control, metrics=metrics, **kwargs)

    def on_predict(self, args, state, control, metrics, **kwargs):
        return self.call_event("on_predict", args, state, control, metrics=metrics, **kwargs)

    def on_save(self, args, state, control, **kwargs):
        control.should_save = False
        return self.call_event("on_save", args, state, control, **kwargs)

    def on_log(self, args, state, control, logs, **kwargs):
        control.should_log = False
        return self.call_event("on_log", args, state, control, logs=logs, **kwargs)

    def on_prediction_step(self, args, state, control, **kwargs):
        return self.call_event("on_prediction_step", args, state, control, **kwargs)

    def on_push_begin(self, args, state, control, **kwargs):
        return self.call_event("on_push_begin", args, state, control, **kwargs)

    def call_event(
        self, event: str, args: Any, state: Any, control: TrainerControl, **kwargs
    ) -> TrainerControl:
        """Call ``event`` on every callback in order; a returned control replaces the current one."""
        for callback in self.callbacks:
            result = getattr(callback, event)(
                args,
                state,
                control,
                model=self.model,
                processing_class=self.processing_class,
                optimizer=self.optimizer,
                lr_scheduler=self.lr_scheduler,
                train_dataloader=self.train_dataloader,
                eval_dataloader=self.eval_dataloader,
                **kwargs,
            )
            if result is not None:
                control = result
        return control


def _stands_for(callback: Any, cls: type) -> bool:
    """Whether ``callback`` (one of hf_lightning's) is what transformers' class ``cls`` is in transformers: a
    script that swaps only the Trainer import still names transformers' ``PrinterCallback`` or
    ``TensorBoardCallback`` in ``pop_callback``/``remove_callback``. A class says which transformers names
    it stands for in ``transformers_names`` (default: its own name)."""
    if not getattr(cls, "__module__", "").startswith("transformers."):
        return False
    for base in type(callback).__mro__:
        if base.__module__.startswith("hf_lightning") and cls.__name__ in getattr(
            base, "transformers_names", (base.__name__,)
        ):
            return True
    return False


def _is_of_class(callback: Any, cls: type) -> bool:
    return isinstance(callback, cls) or _stands_for(callback, cls)
