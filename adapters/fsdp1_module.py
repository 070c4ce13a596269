"""FSDP1 (``fsdp_config['version'] = 1``): Lightning's ``FSDPStrategy`` wrapping the HF model, on CPU too.

Lightning's ``FSDPStrategy`` wraps the whole ``LightningModule`` in ``FullyShardedDataParallel`` and
passes the root device's index as ``device_id``, which a CPU device does not have: torch then refuses
to shard on the CPU. :class:`FSDP1Strategy` keeps every option Lightning's strategy was given (sharding
strategy, wrap policy, prefetching, ``use_orig_params``, ``sync_module_states``, offload, mixed
precision, activation checkpointing) and changes two things:

- it wraps the HF model (``module.model``), not the ``LightningModule``, as transformers wraps the
  model it trains: the parameter names stay the model's own, so checkpoints are the usual ones;
- it gives FSDP the device itself (``torch.device("cpu")`` on the CPU, the index on an accelerator).

The wrapper is registered for the checkpoint code (``checkpoint/sharded.py``) and becomes
:class:`FSDP1Module`'s ``train_model``: training and evaluation run through it, while ``model`` stays
the user's model (transformers' ``model`` and ``model_wrapped``). With ``use_orig_params`` (required
here) the optimizer the Trainer built before the fit keeps its parameters, now views of the shards;
an optimizer state restored from a checkpoint before the fit is cut into the same shards.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from lightning.pytorch.strategies import FSDPStrategy
from torch import nn

from hf_lightning.checkpoint.sharded import fsdp_root, load_indexed_optimizer_state, register_fsdp_root

from .fsdp import FSDPSettings, checkpoint_layers, modules_to_wrap
from .module import HFModule

__all__ = ["FSDP1Module", "FSDP1Strategy"]


class FSDP1Strategy(FSDPStrategy):
    """Lightning's ``FSDPStrategy`` that shards an :class:`HFModule`'s model, on any device.

    ``checkpointing``: the FSDP settings whose wrapped layers get activation checkpointing (``None``: off);
    the layers are chosen from the whole model before wrapping, so every process picks the same ones.
    """

    def __init__(self, *args: Any, checkpointing: FSDPSettings | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.checkpointing = checkpointing

    def lightning_module_state_dict(self) -> dict[str, Any]:
        if isinstance(self.lightning_module, HFModule):
            raise NotImplementedError(
                "Lightning checkpoints (`trainer.save_checkpoint`, `ModelCheckpoint`) of an FSDP1-sharded "
                "`HFModule` are not supported by hf_lightning; save with `hf_lightning.Trainer`'s checkpoints "
                "(`save_strategy`) or `save_model` (docs/distributed.md)"
            )
        return super().lightning_module_state_dict()

    def _setup_model(self, model: nn.Module) -> nn.Module:
        inner = getattr(model, "model", None)
        if not isinstance(model, HFModule) or not isinstance(inner, nn.Module):
            return super()._setup_model(model)  # any other LightningModule: Lightning's own wrapping
        from torch.distributed.fsdp import FullyShardedDataParallel

        root = fsdp_root(inner)
        model.wrapped_here = root is None  # an optimizer state restored before this fit is a full one
        if root is None:  # a second fit of the same model keeps its wrapper
            device, options = self.root_device, dict(self.kwargs)
            if device.type == "cpu" and options.get("sync_module_states"):
                _broadcast_from_rank0(inner)  # torch's own sync refuses CPU tensors; the same, by hand
                options["sync_module_states"] = False
            if "HYBRID" in self.sharding_strategy.name and not {"device_mesh", "process_group"} & set(
                options
            ):
                options["device_mesh"] = self._hybrid_mesh(device)
            layers = [] if self.checkpointing is None else modules_to_wrap(self.checkpointing, inner)
            root = FullyShardedDataParallel(
                module=inner,
                cpu_offload=self.cpu_offload,
                mixed_precision=self.mixed_precision_config,
                sharding_strategy=self.sharding_strategy,
                device_id=device if device.type == "cpu" else device.index,
                **options,
            )
            checkpoint_layers(root, layers)  # after wrapping, as Accelerate applies it
            register_fsdp_root(inner, root)
        model.train_model = root
        return model

    def _hybrid_mesh(self, device: torch.device) -> Any:
        """``hybrid_shard``'s 2-D mesh from the launch: replicated across nodes, sharded within each node.

        torch would size the node from the device count, which on the CPU is 1 (every process its own
        "node", gradients then reduced wrongly); the launch's processes per node are what is meant."""
        from torch.distributed.device_mesh import init_device_mesh

        return init_device_mesh(
            device.type, (self.num_nodes, self.num_processes), mesh_dim_names=("replicate", "shard")
        )


def _broadcast_from_rank0(module: nn.Module) -> None:
    """``sync_module_states``: every process takes process 0's parameters and buffers."""
    if not torch.distributed.is_initialized():
        return
    with torch.no_grad():
        for tensor in [*module.parameters(), *module.buffers()]:
            torch.distributed.broadcast(tensor.data, src=0)


class FSDP1Module(HFModule):
    """:class:`HFModule` trained through FSDP1's ``FullyShardedDataParallel`` (:class:`FSDP1Strategy`)."""

    drives_fsdp1 = True

    def __init__(self, *args: Any, fsdp: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fsdp = fsdp  # the strategy holds the options; kept for inspection, as FSDP2Module keeps them

    def on_train_start(self) -> None:
        if fsdp_root(self.model) is None:
            raise TypeError(
                f"`{type(self).__name__}` needs the strategy of `to_lightning(args)` (FSDP1Strategy), which shards "
                f"its model; Lightning's own `{type(self.trainer.strategy).__name__}` wraps the whole module"
            )
        super().on_train_start()

    def configure_optimizers(self) -> Any:
        optimizer = super().configure_optimizers()
        if optimizer.state and getattr(self, "wrapped_here", False):  # a full state restored before the fit
            full = optimizer.state_dict()
            optimizer.state.clear()
            load_indexed_optimizer_state(self.model, optimizer, full)
        return optimizer

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        """FSDP1's own clipping: the norm over every shard (``max_grad_norm``; measured, not clipped, at 0)."""
        max_norm = self.settings.max_grad_norm
        limit = max_norm if max_norm is not None and max_norm > 0 else math.inf
        root: Any = fsdp_root(self.model)
        self.last_grad_norm = float(root.clip_grad_norm_(limit))
        self.driver.on_pre_optimizer_step()


def check_fsdp1(settings: Any, plan: Any) -> None:
    """Refuse, by name, what FSDP1 training here does not honour yet."""
    if not settings.use_orig_params:
        raise NotImplementedError(
            "`fsdp_config['use_orig_params']=False` is not supported by hf_lightning: the Trainer builds its "
            "optimizer (with its weight-decay groups) before FSDP1 wraps the model, which needs the original "
            "parameters; remove the key (it defaults to True) or use FSDP2 (`fsdp_config['version']=2`)"
        )
    if plan.module.torch_compile:
        raise NotImplementedError(
            "`torch_compile` with `fsdp_config['version']=1` is not supported by hf_lightning; use FSDP2 "
            "(`fsdp_config['version']=2`, the default) or turn `torch_compile` off"
        )
