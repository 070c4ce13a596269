"""FSDP part of `TrainingArguments` normalisation: the same `fsdp` / `fsdp_config` values transformers derives.

A legacy ``fsdp="full_shard offload"`` string (or list) is folded into ``fsdp_config`` and ``fsdp``
becomes ``True``; ``fsdp_config`` gets its defaults. Which FSDP engine honours them is the plan's job.
"""

from __future__ import annotations

import json
from typing import Any

from hf_lightning.args.enums import FSDPOption
from hf_lightning.utils import logging as hf_logging

__all__ = ["AUTO_WRAP_POLICIES", "normalize_fsdp"]

AUTO_WRAP_POLICIES = ("TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP", "NO_WRAP")
logger = hf_logging.get_logger(__name__)
_SHARDING = ("full_shard", "shard_grad_op", "no_shard", "hybrid_shard", "hybrid_shard_zero2")


def normalize_fsdp(args: Any) -> list[str]:
    """Normalise ``fsdp``/``fsdp_config`` in place when FSDP is on; return the problems found."""
    if not args.fsdp:
        return []
    config = args.fsdp_config
    if config is None:
        config = {}
    elif isinstance(config, str):
        with open(config, encoding="utf-8") as f:
            config = json.load(f)
    config = {(k[5:] if k.startswith("fsdp_") else k): v for k, v in config.items()}
    problems: list[str] = []
    if isinstance(args.fsdp, str | list | tuple) and not isinstance(args.fsdp, bool):
        if isinstance(args.fsdp, str):
            logger.warning(
                "Passing `fsdp` as a string is deprecated and will be removed in Transformers v5.20. "
                "Use `fsdp=True` and configure everything via `fsdp_config` instead."
            )
        words = args.fsdp.split() if isinstance(args.fsdp, str) else list(args.fsdp)
        problems += _fold_legacy_words(type(args).__name__, words, config)
    args.fsdp = True
    if args.activation_checkpointing:
        logger.warning(
            "When using FSDP, prefer `fsdp_config['activation_checkpointing']` (FSDP's own activation "
            "checkpointing) over the `activation_checkpointing` training argument; the latter introduces a "
            "redundant AllGather in the backward pass. "
            "Reference: https://github.com/huggingface/transformers/issues/30404"
        )
    config.setdefault("min_num_params", 0)
    if isinstance(config.get("transformer_layer_cls_to_wrap"), str):
        config["transformer_layer_cls_to_wrap"] = [config["transformer_layer_cls_to_wrap"]]
    for key in ("xla", "xla_fsdp_v2", "xla_fsdp_grad_ckpt"):
        config.setdefault(key, False)
    policy = config.get("auto_wrap_policy", AUTO_WRAP_POLICIES[0])
    if not config["xla"] and policy not in AUTO_WRAP_POLICIES:
        problems.append(
            f"`{type(args).__name__}(fsdp_config={{'auto_wrap_policy': {policy!r}}})` is not supported; "
            f"choose one of: {', '.join(AUTO_WRAP_POLICIES)}"
        )
    args.fsdp_config = config
    return problems


def _fold_legacy_words(cls: str, words: list[str], config: dict) -> list[str]:
    """Translate the legacy ``fsdp`` words into ``fsdp_config`` entries (as transformers does)."""
    version = int(config.get("version", 2))
    problems = []
    for word in words:
        if word in _SHARDING and version == 2:
            if word in ("full_shard", "shard_grad_op"):
                config.setdefault("reshard_after_forward", word == "full_shard")
            else:
                problems.append(f"`{cls}(fsdp={word!r})` needs `fsdp_config['version']` = 1 (FSDP1 only)")
        elif word in _SHARDING:
            config.setdefault("reshard_after_forward", word)
        elif word == FSDPOption.OFFLOAD:
            config.setdefault("cpu_offload", True)
        elif word != FSDPOption.AUTO_WRAP:
            problems.append(
                f"`{cls}(fsdp={word!r})` is not supported; choose from: {', '.join(FSDPOption.values())}"
            )
    return problems
