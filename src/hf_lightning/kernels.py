"""``use_liger_kernel`` / ``liger_kernel_config``: Liger's Triton kernels patched into the model.

As transformers does at the start of ``train()``: the model (a ``PreTrainedModel``) is patched in
place by ``liger_kernel.transformers._apply_liger_kernel_to_instance(model, **liger_kernel_config)``.
Liger's kernels are Triton kernels that run on a CUDA GPU only, so without one this raises a
``RuntimeError`` naming the argument before any training step (transformers fails later, inside the
first kernel call). A missing package raises ``ImportError`` naming ``pip install "hf-lightning[liger]"``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from hf_lightning.optim.packages import require_package
from hf_lightning.utils.logging import get_logger

__all__ = ["apply_liger_kernel"]

logger = get_logger(__name__)


def _base_model(model: nn.Module) -> nn.Module:
    """The model inside a PEFT wrapper (``get_base_model()``), else the model itself."""
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


def apply_liger_kernel(model: nn.Module, kernel_config: dict[str, Any] | None = None) -> None:
    """Patch ``model`` with Liger's kernels, with ``kernel_config`` as keyword arguments."""
    wanted_by = "TrainingArguments(use_liger_kernel=True)"
    require_package("liger_kernel", wanted_by, min_version="0.3.0")
    if not torch.cuda.is_available():
        raise RuntimeError(
            f"`{wanted_by}` needs a CUDA GPU: Liger's kernels are Triton kernels and do not run on CPU; "
            "set `use_liger_kernel=False` on this machine"
        )
    from liger_kernel.transformers import _apply_liger_kernel_to_instance  # noqa: PLC0415
    from transformers import PreTrainedModel  # noqa: PLC0415  (liger_kernel itself needs transformers)

    base = _base_model(model)
    if isinstance(base, PreTrainedModel):
        _apply_liger_kernel_to_instance(model=base, **(kernel_config or {}))
    else:
        logger.warning("The model is not an instance of PreTrainedModel. No liger kernels will be applied.")
