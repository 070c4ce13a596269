"""Layer-wise optimizers: each parameter stepped by its own optimizer (and scheduler) during backward.

The GaLore / APOLLO ``*_layerwise`` names give each parameter its own optimizer, stepped in a
post-accumulate-grad hook. The Trainer then holds a :class:`LayerWiseDummyOptimizer` whose ``step``
and ``zero_grad`` do nothing, and :func:`layerwise_scheduler` gives each inner optimizer its own
scheduler, stepped in the same hook, behind a :class:`LayerWiseDummyScheduler` that reports the
inner learning rates (as transformers does: ``max_grad_norm`` clips nothing, the gradients are gone
by the time the training step would clip them).
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import chain
from typing import Any

import torch
from torch import nn
from torch.optim.lr_scheduler import LRScheduler

__all__ = ["LayerWiseDummyOptimizer", "LayerWiseDummyScheduler", "layerwise_scheduler"]


class LayerWiseDummyOptimizer(torch.optim.Optimizer):
    """The Trainer's optimizer when each parameter is stepped by its own optimizer in a backward hook.

    ``optimizer_dict`` maps each parameter to its optimizer; ``step`` and ``zero_grad`` do nothing.
    """

    def __init__(
        self, optimizer_dict: dict[nn.Parameter, torch.optim.Optimizer] | None = None, **kwargs: Any
    ):
        self.optimizer_dict = optimizer_dict if optimizer_dict is not None else {}
        super().__init__([torch.zeros(1, 1)], {"lr": kwargs.get("lr", 1e-3)})

    def zero_grad(self, set_to_none: bool = True) -> None:
        return None

    def step(self, closure: Any = None) -> None:  # type: ignore[override]
        return None


class LayerWiseDummyScheduler(LRScheduler):
    """The Trainer's scheduler over a :class:`LayerWiseDummyOptimizer`: the inner rates, no stepping of its own."""

    def __init__(self, optimizer_dict: dict[nn.Parameter, torch.optim.Optimizer], lr: float) -> None:
        self.default_lr = lr
        super().__init__(LayerWiseDummyOptimizer(optimizer_dict=optimizer_dict, lr=lr), -1)

    def inner_rates(self) -> list[float]:
        """The learning rate of every group of every inner optimizer (the default rate when there are none)."""
        inner = self.optimizer.optimizer_dict.values()  # type: ignore[attr-defined]
        rates = list(chain.from_iterable([group["lr"] for group in o.param_groups] for o in inner))
        return rates or [self.default_lr]

    def get_lr(self) -> list[float]:  # type: ignore[override]
        # one rate per group of the dummy optimizer (torch >= 2.13 zips them strictly; transformers'
        # scheduler returns every inner rate here and fails to build on that torch)
        return self.inner_rates()[: len(self.optimizer.param_groups)]

    def step(self, epoch: int | None = None) -> None:  # type: ignore[override]
        """Record every inner rate as the last rates (``get_last_lr()[0]`` is what the Trainer logs)."""
        super().step() if epoch is None else super().step(epoch)
        self._last_lr = self.inner_rates()  # type: ignore[assignment]

    def _get_closed_form_lr(self) -> list[float]:
        return self.get_lr()


def layerwise_scheduler(
    optimizer: LayerWiseDummyOptimizer, build: Callable[[torch.optim.Optimizer], Any]
) -> LayerWiseDummyScheduler:
    """One scheduler per inner optimizer (``build(inner)``), stepped in each parameter's backward hook."""
    schedulers = {param: build(inner) for param, inner in optimizer.optimizer_dict.items()}

    def scheduler_hook(param: nn.Parameter) -> None:
        schedulers[param].step()

    for param in optimizer.optimizer_dict:
        if param.requires_grad:
            param.register_post_accumulate_grad_hook(scheduler_hook)
    return LayerWiseDummyScheduler(optimizer.optimizer_dict, lr=optimizer.defaults["lr"])
