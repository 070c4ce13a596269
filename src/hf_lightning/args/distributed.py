"""The device and DDP settings of ``TrainingArguments`` under the launcher's variables: the plan's builder.

Implements ``TrainingArguments.use_cpu``, ``ddp_find_unused_parameters``, ``ddp_bucket_cap_mb``,
``ddp_broadcast_buffers``, ``ddp_static_graph``, ``ddp_backend`` and ``ddp_timeout``.

As in transformers, distributed training is decided by the launcher, not by the arguments: under
``torchrun`` (``WORLD_SIZE`` > 1 in the environment the caller passes in) the plan asks for a
``DDPStrategy`` with ``LOCAL_WORLD_SIZE`` devices per node; a single process trains on one device
and the ``ddp_*`` arguments have nothing to configure. ``fsdp`` asks for FSDP's strategy whatever the
world size. The engine (``hf_lightning.adapters.strategy``) builds the strategy from the
:class:`DistributedSettings` alone. Nothing here reads ``os.environ`` or imports an engine.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from hf_lightning.args.deepspeed_config import DeepSpeedSettings, deepspeed_settings
from hf_lightning.args.fsdp_settings import fsdp_settings
from hf_lightning.args.launcher import launcher_variables
from hf_lightning.args.translate import checkpointing
from hf_lightning.plan.fsdp import FSDPSettings

__all__ = ["DDP_BACKENDS", "DistributedSettings", "distributed_settings"]

DDP_BACKENDS = ("nccl", "mpi", "xccl", "gloo", "hccl")
"""Process-group backends accepted by ``ddp_backend``."""


@dataclass(frozen=True)
class DistributedSettings:
    """Where the model runs and how its gradients are synchronised."""

    accelerator: str
    """``"cpu"`` for ``use_cpu``, ``"cuda"`` when CUDA is available, else ``"auto"``."""
    devices: int
    """Processes on this node: ``LOCAL_WORLD_SIZE`` under a launcher, else 1."""
    num_nodes: int
    """``WORLD_SIZE // LOCAL_WORLD_SIZE``."""
    world_size: int
    """Total number of processes (``WORLD_SIZE``, 1 without a launcher)."""
    process_group_backend: str | None
    """``ddp_backend``; ``None`` lets Lightning pick (nccl on CUDA, gloo on CPU)."""
    timeout_s: int
    """``ddp_timeout`` in seconds, for ``init_process_group``."""
    find_unused_parameters: bool
    """``ddp_find_unused_parameters``; unset, transformers' rule: not with activation checkpointing (and, at the
    fit, what the model asks: ``adapters/fit.py``)."""
    bucket_cap_mb: int | None = None
    broadcast_buffers: bool | None = None
    static_graph: bool | None = None
    find_unused_parameters_given: bool = False
    """Whether ``ddp_find_unused_parameters`` was set (else the fit applies transformers' rule for the model)."""
    cluster: str | None = None
    """``"torchelastic"`` when torchrun runs inside a SLURM allocation (Lightning would take SLURM's ranks);
    ``None``: Lightning detects the launcher (``SLURMEnvironment`` for ``srun``, torchrun's otherwise)."""
    fsdp: FSDPSettings | None = None
    """``fsdp``/``fsdp_config`` (``args/fsdp_settings.py``); ``None`` when FSDP is off."""
    deepspeed: DeepSpeedSettings | None = None
    """``deepspeed`` (``args/deepspeed_config.py``); ``None`` when DeepSpeed is off."""

    @property
    def on_cpu(self) -> bool:
        """Whether the model trains on the CPU (``use_cpu``, or ``"auto"`` on a machine without CUDA or MPS)."""
        if self.accelerator != "auto":
            return self.accelerator == "cpu"
        return not (torch.cuda.is_available() or torch.backends.mps.is_available())

    @property
    def uses_ddp(self) -> bool:
        """Whether training runs in more than one process."""
        return self.world_size > 1

    def ddp_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``DistributedDataParallel``; unset ones keep torch's defaults."""
        kwargs: dict[str, Any] = {"find_unused_parameters": self.find_unused_parameters}
        for name in ("bucket_cap_mb", "broadcast_buffers", "static_graph"):
            value = getattr(self, name)
            if value is not None:
                kwargs[name] = value
        return kwargs

    def describe(self) -> str:
        """One line: the strategy the settings build."""
        if self.fsdp is not None:
            return self.fsdp.describe(self.world_size, self.process_group_backend, self.timeout_s)
        if self.deepspeed is not None:
            return self.deepspeed.describe(self.process_group_backend)
        if not self.uses_ddp:
            return "'auto' (one process; the ddp_* arguments apply under a launcher with WORLD_SIZE > 1)"
        options = ", ".join(f"{key}={value!r}" for key, value in self.ddp_kwargs().items())
        return (
            f"DDPStrategy(process_group_backend={self.process_group_backend!r}, "
            f"timeout=timedelta(seconds={self.timeout_s}), {options})"
        )


def _env_int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"The environment variable {name}={raw!r} must be a positive integer") from None
    if value < 1:
        raise ValueError(f"The environment variable {name}={raw!r} must be a positive integer")
    return value


def _world(env: Mapping[str, str]) -> tuple[int, int, int]:
    """``(world_size, devices_per_node, num_nodes)`` from the launcher's variables (torchrun's or srun's)."""
    env = launcher_variables(env)
    world_size = _env_int(env, "WORLD_SIZE", 1)
    local = _env_int(env, "LOCAL_WORLD_SIZE", world_size)
    if world_size % local:
        raise ValueError(
            f"WORLD_SIZE={world_size} is not a multiple of LOCAL_WORLD_SIZE={local}; "
            "launch the same number of processes on every node"
        )
    return world_size, local, world_size // local


def distributed_settings(
    args: Any, env: Mapping[str, str], *, cuda_available: bool = False
) -> DistributedSettings:
    """Read the device and DDP settings from ``args`` and the launcher variables in ``env``."""
    backend = args.ddp_backend
    if backend is not None and backend not in DDP_BACKENDS:
        raise ValueError(
            f"`TrainingArguments(ddp_backend={backend!r})` is not supported; choose one of: "
            + ", ".join(repr(name) for name in DDP_BACKENDS)
        )
    world_size, devices, num_nodes = _world(env)
    if args.use_cpu:
        accelerator = "cpu"
    elif cuda_available:
        accelerator = "cuda"
    else:
        accelerator = "auto"
    find_unused = args.ddp_find_unused_parameters
    if find_unused is None:
        find_unused = not checkpointing(args)[0]
    return DistributedSettings(
        accelerator=accelerator,
        devices=devices,
        num_nodes=num_nodes,
        world_size=world_size,
        process_group_backend=backend,
        timeout_s=int(args.ddp_timeout),
        find_unused_parameters=bool(find_unused),
        find_unused_parameters_given=args.ddp_find_unused_parameters is not None,
        bucket_cap_mb=args.ddp_bucket_cap_mb,
        broadcast_buffers=args.ddp_broadcast_buffers,
        static_graph=args.ddp_static_graph,
        cluster="torchelastic" if env.get("WORLD_SIZE") and "SLURM_NTASKS" in env else None,
        fsdp=fsdp_settings(args),
        deepspeed=deepspeed_settings(args, world_size, cpu=accelerator == "cpu" or not cuda_available),
    )
