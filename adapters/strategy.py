"""Devices and the distributed strategy: the plan's ``DistributedSettings`` → a Lightning strategy.

The settings (``use_cpu``, ``ddp_*``, ``fsdp``, ``deepspeed`` under the launcher's variables) are built by
``hf_lightning.args.distributed.distributed_settings`` (re-exported here); this module turns them into
Lightning's ``DDPStrategy``, FSDP's or DeepSpeed's strategy, and the cluster environment to use.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from hf_lightning.args.distributed import DDP_BACKENDS, DistributedSettings, distributed_settings

from .deepspeed import build_deepspeed_strategy
from .fsdp import build_fsdp_strategy

__all__ = ["DDP_BACKENDS", "DistributedSettings", "build_strategy", "cluster_plugins", "distributed_settings"]


def build_strategy(settings: DistributedSettings) -> Any:
    """The Lightning strategy for ``settings``: FSDP's when asked, a ``DDPStrategy`` under a launcher, else ``"auto"``."""
    if settings.fsdp is not None:
        return build_fsdp_strategy(
            settings.fsdp, settings.world_size, settings.process_group_backend, settings.timeout_s
        )
    if settings.deepspeed is not None:  # the "auto" values that need the model: adapters/fit.py
        return build_deepspeed_strategy(
            settings.deepspeed.config, settings.process_group_backend, cpu=settings.deepspeed.cpu,
            devices=settings.devices,
        )  # fmt: skip
    if not settings.uses_ddp:
        return "auto"
    from lightning.pytorch.strategies import DDPStrategy

    return DDPStrategy(
        process_group_backend=settings.process_group_backend,
        timeout=timedelta(seconds=settings.timeout_s),
        **settings.ddp_kwargs(),
    )


def cluster_plugins(settings: DistributedSettings) -> tuple[Any, ...]:
    """The cluster environment to give Lightning when its own detection would pick the wrong one."""
    if settings.cluster == "torchelastic":
        from lightning.fabric.plugins.environments import TorchElasticEnvironment

        return (TorchElasticEnvironment(),)
    return ()
