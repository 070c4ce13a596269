"""GaLore / APOLLO parameter groups from ``optim_target_modules``, and their layer-wise variants.

transformers' rule, kept exactly: the weights of the ``nn.Linear`` modules that
``optim_target_modules`` names (a list of names or substrings, a regex, or ``"all-linear"``) form
the low-rank group (with ``rank``, ``update_proj_gap``, ... from ``optim_args``); every other
parameter forms the plain group. The ``*_layerwise`` variants give each parameter its own optimizer,
stepped in a post-accumulate-grad hook during backward; the optimizer the Trainer holds is then a
:class:`~hf_lightning.optim.layerwise.LayerWiseDummyOptimizer` whose ``step`` and ``zero_grad`` do nothing.
"""

from __future__ import annotations

import re
from typing import Any

import torch
from torch import nn

from hf_lightning.args.enums import enum_value
from hf_lightning.optim.layerwise import LayerWiseDummyOptimizer
from hf_lightning.utils.logging import get_logger

__all__ = ["low_rank_groups", "matches_target_module", "setup_low_rank_optimizer"]

logger = get_logger(__name__)


def matches_target_module(targets: str | list[str], name: str) -> tuple[bool, bool]:
    """Whether module ``name`` is one of ``targets``, and whether the match came from a regex."""
    if isinstance(targets, str):
        return bool(re.fullmatch(targets, name)), targets != name
    if name in targets or any(target in name for target in targets):
        return True, False
    if any(re.fullmatch(target, name) for target in targets):
        return True, True
    return False, False


def low_rank_groups(
    model: nn.Module, targets: Any, optimizer_name: str
) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
    """(plain parameters, low-rank target weights) of ``model`` for ``optim_target_modules=targets``."""
    if targets is None:
        raise ValueError(
            f"`TrainingArguments(optim={optimizer_name!r})` needs `optim_target_modules` "
            "(a list of module names, a regex, or 'all-linear')"
        )
    if not isinstance(targets, (list, str)):
        raise TypeError(
            f"`TrainingArguments(optim_target_modules={targets!r})` must be a list of strings, a regex string, "
            "or 'all-linear'"
        )
    if model is None:
        raise ValueError(f"`TrainingArguments(optim={optimizer_name!r})` needs the model to build its groups")
    all_linear = isinstance(targets, str) and targets.replace("_", "-") == "all-linear"
    names = []
    for module_name, module in model.named_modules():
        found, is_regex = matches_target_module(targets, module_name)
        if not isinstance(module, nn.Linear):
            if found and not is_regex:
                logger.warning(
                    f"{module_name} matched but ignored. {optimizer_name} only supports linear layers."
                )
            continue
        if found or all_linear:
            names.append(module_name + ".weight")
    if not names:
        raise ValueError(
            f"`TrainingArguments(optim_target_modules={targets!r})` matches no nn.Linear module of the model "
            f"(optim={optimizer_name!r})"
        )
    target = [p for n, p in model.named_parameters() if n in names]
    plain = [p for n, p in model.named_parameters() if n not in names]
    return plain, target


def _check_not_distributed(args: Any, optimizer_name: str) -> None:
    if str(enum_value(getattr(args, "parallel_mode", ""))) == "distributed":
        raise NotImplementedError(
            f"`TrainingArguments(optim={optimizer_name!r})`: layer-wise optimizers do not support distributed "
            "training (as in transformers); choose the non-layerwise variant"
        )


def _check_no_accumulation(args: Any, optimizer_name: str) -> None:
    if args.gradient_accumulation_steps != 1:
        raise ValueError(
            f"`TrainingArguments(optim={optimizer_name!r})` does not support gradient accumulation: "
            f"set `gradient_accumulation_steps=1` (got {args.gradient_accumulation_steps})"
        )


def setup_low_rank_optimizer(
    args: Any,
    model: nn.Module | None,
    optimizer_name: str,
    optimizer_cls: type[torch.optim.Optimizer],
    low_rank_kwargs: dict[str, Any],
    optimizer_kwargs: dict[str, Any],
) -> tuple[Any, dict[str, Any]]:
    """The class and kwargs (with ``params``, or ``optimizer_dict`` when layer-wise) transformers builds."""
    if model is None:
        raise ValueError(
            f"`TrainingArguments(optim={optimizer_name!r})` needs the model to choose its target modules"
        )
    layerwise = optimizer_name.lower().endswith("layerwise")
    if layerwise:
        _check_not_distributed(args, optimizer_name)
    plain, target = low_rank_groups(model, args.optim_target_modules, optimizer_name)
    groups = [{"params": plain}, {"params": target, **low_rank_kwargs}]
    if layerwise:
        _check_no_accumulation(args, optimizer_name)
        per_param: dict[nn.Parameter, torch.optim.Optimizer] = {}
        for param in plain:
            per_param[param] = optimizer_cls([{"params": [param]}], **optimizer_kwargs)
        for param in target:
            per_param[param] = optimizer_cls([{"params": [param], **low_rank_kwargs}], **optimizer_kwargs)

        def optimizer_hook(param: nn.Parameter) -> None:
            if param.grad is not None:
                per_param[param].step()
                per_param[param].zero_grad()

        for param in model.parameters():
            if param.requires_grad:
                param.register_post_accumulate_grad_hook(optimizer_hook)
        optimizer_cls = LayerWiseDummyOptimizer
        optimizer_kwargs["optimizer_dict"] = per_param
    optimizer_kwargs["params"] = groups
    return optimizer_cls, optimizer_kwargs
