"""hf_lightning.adapters: carries out the HF vocabulary on Lightning, Optuna and Ray.

This subpackage is the only place that imports ``lightning`` (and, lazily, ``optuna`` / ``ray``).
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS: dict[str, str] = {
    "to_lightning": "plan",
    "LightningPlan": "plan",
    "HFModule": "module",
    "DeepSpeedModule": "deepspeed_module",
    "FSDP1Module": "fsdp1_module",
    "FSDP2Module": "fsdp_module",
    "AccumulationWindows": "windows",
    "ModuleSettings": "plan",
    "DataSettings": "plan",
    "EvalSettings": "plan",
    "check_supported": "argument_table",
    "HFCheckpoint": "callbacks.checkpointing",
    "JITCheckpoint": "callbacks.jit_checkpoint",
    "LightningLoggersCallback": "callbacks.logging",
    "ShardedSampler": "samplers",
    "LengthGroupedSampler": "samplers",
    "DistributedLengthGroupedSampler": "samplers",
    "BatchRebalanceSampler": "samplers",
    "build_train_sampler": "samplers",
    "EvalShardSampler": "evaluation",
    "retain_freed_memory": "allocator",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'hf_lightning.adapters' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"hf_lightning.adapters.{module_name}"), name)
    globals()[name] = value
    return value
