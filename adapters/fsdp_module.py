"""``HFModule`` under FSDP2: ``fully_shard`` in ``configure_model``, the optimizer moved onto the shards.

Lightning's ``ModelParallelStrategy`` asks the module to shard itself in ``configure_model``. The
layers chosen by ``fsdp_config`` (``auto_wrap_policy``) are sharded as their own units, then the
root; ``activation_checkpointing`` wraps the same layers first and ``cpu_offload`` keeps the shards on
the CPU. ``fully_shard`` replaces each parameter by a sharded ``DTensor``, so an optimizer built
before the fit (the Trainer builds its own from the arguments) has its parameter groups pointed at
the new parameters, in place: its scheduler and learning rates stay as they are, and a state restored
from a checkpoint before the fit is cut into the same shards.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from .fsdp import FSDPSettings, checkpoint_layers, fsdp_settings, modules_to_wrap
from .module import HFModule

__all__ = ["FSDP2Module", "shard_model"]


def shard_model(model: nn.Module, settings: FSDPSettings, mesh: Any) -> dict[int, str]:
    """Apply ``fully_shard`` (and activation checkpointing) to ``model`` in place, as ``settings`` say.

    Returns the name, after sharding, of each parameter the model held before (by ``id``).
    """
    from torch.distributed.fsdp import CPUOffloadPolicy, OffloadPolicy, fully_shard

    layers = modules_to_wrap(settings, model)  # children first
    if settings.activation_checkpointing:
        checkpoint_layers(model, layers)
    names = {id(param): name for name, param in model.named_parameters()}  # the wrapper renames
    # pinned host memory needs an accelerator; on a CPU-only machine the shards simply stay on the CPU
    offload = (
        CPUOffloadPolicy(pin_memory=torch.cuda.is_available()) if settings.cpu_offload else OffloadPolicy()
    )
    options = {
        "mesh": mesh,
        "reshard_after_forward": settings.reshard_after_forward,
        "offload_policy": offload,
    }
    for layer in layers:
        fully_shard(layer, **options)
    fully_shard(model, **options)
    return names


def _shard_state(state: dict[str, Any], old: torch.Tensor, new: Any) -> dict[str, Any]:
    """A parameter's optimizer state (its full ``exp_avg``…) cut as its sharded parameter ``new`` is cut.

    Every process holds the same full state (read from the same checkpoint), so each keeps its own
    shard without communicating (``src_data_rank=None``).
    """
    from torch.distributed.tensor import distribute_tensor

    return {
        key: distribute_tensor(value, new.device_mesh, new.placements, src_data_rank=None)
        if isinstance(value, torch.Tensor) and value.shape == old.shape and value.dim() > 0
        else value
        for key, value in state.items()
    }


class FSDP2Module(HFModule):
    """:class:`HFModule` whose model is sharded with ``fully_shard`` over the data-parallel mesh."""

    def __init__(
        self, model: Any, args: Any = None, *, fsdp: FSDPSettings | None = None, **kwargs: Any
    ) -> None:
        super().__init__(model, args, **kwargs)
        settings = fsdp if fsdp is not None else fsdp_settings(args) if args is not None else None
        if settings is None or settings.version != 2:
            raise ValueError(
                "`FSDP2Module` needs `TrainingArguments(fsdp=...)` with FSDP2 (`fsdp_config['version']` 2, the "
                "default); for version 1 use `FSDP1Module`"
            )
        self.fsdp = settings
        self._unsharded: dict[int, str] = {}

    def configure_model(self) -> None:
        if self._unsharded:
            return  # already sharded (a second fit on the same module)
        mesh = self.device_mesh
        assert mesh is not None, "ModelParallelStrategy sets the device mesh before configure_model"
        self._unsharded = shard_model(self.model, self.fsdp, mesh["data_parallel"])

    def configure_optimizers(self) -> Any:
        optimizer = super().configure_optimizers()
        sharded = dict(self.model.named_parameters())
        current = {id(p) for p in sharded.values()}
        for group in optimizer.param_groups:
            params = [self._sharded_param(p, sharded, current) for p in group["params"]]
            for old, new in zip(group["params"], params):
                if old is not new and old in optimizer.state:  # restored from a checkpoint before the fit
                    optimizer.state[new] = _shard_state(optimizer.state.pop(old), old, new)
            group["params"] = params
        return optimizer

    def _sharded_param(
        self, param: nn.Parameter, sharded: dict[str, nn.Parameter], current: set[int]
    ) -> nn.Parameter:
        if id(param) in current:
            return param  # built after sharding (create_optimizer in configure_optimizers)
        name = self._unsharded.get(id(param))
        if name is None or name not in sharded:
            raise ValueError(
                "Under `fsdp` the optimizer may only hold the model's own parameters; one of shape "
                f"{tuple(param.shape)} is not the model's"
            )
        return sharded[name]

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        max_norm = self.settings.max_grad_norm
        limit = max_norm if max_norm is not None and max_norm > 0 else math.inf
        params = [p for p in self._optimized_parameters() if p.grad is not None]
        norm = torch.nn.utils.clip_grad_norm_(params, limit) if params else torch.tensor(0.0)
        full = getattr(norm, "full_tensor", None)  # a DTensor: the norm over every shard
        self.last_grad_norm = float(full() if full is not None else norm)
        self.driver.on_pre_optimizer_step()
