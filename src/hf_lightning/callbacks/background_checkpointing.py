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
from hf_lightning.checkpoint.weights import unwrap_model

__all__ = ["BackgroundCheckpointing", "background_saver"]


class BackgroundCheckpointing(TrainerCallback):
    """Write checkpoints in the background: ``Trainer(..., callbacks=[BackgroundCheckpointing()])``.

    From the first optimizer step to the end of ``train()`` the process that saves holds one more copy of the
    checkpoint (weights and optimizer state) in host memory, which each save writes over: it is faulted in
    after the first step, on a thread of its own, so that the first save does not wait for new memory.
    Errors of the background save are raised in the training process.
    """

    def __init__(self) -> None:
        self.saver = BackgroundSaver()
        self._prepared = False

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """A new run prepares its host copy after its first step."""
        self._prepared = False

    def on_step_end(
        self, args: Any, state: Any, control: Any, model: Any = None, optimizer: Any = None, **kwargs: Any
    ) -> None:
        """A save that ended since: raise its error now, or run what follows it (a hub push). After the first
        step (the optimizer's state exists), the host memory of the first save is prepared."""
        self.saver.poll()
        if not self._prepared:
            self._prepared = True
            if _saves_plain_state(args) and model is not None:
                states = [unwrap_model(model).state_dict()]
                if optimizer is not None and not getattr(args, "save_only_model", False):
                    states.append(optimizer.state_dict())
                self.saver.prepare(states)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Every save of the run has ended (the Trainer already waited, before loading the best model); the
        host copy of the state is freed."""
        self.saver.release()


def _saves_plain_state(args: Any) -> bool:
    """Whether this process snapshots the model's and optimizer's own tensors at a save: it writes the
    checkpoint and the model is not sharded (FSDP and DeepSpeed saves gather new tensors each time)."""
    strategy = getattr(args, "save_strategy", "steps")
    return (
        getattr(strategy, "value", strategy) != "no"
        and bool(getattr(args, "should_save", True))
        and not getattr(args, "fsdp", None)
        and not getattr(args, "deepspeed", None)
    )


def background_saver(callbacks: list[Any]) -> BackgroundSaver | None:
    """The saver of the first :class:`BackgroundCheckpointing` among ``callbacks``, ``None`` without one."""
    return next((cb.saver for cb in callbacks if isinstance(cb, BackgroundCheckpointing)), None)
