"""One checkpoint save during training, in the order transformers keeps: best → save → rotate.

Both savers (``hf_lightning.Trainer`` and the ``HFCheckpoint`` Lightning callback) call
:func:`save_tracked_checkpoint`, so a run's folders, its ``best_model_checkpoint`` and its rotation
follow one rule::

    best_model_checkpoint = checkpoint-{best_global_step}  # when that step is the one being saved,
                                                           # or its folder is still on disk
    write checkpoint-{step}                                # (its trainer_state.json names the best)
    rotate: keep save_total_limit folders, the best always among them (the saving process only)
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

from hf_lightning.checkpoint.io import CheckpointError
from hf_lightning.checkpoint.store import checkpoint_path, rotate_checkpoints, sorted_checkpoints
from hf_lightning.checkpoint.verify import verify_model_files

__all__ = ["best_checkpoint_for", "loadable_best_checkpoint", "save_tracked_checkpoint"]


def best_checkpoint_for(
    run_dir: str, step: int, best_global_step: int | None, current: str | None
) -> str | None:
    """The best checkpoint folder once ``checkpoint-{step}`` is written (``current`` when unchanged)."""
    if best_global_step is None:
        return current
    best = checkpoint_path(run_dir, best_global_step)
    if best_global_step == step or os.path.isdir(best):
        return best
    return current


def save_tracked_checkpoint(
    run_dir: str,
    step: int,
    *,
    best_global_step: int | None,
    best_model_checkpoint: str | None,
    write: Callable[[str | None], str],
    save_total_limit: int | None,
    is_saver: bool,
) -> tuple[str, str | None]:
    """Track the best folder, ``write(best)`` ``checkpoint-{step}``, rotate; returns (folder, best)."""
    best = best_checkpoint_for(run_dir, step, best_global_step, best_model_checkpoint)
    folder = write(best)
    if is_saver:
        rotate_checkpoints(run_dir, save_total_limit, best)
    return folder, best


def loadable_best_checkpoint(best: str, log: logging.Logger) -> str:
    """The folder ``load_best_model_at_end`` loads: ``best`` when its model files are intact, else the newest
    intact checkpoint beside it, with a warning naming the damaged file (docs/checkpointing.md).

    Raises :class:`CheckpointError` naming the damaged file of ``best`` when no other checkpoint is intact:
    the model then keeps the weights of the last training step, and the caller says so.
    """
    try:
        verify_model_files(best)  # checkpoint/verify.py: the manifest's sizes and checksums
        return best
    except CheckpointError as exc:
        damage = exc
    for folder in reversed(sorted_checkpoints(os.path.dirname(os.path.normpath(best)))):
        if os.path.normpath(folder) == os.path.normpath(best):
            continue
        try:
            verify_model_files(folder)
        except CheckpointError:
            continue
        log.warning(
            "load_best_model_at_end: the best checkpoint `%s` is damaged (%s); loading the newest intact "
            "checkpoint `%s` instead, so the model is not the best one. Every checkpoint is kept.",
            best,
            str(damage).rstrip("."),
            folder,
        )
        return folder
    raise CheckpointError(
        f"load_best_model_at_end: the best checkpoint `{best}` is damaged ({str(damage).rstrip('.')}) and no "
        "other checkpoint beside it is intact; the model keeps the weights of the last training step. "
        "Every checkpoint is kept.",
        damage.path,
    ) from damage
