"""Full weights of a sharded model (FSDP2's ``DTensor`` parameters), gathered for ``save_model``.

Gathering is a collective: every process calls :func:`full_state_dict`, in the same order, before
the saving process writes. A model that holds no sharded tensors gives ``None`` (nothing to gather).
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["full_state_dict"]


def _sharded(value: Any) -> bool:
    return callable(getattr(value, "full_tensor", None))


def full_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor] | None:
    """``model``'s state dict with every sharded tensor gathered whole (on the CPU); ``None`` if none is sharded."""
    state = model.state_dict()
    if not any(_sharded(value) for value in state.values()):
        return None
    return {
        name: (value.full_tensor() if _sharded(value) else value).detach().cpu()
        for name, value in state.items()
    }
