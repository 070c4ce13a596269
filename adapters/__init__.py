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
    "AccumulationWindows": "windows",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'hf_lightning.adapters' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"hf_lightning.adapters.{module_name}"), name)
    globals()[name] = value
    return value
