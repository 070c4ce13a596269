"""``Trainer.accelerator``: the few ``accelerate.Accelerator`` calls user code makes, on Lightning.

Scripts that override ``Trainer.training_step`` call ``self.accelerator.backward(loss)``; metrics
code calls ``gather``; this object answers those calls through the running ``lightning.Trainer``
(its precision plugin scales the loss, its strategy gathers across ranks). Outside ``train()`` it
works on one process.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from hf_lightning.loss import unwrap_model

__all__ = ["LightningAccelerator"]


class LightningAccelerator:
    """The accelerate-like surface of ``hf_lightning.Trainer``, backed by a Lightning module."""

    def __init__(self) -> None:
        self.module: Any = None

    def bind(self, module: Any) -> None:
        """Attach the ``HFModule`` being fitted (None detaches)."""
        self.module = module

    @property
    def _trainer(self) -> Any:
        module = self.module
        return getattr(module, "_trainer", None) if module is not None else None

    def backward(self, loss: torch.Tensor, learning_rate: float | None = None, **kwargs: Any) -> None:
        """Backward through Lightning, so mixed-precision scaling and DDP hooks apply.

        With ``learning_rate`` (transformers passes it for ``optim="lomo"`` / ``"adalomo"``) the
        LOMO optimizer runs the backward and updates the weights as the gradients arrive.
        """
        fused = getattr(self._optimizer(), "fused_backward", None)
        if learning_rate is not None and callable(fused):
            fused(loss, learning_rate)
            return
        if self._trainer is None:
            loss.backward(**kwargs)
        else:
            self.module.manual_backward(loss, **kwargs)

    def _optimizer(self) -> Any:
        module = self.module
        if module is None:
            return None
        optimizer = getattr(getattr(module, "_trainer", None), "optimizers", None) or [None]
        return getattr(optimizer[0], "optimizer", optimizer[0])

    def unwrap_model(self, model: nn.Module, keep_fp32_wrapper: bool = True) -> nn.Module:
        return unwrap_model(model)

    @property
    def num_processes(self) -> int:
        return self._trainer.world_size if self._trainer is not None else 1

    @property
    def process_index(self) -> int:
        return self._trainer.global_rank if self._trainer is not None else 0

    @property
    def local_rank(self) -> int | None:
        """This process's rank on its machine (None outside a fit)."""
        return getattr(self._trainer, "local_rank", None)

    @property
    def grad_scaler(self) -> Any:
        """The mixed-precision gradient scaler of the running fit, if any."""
        return getattr(getattr(self._trainer, "precision_plugin", None), "scaler", None)

    @property
    def is_main_process(self) -> bool:
        return self.process_index == 0

    @property
    def device(self) -> torch.device:
        return self.module.device if self.module is not None else torch.device("cpu")

    def gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """Concatenate ``tensor`` from every rank along a new (or the first) dimension."""
        trainer = self._trainer
        if trainer is None or trainer.world_size == 1:
            return tensor if tensor.dim() else tensor.reshape(1)
        gathered = trainer.strategy.all_gather(tensor)
        return gathered.reshape(-1, *tensor.shape[1:]) if tensor.dim() else gathered.reshape(-1)

    def reduce(self, tensor: torch.Tensor, reduction: str = "sum") -> torch.Tensor:
        trainer = self._trainer
        if trainer is None or trainer.world_size == 1:
            return tensor
        return trainer.strategy.reduce(tensor, reduce_op=reduction)

    @contextlib.contextmanager
    def no_sync(self, model: nn.Module | None = None) -> Iterator[None]:
        wrapped = getattr(self._trainer, "model", None)
        if wrapped is not None and hasattr(wrapped, "no_sync"):
            with wrapped.no_sync():
                yield
        else:
            yield

    def clip_grad_norm_(self, parameters: Any, max_norm: float, norm_type: float = 2.0) -> torch.Tensor:
        return torch.nn.utils.clip_grad_norm_(parameters, max_norm, norm_type=norm_type)

    def wait_for_everyone(self) -> None:
        if self._trainer is not None:
            self._trainer.strategy.barrier()
