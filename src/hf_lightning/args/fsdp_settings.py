"""``fsdp`` / ``fsdp_config`` → :class:`~hf_lightning.plan.fsdp.FSDPSettings`, with the refusals transformers
(through Accelerate's FSDP plugin) raises. Pure: imports no engine.

``TrainingArguments`` has already folded the legacy ``fsdp`` words into ``fsdp_config`` and filled its
defaults (``hf_lightning/args/fsdp.py``); the engine builds the strategy from the settings (``adapters/fsdp.py``).
"""

from __future__ import annotations

from typing import Any

from hf_lightning.plan.fsdp import FSDPSettings

__all__ = ["fsdp_settings"]

_V1_SHARDING = ("full_shard", "shard_grad_op", "no_shard", "hybrid_shard", "hybrid_shard_zero2")
_PREFETCH = ("BACKWARD_PRE", "BACKWARD_POST", "NO_PREFETCH")
_STATE_DICT_TYPES = ("FULL_STATE_DICT", "SHARDED_STATE_DICT", "LOCAL_STATE_DICT")


def _flag(value: Any) -> bool:
    """transformers' ``str_to_bool(str(value).lower())``: ``"true"``/``"1"``/``"yes"``… → True."""
    text = str(value).lower()
    if text in ("y", "yes", "t", "true", "on", "1"):
        return True
    if text in ("n", "no", "f", "false", "off", "0"):
        return False
    raise ValueError(f"invalid truth value {value!r}")


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


def _version_specific(config: dict[str, Any], version: int) -> dict[str, Any]:
    """The keys only one FSDP version reads, checked as Accelerate's plugin checks them."""
    if version == 2:
        _check(
            not _flag(config.get("forward_prefetch", False)),
            "`fsdp_config['forward_prefetch']` is not yet implemented in FSDP2; remove it or set "
            "`fsdp_config['version'] = 1`",
        )
        reshard = config.get("reshard_after_forward", True)
        try:
            return {"reshard_after_forward": _flag(reshard)}
        except ValueError:
            raise ValueError(
                f"`fsdp_config['reshard_after_forward']={reshard!r}` is not supported with FSDP2; use a bool "
                f"(`fsdp={reshard!r}` needs `fsdp_config['version'] = 1`)"
            ) from None
    strategy = str(config.get("reshard_after_forward", "full_shard")).lower()
    _check(
        strategy in _V1_SHARDING,
        f"`fsdp_config['reshard_after_forward']={strategy!r}` is not supported with FSDP1; choose one of: "
        + ", ".join(_V1_SHARDING),
    )
    prefetch = str(config.get("backward_prefetch", "NO_PREFETCH")).upper()
    _check(
        prefetch in _PREFETCH,
        f"`fsdp_config['backward_prefetch']={prefetch!r}` is not supported; choose one of: "
        + ", ".join(_PREFETCH),
    )
    limit = config.get("limit_all_gathers")
    return {
        "reshard_after_forward": strategy,
        "forward_prefetch": _flag(config.get("forward_prefetch", False)),
        "backward_prefetch": prefetch,
        "use_orig_params": _flag(config.get("use_orig_params", True)),
        "sync_module_states": _flag(config.get("sync_module_states", True)),
        "limit_all_gathers": None if limit is None else _flag(limit),
    }


def fsdp_settings(args: Any) -> FSDPSettings | None:
    """The FSDP settings of ``args``; ``None`` when ``fsdp`` is off.

    Raises:
        ValueError: a combination transformers (Accelerate's FSDP plugin) refuses, named.
        NotImplementedError: ``fsdp_config['xla']`` (no XLA engine here).
    """
    if not args.fsdp:
        return None
    config = dict(args.fsdp_config or {})
    if config.get("xla"):
        raise NotImplementedError(
            "`fsdp_config['xla']=True` (PyTorch/XLA FSDP) is not supported by hf_lightning; "
            "remove it to shard with torch's FSDP"
        )
    version = int(config.get("version", 2))
    _check(version in (1, 2), f"`fsdp_config['version']={version!r}` is not supported; choose 1 or 2")
    state_dict_type = str(config.get("state_dict_type", "FULL_STATE_DICT")).upper()
    _check(
        state_dict_type in _STATE_DICT_TYPES[: 2 if version == 2 else 3],
        f"`fsdp_config['state_dict_type']={state_dict_type!r}` is not supported with FSDP{version}; choose one "
        "of: " + ", ".join(_STATE_DICT_TYPES[: 2 if version == 2 else 3]),
    )
    layers = config.get("transformer_layer_cls_to_wrap")
    min_num_params = config.get("min_num_params", 0)
    _check(
        isinstance(min_num_params, int),
        f"`fsdp_config['min_num_params']={min_num_params!r}` must be an integer",
    )
    return FSDPSettings(
        version=version,
        cpu_offload=_flag(config.get("cpu_offload", False)),
        auto_wrap_policy=str(config.get("auto_wrap_policy", "TRANSFORMER_BASED_WRAP")),
        min_num_params=min_num_params,
        transformer_layer_cls_to_wrap=tuple(layers) if layers else None,
        state_dict_type=state_dict_type,
        activation_checkpointing=_flag(config.get("activation_checkpointing", False)),
        cpu_ram_efficient_loading=_flag(config.get("cpu_ram_efficient_loading", False)),
        **_version_specific(config, version),
    )
