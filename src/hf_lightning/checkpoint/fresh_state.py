"""Say what starts fresh when a checkpoint is resumed without its optimizer or scheduler file.

A ``save_only_model`` checkpoint holds neither ``optimizer.pt`` nor ``scheduler.pt`` by design: resuming it
with a fresh optimizer is expected and logged at INFO. Any other checkpoint without them lost them (deleted
to save space, copied incompletely): transformers then continues silently with a fresh optimizer; here a
WARNING names the missing files and what starts over (``docs/divergences.md``). Either way the learning-rate
schedule continues from the restored step (``fast_forward_scheduler``).
"""

from __future__ import annotations

import logging
import os
import warnings
from typing import Any

from hf_lightning.checkpoint.io import CheckpointError, load_training_args
from hf_lightning.optim import steps_on_metric

__all__ = ["fast_forward_scheduler", "report_fresh_optimizer", "saved_only_model"]


def saved_only_model(checkpoint: str | os.PathLike[str], current_args: Any = None) -> bool:
    """Whether ``checkpoint`` was written with ``save_only_model=True``: its saved arguments say so, or,
    when they cannot be read, the current arguments do."""
    try:
        saved = load_training_args(checkpoint)
    except CheckpointError:
        saved = None
    if isinstance(saved, dict) and "save_only_model" in saved:
        return bool(saved["save_only_model"])
    return bool(getattr(current_args, "save_only_model", False))


def report_fresh_optimizer(
    log: logging.Logger, checkpoint: str, absent: str, step: int, current_args: Any = None
) -> None:
    """Log that ``checkpoint`` holds no ``absent`` (file names) and that the optimizer restarts: at INFO for a
    ``save_only_model`` checkpoint, else at WARNING."""
    if saved_only_model(checkpoint, current_args):
        log.info(
            "`%s` holds no %s (save_only_model): training continues with a fresh optimizer; the "
            "learning-rate schedule continues from step %d.",
            checkpoint,
            absent,
            step,
        )
        return
    log.warning(
        "`%s` holds no %s although it was not saved with save_only_model=True: the optimizer starts "
        "fresh (its moments and step counts restart from zero) and the learning-rate schedule is "
        "recomputed for step %d instead of restored, so training does not continue exactly as the "
        "interrupted run would have.",
        checkpoint,
        absent,
        step,
    )


def fast_forward_scheduler(scheduler: Any, steps: int) -> None:
    """Step ``scheduler`` ``steps`` times without an optimizer step, so its learning rate is that of ``steps``.

    Metric-driven schedulers (``ReduceLROnPlateau``, ``GreedyLR``) have no step-indexed schedule and are
    left as they are.
    """
    if scheduler is None or steps <= 0 or not hasattr(scheduler, "step"):
        return
    if steps_on_metric(scheduler):
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "scheduler.step() before optimizer.step()": intended here
        for _ in range(steps):
            scheduler.step()
