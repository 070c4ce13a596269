"""``BackgroundCheckpointing``: checkpoints written in the background while training goes on (opt-in).

Implements background saving for ``hf_lightning.Trainer``: pass ``callbacks=[BackgroundCheckpointing()]``.
Each save then waits only until the training state is copied to host memory; the files are written,
hashed and flushed to disk, the folder is published and old checkpoints are rotated in a thread of the
training process (:mod:`hf_lightning.checkpoint.background`). A save waits for the one before it, and so
does the end of ``train()`` (before the best model is loaded); an error of a background save (a full
disk, say) is raised in the training process at the first of: the next step end, the next save, the end
of ``train()``. ``TrainingArguments`` is unchanged: the callback is the switch.
"""

from __future__ import annotations

from typing import Any

from hf_lightning.callbacks.api import TrainerCallback
from hf_lightning.checkpoint.background import BackgroundSaver

__all__ = ["BackgroundCheckpointing", "background_saver"]


class BackgroundCheckpointing(TrainerCallback):
    """Write checkpoints in the background: ``Trainer(..., callbacks=[BackgroundCheckpointing()])``.

    From the first save to the end of ``train()`` the process holds one more copy of the checkpoint (weights
    and optimizer state) in host memory, which each save writes over. Errors of the background save are
    raised in the training process.
    """

    def __init__(self) -> None:
        self.saver = BackgroundSaver()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """A save that ended since: raise its error now, or run what follows it (a hub push)."""
        self.saver.poll()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Every save of the run has ended (the Trainer already waited, before loading the best model); the
        host copy of the state is freed."""
        self.saver.release()


def background_saver(callbacks: list[Any]) -> BackgroundSaver | None:
    """The saver of the first :class:`BackgroundCheckpointing` among ``callbacks``, ``None`` without one."""
    return next((cb.saver for cb in callbacks if isinstance(cb, BackgroundCheckpointing)), None)
