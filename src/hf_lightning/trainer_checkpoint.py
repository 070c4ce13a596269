"""Checkpoints of the Trainer (placeholder until the checkpoint issue lands)."""

from __future__ import annotations

from typing import Any

__all__ = ["TrainerCheckpointMixin"]


class TrainerCheckpointMixin:
    """``save_model``, ``save_state``, ``_save_checkpoint`` and resuming."""

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        raise NotImplementedError("Saving checkpoints during training is not implemented yet")

    def _load_from_checkpoint(self, resume_from_checkpoint: str) -> None:
        raise NotImplementedError("`train(resume_from_checkpoint=...)` is not implemented yet")

    def _load_optimizer_and_scheduler(self, checkpoint: str) -> None:
        raise NotImplementedError("`train(resume_from_checkpoint=...)` is not implemented yet")

    def _load_callback_state(self) -> None:
        """Restore stateful callbacks from ``state.stateful_callbacks`` (with resuming)."""

    def _after_training_checkpoints(self, trial: Any) -> None:
        """Load the best model and prune checkpoints at the end of training (with checkpoints)."""
