"""What the Trainer's accelerator knows before a fit, translated once from ``TrainingArguments``: the plan's
builder of :class:`AcceleratorSettings` (the engine's ``LightningAccelerator`` reads only these)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from hf_lightning.args.distributed import DistributedSettings, distributed_settings
from hf_lightning.utils import logging as hf_logging

__all__ = ["AcceleratorSettings", "accelerator_settings"]

logger = hf_logging.get_logger(__name__)


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
    dataloader: Mapping[str, Any] = field(default_factory=dict)
    """``accelerator_config``'s data-loading keys (``split_batches``, ``dispatch_batches``, ``even_batches``,
    ``use_seedable_sampler``, ``non_blocking``), for accelerate's ``DataLoaderConfiguration``."""
    gradient_accumulation_kwargs: Mapping[str, Any] = field(default_factory=lambda: {"num_steps": 1})
    """``accelerator_config["gradient_accumulation_kwargs"]`` with ``num_steps=1`` (the Trainer accumulates)."""


def accelerator_settings(
    args: Any, env: Mapping[str, str], *, cuda_available: bool = False
) -> AcceleratorSettings:
    """The :class:`AcceleratorSettings` of ``args`` under the launcher variables in ``env``; reads
    ``accelerator_config`` as transformers' ``create_accelerator_and_postprocess`` does (see
    :func:`_read_accelerator_config`)."""
    distributed = distributed_settings(args, env, cuda_available=cuda_available)
    dataloader, accumulation = _read_accelerator_config(args, distributed.world_size)
    return AcceleratorSettings(
        distributed=distributed,
        device=torch.device(args.device),
        process_index=int(args.process_index),
        local_process_index=int(args.local_process_index),
        mixed_precision="bf16" if args.bf16 else "fp16" if args.fp16 else "no",
        save_on_each_node=bool(args.save_on_each_node),
        data_seed=args.data_seed,
        dataloader=dataloader,
        gradient_accumulation_kwargs=accumulation,
    )


# accelerator_config keys whose non-default value changes how batches reach several processes
_SHARDING_DEFAULTS = {"split_batches": False, "dispatch_batches": None, "even_batches": True,
                      "use_seedable_sampler": True}  # fmt: skip
_CARRIED_ON_SEVERAL = frozenset(
    {"split_batches"}
)  # each rank takes its slice of every batch (trainer/data.py)


def _read_accelerator_config(args: Any, world_size: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """``accelerator_config`` as transformers' Trainer reads it: ``gradient_accumulation_kwargs['num_steps']``
    becomes ``gradient_accumulation_steps`` (a ``ValueError`` when both are set), ``non_blocking`` without
    pinned memory warns. On one process every key is honoured as accelerate honours it there (the
    batch keys change nothing, ``use_seedable_sampler=False`` draws the order from torch's global
    generator); under several processes ``split_batches`` gives each rank its slice of every batch
    (``trainer/data.py``), the other batch keys must keep their defaults (``NotImplementedError``)."""
    config = dict(args.accelerator_config or {})
    accumulation = dict(config.get("gradient_accumulation_kwargs") or {})
    if "num_steps" in accumulation:
        if args.gradient_accumulation_steps > 1:
            raise ValueError(
                "The `AcceleratorConfig`'s `num_steps` is set but `gradient_accumulation_steps` is greater than 1 "
                "in the passed `TrainingArguments`. If using the passed `AcceleratorConfig` is desired, do not set "
                "the `TrainingArguments` `gradient_accumulation_steps`."
            )
        args.gradient_accumulation_steps = int(accumulation["num_steps"])
    accumulation["num_steps"] = 1  # the Trainer accumulates itself, as transformers tells accelerate
    changed = sorted(
        k
        for k, v in _SHARDING_DEFAULTS.items()
        if config.get(k, v) != v
        and k not in _CARRIED_ON_SEVERAL
        # dispatch_batches=False: each process reads its own share, the same batches rank 0 would deal out
        and not (k == "dispatch_batches" and config[k] is False)
    )
    if world_size > 1 and changed:
        raise NotImplementedError(
            f"`{type(args).__name__}(accelerator_config={{{', '.join(f'{k!r}: {config[k]!r}' for k in changed)}}})`"
            f" is not supported by hf_lightning on {world_size} processes yet: each rank gets whole batches "
            f"of the shared, seeded order (accelerate's defaults); leave {', '.join(changed)} at the default "
            "(docs/data.md)"
        )
    if config.get("non_blocking") and not args.dataloader_pin_memory:
        logger.warning(
            "`non_blocking` is enabled but `dataloader_pin_memory` is not. For the best performance, it's "
            "recommended to enable both."
        )
    keys = (*_SHARDING_DEFAULTS, "non_blocking")
    return {k: config[k] for k in keys if k in config}, accumulation
