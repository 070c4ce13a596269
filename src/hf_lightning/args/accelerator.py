"""What the Trainer's accelerator knows before a fit, translated once from ``TrainingArguments``: the plan's
builder of :class:`AcceleratorSettings` (the engine's ``LightningAccelerator`` reads only these)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from hf_lightning.args.distributed import DistributedSettings, distributed_settings

__all__ = ["AcceleratorSettings", "accelerator_settings"]


@dataclass(frozen=True)
class AcceleratorSettings:
    """What the accelerator knows before a fit: the launch, the device, the precision and the engine."""

    distributed: DistributedSettings
    device: torch.device
    """``TrainingArguments.device`` of this process."""
    process_index: int
    local_process_index: int
    mixed_precision: str
    """accelerate's word: ``"no"``, ``"fp16"`` or ``"bf16"``."""
    save_on_each_node: bool
    data_seed: int | None = None


def accelerator_settings(
    args: Any, env: Mapping[str, str], *, cuda_available: bool = False
) -> AcceleratorSettings:
    """The :class:`AcceleratorSettings` of ``args`` under the launcher variables in ``env``."""
    return AcceleratorSettings(
        distributed=distributed_settings(args, env, cuda_available=cuda_available),
        device=torch.device(args.device),
        process_index=int(args.process_index),
        local_process_index=int(args.local_process_index),
        mixed_precision="bf16" if args.bf16 else "fp16" if args.fp16 else "no",
        save_on_each_node=bool(args.save_on_each_node),
        data_seed=args.data_seed,
    )
