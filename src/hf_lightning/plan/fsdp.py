"""The FSDP group of the plan: ``fsdp_config`` as plain values (built by ``hf_lightning.args.fsdp_settings``).

The engine (``adapters/fsdp.py``, ``adapters/fsdp_module.py``, ``adapters/fsdp1_module.py``) reads these
values, never the arguments.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["FSDPSettings"]


@dataclass(frozen=True)
class FSDPSettings:
    """The ``fsdp_config`` keys transformers reads, as plain values."""

    version: int
    """2 (``fully_shard``, the default) or 1 (``FullyShardedDataParallel``)."""
    reshard_after_forward: bool | str
    """FSDP2: a bool (``full_shard`` → True, ``shard_grad_op`` → False); FSDP1: the sharding strategy."""
    cpu_offload: bool
    auto_wrap_policy: str
    """``TRANSFORMER_BASED_WRAP``, ``SIZE_BASED_WRAP`` or ``NO_WRAP``."""
    min_num_params: int
    transformer_layer_cls_to_wrap: tuple[str, ...] | None
    """Class names to wrap; ``None``: the model's ``_no_split_modules``."""
    state_dict_type: str
    activation_checkpointing: bool
    cpu_ram_efficient_loading: bool
    forward_prefetch: bool = False
    backward_prefetch: str = "NO_PREFETCH"
    use_orig_params: bool = True
    sync_module_states: bool = True
    limit_all_gathers: bool | None = None

    def describe(self, world_size: int, backend: str | None, timeout_s: int) -> str:
        """One line: the strategy these settings build."""
        common = f"process_group_backend={backend!r}, timeout=timedelta(seconds={timeout_s})"
        wrap = self.transformer_layer_cls_to_wrap or "model._no_split_modules"
        layers = f"{self.auto_wrap_policy} ({wrap if self.auto_wrap_policy.startswith('TRANS') else self.min_num_params})"
        if self.version == 2:
            return (
                f"ModelParallelStrategy(data_parallel_size={world_size}, tensor_parallel_size=1, {common}) "
                f"+ fully_shard(reshard_after_forward={self.reshard_after_forward}, "
                f"cpu_offload={self.cpu_offload}) on {layers}, "
                f"activation_checkpointing={self.activation_checkpointing}, "
                f"state_dict_type={self.state_dict_type}"
            )
        return (
            f"FSDPStrategy(sharding_strategy={self.reshard_after_forward.upper()!r}, "  # type: ignore[union-attr]
            f"cpu_offload={self.cpu_offload}, auto_wrap_policy={layers}, "
            f"forward_prefetch={self.forward_prefetch}, backward_prefetch={self.backward_prefetch}, "
            f"use_orig_params={self.use_orig_params}, sync_module_states={self.sync_module_states}, "
            f"limit_all_gathers={self.limit_all_gathers}, "
            f"activation_checkpointing={self.activation_checkpointing}, "
            f"state_dict_type={self.state_dict_type}, {common})"
        )
