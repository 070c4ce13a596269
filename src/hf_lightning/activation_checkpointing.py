"""``TrainingArguments(activation_checkpointing=True)`` switched on in a model, as transformers' Trainer does.

A model with ``activation_checkpointing_enable`` (a ``PreTrainedModel``) gets the arguments'
``activation_checkpointing_kwargs``, ``every_n_layers`` and ``offload`` taken out of them. A model that
only defines the older ``gradient_checkpointing_enable`` (sentence-transformers) is still switched on, with
transformers' ``FutureWarning``; it gets ``every_n_layers`` and ``offload`` when its method takes them. A
model with neither raises ``AttributeError`` (transformers' type) naming the argument.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["enable_activation_checkpointing"]


def _takes(method: Callable[..., Any], *names: str) -> bool:
    try:
        parameters = inspect.signature(method).parameters
    except (TypeError, ValueError):
        return False
    variadic = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    return variadic or all(name in parameters for name in names)


def enable_activation_checkpointing(model: Any, settings: Mapping[str, Any] | None) -> None:
    """Switch activation checkpointing on in ``model``; ``settings``: ``activation_checkpointing_kwargs``."""
    kwargs = dict(settings or {})
    layers = {"every_n_layers": kwargs.pop("every_n_layers", 1), "offload": kwargs.pop("offload", False)}
    enable = getattr(model, "activation_checkpointing_enable", None)
    if callable(enable):
        enable(activation_checkpointing_kwargs=kwargs or None, **layers)
        return
    older = getattr(model, "gradient_checkpointing_enable", None)
    if not callable(older):
        raise AttributeError(
            "`TrainingArguments(activation_checkpointing=True)` needs a model with "
            f"`activation_checkpointing_enable()` (a PreTrainedModel); {type(model).__name__} has none"
        )
    warnings.warn(
        f"`{type(model).__name__}` only defines `gradient_checkpointing_enable`, which is deprecated and will no "
        "longer be called in v6. Define `activation_checkpointing_enable` instead.",
        FutureWarning,
        stacklevel=3,
    )
    older(gradient_checkpointing_kwargs=kwargs or None, **(layers if _takes(older, *layers) else {}))
