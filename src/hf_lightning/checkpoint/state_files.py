"""Loading a checkpoint's optimizer, scheduler and gradient-scaler states (``optimizer.pt``, ``scheduler.pt``,
``scaler.pt``) back into their objects, without unpickling code (``torch.load(weights_only=True)``); writing
``trainer_state.json`` and the caller's extra files.

The folder format and the rest of the writing side: :mod:`hf_lightning.checkpoint.store`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from typing import Any

from hf_lightning.checkpoint.folders import OPTIMIZER_NAME, SCALER_NAME, SCHEDULER_NAME
from hf_lightning.checkpoint.io import CheckpointError, safe_torch_load
from hf_lightning.utils.logging import get_logger

__all__ = ["ExtraFile", "load_optimizer_and_scheduler", "write_extra_files", "write_state"]

logger = get_logger(__name__)

ExtraFile = bytes | str | Callable[[str], None]


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


def write_state(state: Any, path: str) -> None:
    """``trainer_state.json``: by the state's ``save_to_json(path)``, or a mapping as JSON."""
    if callable(getattr(state, "save_to_json", None)):
        state.save_to_json(path)
    elif isinstance(state, Mapping):
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(json.dumps(dict(state), indent=2, sort_keys=True) + "\n")
    else:
        raise TypeError(
            f"`save_checkpoint(state=...)` must have a `save_to_json(path)` method or be a mapping, "
            f"got {type(state).__name__}."
        )


def write_extra_files(folder: str, extra_files: Mapping[str, ExtraFile] | None) -> None:
    """``save_checkpoint(extra_files=...)``: each name's bytes, text, or ``callable(path)`` into ``folder``."""
    for name, content in (extra_files or {}).items():
        if not isinstance(name, str) or name in ("", ".", "..") or os.path.basename(name) != name:
            raise ValueError(
                f"`save_checkpoint(extra_files=...)` keys must be plain file names, got {name!r}."
            )
        path = os.path.join(folder, name)
        if callable(content):
            content(path)
        else:
            with open(path, "wb") as handle:
                handle.write(content.encode("utf-8") if isinstance(content, str) else content)
