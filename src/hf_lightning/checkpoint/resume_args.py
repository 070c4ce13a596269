"""Warn when a run resumes with other step intervals or batch size than its checkpoint was written with.

transformers compares ``logging_steps``, ``eval_steps``, ``save_steps`` and the per-device train batch
size with the values stored in the checkpoint's ``trainer_state.json`` and warns once, one line per
difference. The run goes on with the new values.
"""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["compare_trainer_and_checkpoint_args", "resume_argument_differences"]

logger = logging.getLogger("hf_lightning.trainer_utils")

_STEP_FIELDS = ("logging_steps", "eval_steps", "save_steps")
_warned: set[str] = set()


def resume_argument_differences(training_args: Any, trainer_state: Any) -> list[str]:
    """One line per difference between the arguments and the checkpoint's state (none: an empty list)."""
    lines = []
    for name in _STEP_FIELDS:
        ours, stored = getattr(training_args, name, None), getattr(trainer_state, name, None)
        if ours is not None and stored is not None and ours != stored:
            lines.append(f"{name}: {ours} (from args) != {stored} (from trainer_state.json)")
    stored_batch = getattr(trainer_state, "train_batch_size", None)
    if stored_batch is not None:
        per_device = stored_batch // max(1, getattr(training_args, "n_gpu", 1) or 1)
        if training_args.per_device_train_batch_size != per_device:
            lines.append(
                f"per_device_train_batch_size: {training_args.per_device_train_batch_size} (from args) "
                f"!= {per_device} (from trainer_state.json)"
            )
    return lines


def compare_trainer_and_checkpoint_args(training_args: Any, trainer_state: Any) -> None:
    """Log the differences once per process (the same message is not repeated)."""
    lines = resume_argument_differences(training_args, trainer_state)
    if not lines:
        return
    message = (
        "Warning: The following arguments do not match the ones in the `trainer_state.json` within the "
        "checkpoint directory: " + "".join(f"\n\t{line}" for line in lines)
    )
    if message not in _warned:
        _warned.add(message)
        logger.warning(message)
