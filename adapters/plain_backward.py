"""Whether ``HFModule.manual_backward`` may call ``loss.backward()`` directly.

On one device at 32-bit precision, with no profiler and no hook listening, Lightning's
``manual_backward`` path ends in ``loss.backward()`` and does nothing else (see
``HFModule.manual_backward``).
"""

from __future__ import annotations

from typing import Any

import lightning as L

__all__ = ["plain_backward_setup"]

_BACKWARD_HOOKS = ("on_before_backward", "on_after_backward")


def plain_backward_setup(module: L.LightningModule, trainer: Any) -> bool:
    """Whether ``manual_backward`` on ``trainer`` would do nothing but ``loss.backward()``."""
    from lightning.pytorch.plugins.precision import Precision
    from lightning.pytorch.profilers import PassThroughProfiler
    from lightning.pytorch.strategies import SingleDeviceStrategy
    from lightning.pytorch.utilities.model_helpers import is_overridden

    return (
        type(trainer.strategy) is SingleDeviceStrategy
        and type(trainer.precision_plugin) is Precision
        and isinstance(trainer.profiler, PassThroughProfiler)
        and getattr(module, "_fabric", None) is None
        and not any(is_overridden(hook, module, L.LightningModule) for hook in (*_BACKWARD_HOOKS, "backward"))
        and not any(
            is_overridden(hook, callback, L.Callback)
            for callback in trainer.callbacks
            for hook in _BACKWARD_HOOKS
        )
    )
