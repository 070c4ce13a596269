"""The training step's speed tricks, in one place: each one, what it saves, and how to turn it off.

``HFModule`` is the central class a reader opens; its speed tricks live here instead, installed on it by
:func:`install` at import. Each saves what Lightning's generic path costs on a tiny model at one thread,
where the step itself is a few hundred microseconds (``benchmarks/bench_step.py``, ``docs/performance.md``):

``setattr``
    ``nn.Module.__setattr__`` checks every assignment for a Parameter, Module or Tensor (~3 us each).
    Lightning sets ``_current_fx_name`` around every hook call and the module keeps per-step scalars,
    dozens of assignments a step; plain values that shadow no parameter, buffer or submodule are stored
    directly (properties still run: ``object.__setattr__`` honours data descriptors).
``signature``
    Lightning reads ``training_step``'s signature at every batch (does it take ``batch_idx``?); it is
    computed once, as PEP 362 allows, instead of from the code object each time (~15 us a step).
``backward``
    On one device at 32-bit precision, with no profiler and no backward hook listening, Lightning's
    ``manual_backward`` path (~40 us a micro-batch) ends in ``loss.backward()`` and does nothing else, so
    ``HFModule.manual_backward`` calls autograd directly (:func:`plain_backward_setup` decides once a fit).

``HF_LIGHTNING_SPEEDUPS_OFF=setattr,signature,backward`` (any of them, before ``hf_lightning.adapters`` is
imported) turns tricks off; ``bench_step.py --speedups-off`` runs hf_lightning so beside the rest, which is
how each trick's saving is measured.
"""

from __future__ import annotations

import inspect
import os
from typing import Any

import lightning as L
from torch import nn

__all__ = ["OFF_ENV", "SPEEDUPS", "install", "plain_backward_setup"]

OFF_ENV = "HF_LIGHTNING_SPEEDUPS_OFF"
SPEEDUPS = ("setattr", "signature", "backward")

_PLAIN_TYPES = frozenset({str, int, float, bool, type(None)})
_BACKWARD_HOOKS = ("on_before_backward", "on_after_backward")


def _fast_setattr(self: nn.Module, name: str, value: Any) -> None:
    """``nn.Module.__setattr__``, storing a plain value directly when it shadows nothing registered."""
    if type(value) in _PLAIN_TYPES:
        d = self.__dict__
        if (
            name not in d.get("_parameters", ())
            and name not in d.get("_buffers", ())
            and name not in d.get("_modules", ())
        ):
            object.__setattr__(self, name, value)
            return
    nn.Module.__setattr__(self, name, value)


def plain_backward_setup(module: L.LightningModule, trainer: Any) -> bool:
    """Whether ``manual_backward`` on ``trainer`` would do nothing but ``loss.backward()``."""
    from lightning.pytorch.plugins.precision import Precision
    from lightning.pytorch.profilers import PassThroughProfiler
    from lightning.pytorch.strategies import SingleDeviceStrategy
    from lightning.pytorch.utilities.model_helpers import is_overridden

    return (
        "backward" in getattr(type(module), "speedups", ())
        and type(trainer.strategy) is SingleDeviceStrategy
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


def install(cls: type[L.LightningModule], off: str | None = None) -> frozenset[str]:
    """Put the tricks not named in ``off`` (default: ``$HF_LIGHTNING_SPEEDUPS_OFF``) on ``cls``; returns those
    on, also kept as ``cls.speedups``."""
    names = {name.strip() for name in (os.environ.get(OFF_ENV, "") if off is None else off).split(",")}
    unknown = names - {"", *SPEEDUPS}
    if unknown:
        raise ValueError(
            f"`{OFF_ENV}={off!r}` names no speed trick: {sorted(unknown)}; choose from {list(SPEEDUPS)}"
        )
    on = frozenset(SPEEDUPS) - names
    if "setattr" in on:
        cls.__setattr__ = _fast_setattr  # type: ignore[method-assign,assignment]
    if "signature" in on:
        cls.training_step.__signature__ = inspect.signature(cls.training_step)  # type: ignore[attr-defined]
    cls.speedups = on  # type: ignore[attr-defined]
    return on
