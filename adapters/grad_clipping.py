"""The parameters ``max_grad_norm`` clips, in the model's order (as transformers clips ``model.parameters()``).

The order of the per-parameter norms decides the last bits of the total norm, and so of the clipped
update; an ill-conditioned model (a small BatchNorm network at batch 2) turns such bits into visible
differences within a few steps. The model's order is found once, and again when the optimizer gains
parameters (layers unfrozen mid-training). Optimized parameters outside the model are not clipped nor
counted in the norm, as in transformers (sentence-transformers' ``SoftmaxLoss`` holds a classifier the
optimizer updates but ``model.parameters()`` does not list).
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["ClipOrder"]


class ClipOrder:
    """Caches the optimized parameters that are the model's, in ``model.parameters()`` order."""

    def __init__(self) -> None:
        self._count = -1
        self._ordered: list[torch.nn.Parameter] = []

    def parameters(self, model: nn.Module, optimized: list[torch.nn.Parameter]) -> list[torch.nn.Parameter]:
        """Those of ``optimized`` that ``model`` holds, in the model's order."""
        if len(optimized) != self._count:
            members = {id(p) for p in optimized}
            self._ordered = [p for p in model.parameters() if id(p) in members]
            self._count = len(optimized)
        return self._ordered
