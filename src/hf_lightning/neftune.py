"""Implements ``TrainingArguments.neftune_noise_alpha``: NEFTune noise on the input embeddings.

While the model is in training mode, the output of its input-embedding layer gets uniform noise
in ``[-m, m]`` with ``m = alpha / sqrt(seq_len * hidden_size)`` (Jain et al., 2023). Evaluation and
generation (eval mode) are untouched, and the hook is removed when training ends.
"""

from __future__ import annotations

import math
from typing import Any, cast

import torch
from torch import nn

__all__ = ["activate_neftune", "input_embeddings", "neftune_forward_hook"]


def input_embeddings(model: nn.Module) -> nn.Module:
    """The model's input-embedding module (``get_input_embeddings()``), or a clear error."""
    getter = getattr(model, "get_input_embeddings", None)
    embeddings = getter() if callable(getter) else None
    if not isinstance(embeddings, nn.Module):
        raise ValueError(
            "`TrainingArguments(neftune_noise_alpha=...)` needs a model with `get_input_embeddings()` "
            f"returning its embedding layer; {type(model).__name__} has none"
        )
    return embeddings


def neftune_forward_hook(module: nn.Module, inputs: Any, output: torch.Tensor) -> torch.Tensor:
    """Add NEFTune noise to ``output`` when ``module`` is training (``module.neftune_noise_alpha``)."""
    if not module.training:
        return output
    dims = output.size(1) * output.size(2)
    magnitude = cast(float, module.neftune_noise_alpha) / math.sqrt(dims)  # set by activate_neftune
    return output + torch.zeros_like(output).uniform_(-magnitude, magnitude)


def activate_neftune(model: nn.Module, noise_alpha: float) -> torch.utils.hooks.RemovableHandle:
    """Register the noise hook on ``model``'s input embeddings; call ``.remove()`` on the result to stop."""
    if noise_alpha is None or noise_alpha <= 0:
        raise ValueError(f"`neftune_noise_alpha` must be a positive number, got {noise_alpha!r}")
    embeddings = input_embeddings(model)
    # torch's stubs type module attributes as Tensor | Module
    cast(Any, embeddings).neftune_noise_alpha = float(noise_alpha)
    return embeddings.register_forward_hook(neftune_forward_hook)
