"""Loading a checkpoint's optimizer, scheduler and gradient-scaler states (``optimizer.pt``, ``scheduler.pt``,
``scaler.pt``) back into their objects, without unpickling code (``torch.load(weights_only=True)``).

The folder format and the writing side: :mod:`hf_lightning.checkpoint.store`.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from hf_lightning.checkpoint.folders import OPTIMIZER_NAME, SCALER_NAME, SCHEDULER_NAME
from hf_lightning.checkpoint.io import CheckpointError, safe_torch_load

__all__ = ["load_optimizer_and_scheduler"]

logger = logging.getLogger(__name__)


def load_optimizer_and_scheduler(
    folder: str | os.PathLike[str],
    optimizer: Any,
    scheduler: Any = None,
    scaler: Any = None,
    map_location: Any = "cpu",
) -> list[str]:
    """Restore ``optimizer`` / ``scheduler`` / ``scaler`` from ``folder``; returns the file names loaded.

    Each file is read with ``torch.load(weights_only=True)``. A file that is absent is skipped and logged
    (a ``save_only_model`` checkpoint has none); one that is damaged, unsafe or does not fit its target
    raises :class:`CheckpointError` naming it.
    """
    folder = os.fspath(folder)
    loaded = []
    for name, target, location in (
        (OPTIMIZER_NAME, optimizer, map_location),
        (SCHEDULER_NAME, scheduler, "cpu"),
        (SCALER_NAME, scaler, "cpu"),
    ):
        if target is None:
            continue
        path = os.path.join(folder, name)
        if not os.path.isfile(path):
            logger.info("No %s in `%s`; the %s keeps its current state.", name, folder, type(target).__name__)
            continue
        state_dict = safe_torch_load(path, map_location=location)
        try:
            target.load_state_dict(state_dict)
        except (ValueError, KeyError, RuntimeError, TypeError, IndexError) as exc:
            raise CheckpointError(
                f"`{path}` does not fit the given {type(target).__name__}: {exc}", path
            ) from exc
        loaded.append(name)
    return loaded
