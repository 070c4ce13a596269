"""A DeepSpeed configuration's ``optimizer`` and ``scheduler`` sections, built as DeepSpeed builds them.

In transformers DeepSpeed builds both from the configuration, with their ``"auto"`` values filled from
the arguments (``adapters/deepspeed.py``). Here the filled sections are built into the same objects
and handed to DeepSpeed as the Trainer's client optimizer and scheduler: ``trainer.optimizer``,
``trainer.lr_scheduler``, ``scheduler.pt`` and the resume keep working as they do for the Trainer's
own, and the engine steps exactly what it would have built.

- ``optimizer``: ``AdamW``, and ``Adam`` with DeepSpeed's default ``adam_w_mode`` (decoupled weight
  decay), are torch's ``AdamW``; ``Adam`` with ``adam_w_mode: false`` is torch's ``Adam`` (L2 decay).
  As DeepSpeed builds it, one parameter group holds every trainable parameter, weight decay included,
  with DeepSpeed's defaults (no weight decay unless given; torch's own with ``torch_adam``). On a GPU
  DeepSpeed would pick its fused kernel of the same update, and with ZeRO-Offload its CPU Adam; the
  engine is told to accept torch's then (``zero_force_ds_cpu_optimizer: false``). Other types are
  refused by name.
- ``scheduler``: DeepSpeed's own class (``WarmupLR``, ``WarmupDecayLR``, ``WarmupCosineLR``,
  ``OneCycle``, ``LRRangeTest``) over that optimizer, stepped once per update as the engine steps it.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from hf_lightning.args.deepspeed_config import DeepSpeedSettings

__all__ = ["has_section", "section_optimizer", "section_scheduler"]

_ADAM_PARAMS = {
    "lr",
    "betas",
    "eps",
    "weight_decay",
    "amsgrad",
    "adam_w_mode",
    "torch_adam",
    "bias_correction",
}
_SCHEDULERS = ("WarmupLR", "WarmupDecayLR", "WarmupCosineLR", "OneCycle", "LRRangeTest")


def has_section(settings: DeepSpeedSettings | None, section: str) -> bool:
    """Whether the plan's DeepSpeed configuration has an ``optimizer`` or ``scheduler`` section."""
    return settings is not None and section in settings.sections


def section_optimizer(settings: DeepSpeedSettings | None, model: nn.Module) -> torch.optim.Optimizer | None:
    """The optimizer of the configuration's ``optimizer`` section (``None`` without one).

    Raises:
        NotImplementedError: a type or parameter not built here, named.
    """
    if settings is None or not has_section(settings, "optimizer"):
        return None
    section = settings.filled(model, None)["optimizer"]
    kind = str(section.get("type", "")).lower()
    params = dict(section.get("params") or {})
    unknown = sorted(set(params) - _ADAM_PARAMS)
    if kind not in ("adam", "adamw") or unknown or params.get("bias_correction", True) is not True:
        what = (
            f"type {section.get('type')!r}"
            if kind not in ("adam", "adamw")
            else f"params {unknown or ['bias_correction']}"
        )
        raise NotImplementedError(
            f"`TrainingArguments(deepspeed=...)`: the DeepSpeed `optimizer` section's {what} is not supported by "
            "hf_lightning; use type 'AdamW' or 'Adam' (lr, betas, eps, weight_decay), or remove the section to "
            "train with the Trainer's optimizer (`optim`)"
        )
    torch_adam = bool(params.get("torch_adam", False))
    if params.get("amsgrad") and not torch_adam:
        raise NotImplementedError(
            "`TrainingArguments(deepspeed=...)`: the DeepSpeed `optimizer` section's `amsgrad: true` needs "
            "`torch_adam: true` (DeepSpeed's own Adam kernels have no AMSGrad variant)"
        )
    decoupled = kind == "adamw" or params.get("adam_w_mode", True)
    options = {key: params[key] for key in ("lr", "betas", "eps", "weight_decay", "amsgrad") if key in params}
    if not torch_adam:  # DeepSpeed's fused and CPU Adam default to no weight decay; torch's AdamW to 0.01
        options.setdefault("weight_decay", 0.0)
    if "betas" in options:
        options["betas"] = tuple(options["betas"])
    trainable = [param for param in model.parameters() if param.requires_grad]
    return (torch.optim.AdamW if decoupled else torch.optim.Adam)(trainable, **options)


def section_scheduler(
    settings: DeepSpeedSettings | None,
    optimizer: torch.optim.Optimizer,
    num_training_steps: int,
    model: nn.Module,
) -> Any:
    """DeepSpeed's scheduler of the configuration's ``scheduler`` section over ``optimizer`` (``None`` without one)."""
    if settings is None or not has_section(settings, "scheduler"):
        return None
    section = settings.filled(model, num_training_steps)["scheduler"]
    name = section.get("type")
    if name not in _SCHEDULERS:
        raise NotImplementedError(
            f"`TrainingArguments(deepspeed=...)`: the DeepSpeed `scheduler` section's type {name!r} is not "
            f"supported by hf_lightning; choose one of: {', '.join(_SCHEDULERS)}, or remove the section to "
            "train with the Trainer's scheduler (`lr_scheduler_type`)"
        )
    from deepspeed.runtime import lr_schedules

    return getattr(lr_schedules, name)(optimizer, **dict(section.get("params") or {}))
