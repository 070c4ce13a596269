"""transformers' just-in-time checkpoint API: :class:`CheckpointManager` and :class:`JITCheckpointCallback`.

With ``TrainingArguments(enable_jit_checkpoint=True)`` the Trainer lists a :class:`JITCheckpointCallback`
among its callbacks, as transformers does, and its manager takes SIGTERM from ``Trainer(...)`` on. A
SIGTERM asks for a checkpoint ``kill_wait`` seconds later (the orchestrator's SIGKILL would come first if
it was not a preemption); at the next step boundary the callback writes ``checkpoint-{global_step}``
through ``Trainer._save_checkpoint`` and stops the training.

While ``train()`` runs on Lightning, Lightning's JIT callback (``adapters/callbacks/jit_checkpoint.py``)
holds SIGTERM instead: every rank stops after the same step, and the timings of the grace period are
logged. The manager's handler is back in place between ``train()`` calls, and the handler the process had
before the Trainer once ``train()`` ends (:meth:`JITCheckpointCallback.release`).
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

from hf_lightning.callbacks import TrainerCallback
from hf_lightning.trainer_utils import PREFIX_CHECKPOINT_DIR
from hf_lightning.utils.logging import get_logger

__all__ = ["CheckpointManager", "JITCheckpointCallback", "jit_callbacks", "release_sigterm"]

logger = get_logger(__name__)

_SENTINEL = "checkpoint-is-incomplete.txt"


class CheckpointManager:
    """SIGTERM to a checkpoint request, and the checkpoint itself, for one Trainer.

    Args:
        trainer: the Trainer that writes the checkpoint (its ``_save_checkpoint``).
        kill_wait: seconds between SIGTERM and the request (a SIGKILL within them means no preemption).
    """

    def __init__(self, trainer: Any, kill_wait: int = 3) -> None:
        self.trainer = trainer
        self.kill_wait = kill_wait
        self.is_checkpoint_requested = False
        self._original_sigterm_handler: Any = None

    def setup_signal_handler(self) -> None:
        """Take SIGTERM, keeping the handler it replaces for :meth:`restore_signal_handler`."""
        self._original_sigterm_handler = signal.signal(signal.SIGTERM, self._sigterm_handler)
        logger.info("JIT checkpoint signal handler registered for SIGTERM")

    def restore_signal_handler(self) -> None:
        """Give SIGTERM back to the handler :meth:`setup_signal_handler` replaced (if it still holds it)."""
        if (
            self._original_sigterm_handler is not None
            and signal.getsignal(signal.SIGTERM) == self._sigterm_handler
        ):
            signal.signal(signal.SIGTERM, self._original_sigterm_handler)

    def _sigterm_handler(self, signum: int, frame: Any) -> None:
        if self.is_checkpoint_requested:
            return
        logger.info("SIGTERM received, will request JIT checkpoint after %ss", self.kill_wait)
        timer = threading.Timer(self.kill_wait, self._enable_checkpoint)
        timer.daemon = True  # a process ending anyway does not wait for it
        timer.start()

    def _enable_checkpoint(self) -> None:
        logger.info("Kill wait period elapsed, requesting checkpoint")
        self.is_checkpoint_requested = True

    def execute_jit_checkpoint(self) -> None:
        """Write ``checkpoint-{global_step}`` now (the request is cleared first: one checkpoint per request).

        A marker file says the folder is incomplete while it is written; the Trainer's crash-safe save
        publishes a complete folder in its place, so the marker is gone once the checkpoint is."""
        self.is_checkpoint_requested = False
        trainer = self.trainer
        step = trainer.state.global_step
        folder = os.path.join(trainer._get_output_dir(trial=None), f"{PREFIX_CHECKPOINT_DIR}-{step}")
        logger.info("Saving JIT checkpoint at step %d", step)
        try:
            os.makedirs(folder, exist_ok=True)
            sentinel = os.path.join(folder, _SENTINEL)
            with open(sentinel, "w", encoding="utf-8") as handle:
                handle.write(f"Checkpoint started at step {step} and in progress...")
            trainer._save_checkpoint(trainer.model, trial=None)
            if os.path.exists(sentinel):
                os.remove(sentinel)
        except Exception as exc:
            logger.error("Failed to save JIT checkpoint: %s", exc)
            raise
        logger.info("Immediate JIT checkpoint completed successfully")


class JITCheckpointCallback(TrainerCallback):
    """Writes the requested JIT checkpoint at the next step boundary and stops the training."""

    def __init__(self) -> None:
        self.trainer: Any = None
        self.jit_manager: CheckpointManager | None = None

    def set_trainer(self, trainer: Any) -> None:
        """Bind ``trainer``; with ``enable_jit_checkpoint`` its manager takes SIGTERM at once."""
        self.trainer = trainer
        if trainer.args.enable_jit_checkpoint:
            self.jit_manager = CheckpointManager(trainer=trainer)
            self.jit_manager.setup_signal_handler()
            logger.info("JIT checkpointing enabled")

    def release(self) -> None:
        """Give SIGTERM back to the process's own handler (the end of ``train()``)."""
        if self.jit_manager is not None:
            self.jit_manager.restore_signal_handler()

    def _checkpoint_if_requested(self, control: Any, *, skip_scheduled_save: bool) -> None:
        if self.jit_manager is not None and self.jit_manager.is_checkpoint_requested:
            if skip_scheduled_save:
                control.should_save = False
            control.should_training_stop = True
            self.jit_manager.execute_jit_checkpoint()

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._checkpoint_if_requested(control, skip_scheduled_save=False)

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._checkpoint_if_requested(control, skip_scheduled_save=False)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._checkpoint_if_requested(control, skip_scheduled_save=True)

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._checkpoint_if_requested(control, skip_scheduled_save=True)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.release()


def jit_callbacks(trainer: Any) -> list[JITCheckpointCallback]:
    """The Trainer's JIT callback under ``enable_jit_checkpoint`` (bound, its manager holding SIGTERM)."""
    if not trainer.args.enable_jit_checkpoint:
        return []
    callback = JITCheckpointCallback()
    callback.set_trainer(trainer)
    return [callback]


def release_sigterm(callbacks: Any) -> None:
    """The end of ``train()``: each JIT callback gives SIGTERM back to the process's own handler."""
    for callback in callbacks:
        if isinstance(callback, JITCheckpointCallback):
            callback.release()
