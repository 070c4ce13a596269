"""``StopOnNonFinite`` for a plain ``lightning.Trainer`` fitting ``HFModule``: stop at the first NaN/inf.

The ``hf_lightning.Trainer`` path takes ``hf_lightning.StopOnNonFinite`` in ``callbacks=[...]``; this is the
same rule as a Lightning callback. It sees each micro-batch's loss in ``on_before_backward`` (before any
gradient of it exists) and checks every parameter after each optimizer step, raising
``hf_lightning.NonFiniteError`` naming the step, so the checkpoints already written hold finite weights.
"""

from __future__ import annotations

import math
from typing import Any

import lightning.pytorch as pl
import torch

from hf_lightning.callbacks.nonfinite import NonFiniteError, first_nonfinite_parameter

__all__ = ["StopOnNonFiniteLightning"]


class StopOnNonFiniteLightning(pl.Callback):
    """Raise :class:`~hf_lightning.NonFiniteError` at the first non-finite training loss or weight.

    ``check_weights`` (default True) checks the parameters after every optimizer step.
    """

    def __init__(self, check_weights: bool = True) -> None:
        self.check_weights = check_weights

    def on_before_backward(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, loss: torch.Tensor
    ) -> None:
        value = float(loss.detach().float().sum())
        if not math.isfinite(value):
            step = trainer.global_step + 1
            raise NonFiniteError(
                f"StopOnNonFiniteLightning: the training loss is {value} at step {step}; training stops "
                f"before this step's optimizer update (the weights of step {step - 1} are finite).",
                step,
            )

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if not self.check_weights:
            return
        name = first_nonfinite_parameter(pl_module)
        if name is not None:
            raise NonFiniteError(
                f"StopOnNonFiniteLightning: the weights are not finite after step {trainer.global_step} "
                f"(first: `{name}`).",
                trainer.global_step,
            )
