"""``StandaloneDriver``: what an ``HFModule`` does around each step under a plain ``lightning.Trainer``.

``hf_lightning.Trainer`` passes its own driver (HF callback events, ``log_history``); alone, this one
puts the model in training mode before every micro-batch (transformers does, and ``from_pretrained``
returns a model in eval mode), runs the forward and backward, and logs the loss, learning rate and
gradient norm to Lightning.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn

from hf_lightning.loss import compute_model_loss
from hf_lightning.trainer_utils import ensure_training_mode

if TYPE_CHECKING:
    from .module import HFModule

__all__ = ["StandaloneDriver"]


class StandaloneDriver:
    """The driver of an ``HFModule`` fitted by a plain ``lightning.Trainer``: no HF events.

    Subclass it (or pass any object with these methods) to observe the training loop.
    """

    _window_loss: torch.Tensor | float  # loss summed over the micro-batches of the current step

    def bind(self, module: HFModule) -> None:
        self.module = module

    def training_step(
        self, model: nn.Module, inputs: Mapping[str, Any], num_items_in_batch: Any
    ) -> torch.Tensor:
        module = self.module
        ensure_training_mode(model)  # dropout on, as transformers' training_step
        loss = compute_model_loss(model, inputs, module.loss_settings, num_items_in_batch=num_items_in_batch)
        if not module.loss_settings.loss_is_scaled_for_ga(num_items_in_batch):
            loss = loss / module.window_size
        fused = getattr(cast(Any, module.optimizers()).optimizer, "fused_backward", None)  # LOMO: it updates
        fused(loss, module.current_learning_rate()) if callable(fused) else module.manual_backward(loss)
        return loss.detach()

    def batch_samples(self, window: list) -> tuple[list, Any] | None:
        """None: ``HFModule`` counts the window's items itself."""
        return None

    def on_train_begin(self) -> None: ...
    def on_epoch_begin(self) -> None: ...
    def on_step_begin(self) -> None: ...
    def on_substep_end(self) -> None: ...
    def on_pre_optimizer_step(self) -> None: ...
    def on_optimizer_step(self) -> None: ...
    def on_epoch_end(self) -> None: ...
    def on_train_end(self) -> None: ...

    def on_micro_batch_end(self, inputs: Mapping[str, Any], loss: torch.Tensor) -> None:
        self._window_loss = loss if not hasattr(self, "_window_loss") else self._window_loss + loss

    def on_step_end(self, grad_norm: float | None, learning_rate: float) -> None:
        loss, self._window_loss = self._window_loss, 0.0
        module = self.module
        module.log("train_loss", loss, prog_bar=True, on_step=True, batch_size=1)
        module.log("learning_rate", learning_rate, on_step=True, batch_size=1)
        if grad_norm is not None:
            module.log("grad_norm", grad_norm, on_step=True, batch_size=1)

    def should_stop_epoch(self) -> bool:
        return False
