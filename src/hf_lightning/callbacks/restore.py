"""Rebuilding the stateful callbacks of a checkpoint (``restore_callback_states_from_checkpoint``)."""

from __future__ import annotations

from typing import Any

from hf_lightning.callbacks.api import TrainerControl
from hf_lightning.utils.logging import get_logger

__all__ = ["restore_callbacks"]


def restore_callbacks(handler: Any, control: TrainerControl, stored: dict[str, Any]) -> TrainerControl:
    """Rebuild the callbacks (and ``control``) named in ``stored`` from their saved states, as transformers does."""
    present = handler.callbacks + [control]
    missing, rebuilt = [], []
    for name, data in stored.items():
        same = [cb for cb in present if type(cb).__name__ == name]
        if not same:
            missing.append(name)
            continue
        for callback, state in zip(same, data if isinstance(data, list) else [data]):
            new = type(callback)(**state.get("args", {}))
            for attribute, value in state.get("attributes", {}).items():
                setattr(new, attribute, value)
            if isinstance(callback, TrainerControl):
                control = new
            else:
                rebuilt.append(new)
                handler.remove_callback(type(new))
    if missing:  # the package logger: transformers.trainer's, where a script looks for it
        get_logger("hf_lightning.trainer").warning(
            "Checkpoint included callbacks not included in current configuration. "
            f"Ignoring. ({', '.join(missing)})"
        )
    for callback in rebuilt:
        handler.add_callback(callback)
    return control
