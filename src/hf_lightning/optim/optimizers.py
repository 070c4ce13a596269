"""``TrainingArguments.optim`` → an optimizer, with transformers' parameter groups.

- :func:`get_optimizer_cls_and_kwargs` maps the arguments to a class and its keyword arguments, as
  ``transformers.Trainer.get_optimizer_cls_and_kwargs`` does: here for the optimizers that need
  nothing beyond torch (adamw_torch, adamw_torch_fused, adafactor, sgd, adagrad, rmsprop, and the
  legacy name adamw_hf, now torch's AdamW); in :mod:`hf_lightning.optim.extras` for every other
  ``OptimizerNames`` value (``ImportError`` naming the extra when its package is missing).
- :func:`create_optimizer` builds it over two groups: weight decay for the names from
  :func:`get_decay_parameter_names`, 0.0 for the rest.
"""

from __future__ import annotations

import re
import sys
import types
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from hf_lightning.args.enums import enum_value
from hf_lightning.optim.adafactor import Adafactor
from hf_lightning.optim.extras import EXTRA_OPTIMIZERS, extra_optimizer_cls_and_kwargs
from hf_lightning.optim.packages import require_package
from hf_lightning.optim.schedulers import steps_per_update

__all__ = [
    "PACKAGE_OPTIMIZERS",
    "SUPPORTED_OPTIMIZERS",
    "create_optimizer",
    "current_learning_rate",
    "get_decay_parameter_names",
    "get_learning_rates",
    "get_optimizer_cls_and_kwargs",
    "parse_optim_args",
]

SUPPORTED_OPTIMIZERS = (
    "adamw_torch",
    "adamw_torch_fused",
    "adafactor",
    "sgd",
    "adagrad",
    "rmsprop",
    "adamw_hf",
)
"""``optim`` values built with torch alone (``adamw_hf`` is the pre-5.0 name, mapped to torch's AdamW)."""

PACKAGE_OPTIMIZERS = tuple(EXTRA_OPTIMIZERS)
"""transformers 5.24 ``OptimizerNames`` values that need a package (or device) beyond torch: each is
built when its package is installed, and raises ``ImportError`` naming the extra when it is not."""

_DECAY_EXCLUDED_NAMES = (r"bias", r"layernorm", r"rmsnorm", r"(?:^|\.)norm(?:$|\.)", r"_norm(?:$|\.)")

# optim_args keys that each torch optimizer reads, and how to convert their string values
_OPTIM_ARGS_FLOATS = {
    "sgd": ("momentum", "dampening", "weight_decay"),
    "adagrad": ("lr_decay", "weight_decay", "eps"),
    "rmsprop": ("momentum", "alpha", "eps", "weight_decay"),
}
_OPTIM_ARGS_BOOLS = {"sgd": ("nesterov",), "rmsprop": ("centered",)}
_TORCH_CLASSES = {"sgd": torch.optim.SGD, "adagrad": torch.optim.Adagrad, "rmsprop": torch.optim.RMSprop}


def parse_optim_args(optim_args: str | None) -> dict[str, str]:
    """Split ``TrainingArguments.optim_args`` ("key1=value1, key2=value2") into a dict of strings."""
    if not optim_args:
        return {}
    parsed = {}
    for item in optim_args.replace(" ", "").split(","):
        parts = item.split("=")
        if len(parts) != 2:
            raise ValueError(
                f"`TrainingArguments(optim_args={optim_args!r})` must look like 'key1=value1,key2=value2'; "
                f"cannot read {item!r}"
            )
        parsed[parts[0]] = parts[1]
    return parsed


def _optim_name(optim: Any) -> str:
    """The ``optim`` value as a plain string, from a str or a str-Enum such as ``OptimizerNames``."""
    return str(enum_value(optim))


def _warn_unused(name: str, unused: list[str] | tuple[str, ...]) -> None:
    if unused:
        warnings.warn(
            f"`TrainingArguments(optim={name!r})` does not read `optim_args` keys {sorted(unused)}; they are ignored",
            stacklevel=3,
        )


def _torch_kwargs(name: str, base: dict[str, Any], optim_args: dict[str, str]) -> dict[str, Any]:
    """SGD / Adagrad / RMSprop kwargs: the learning rate plus the optim_args keys each one reads."""
    kwargs = dict(base)
    floats, bools = _OPTIM_ARGS_FLOATS[name], _OPTIM_ARGS_BOOLS.get(name, ())
    for key in floats:
        if key in optim_args:
            kwargs[key] = float(optim_args[key])
    for key in bools:
        if key in optim_args:
            kwargs[key] = optim_args[key].lower() in ("true", "1", "yes")
    _warn_unused(name, [key for key in optim_args if key not in floats + bools])
    return kwargs


def _adafactor_class() -> type[torch.optim.Optimizer]:
    """transformers' own ``Adafactor`` when the process has imported transformers (a script's ``isinstance``
    check against it holds), else ours: the same update, state and arguments
    (``tests/parity/test_optimizers_parity.py``); transformers is never imported for it."""
    if "transformers" not in sys.modules:
        return Adafactor
    try:
        from transformers.optimization import Adafactor as theirs
    except ImportError:
        return Adafactor
    return theirs


def _unknown(name: str) -> ValueError:
    choices = ", ".join(SUPPORTED_OPTIMIZERS + PACKAGE_OPTIMIZERS)
    return ValueError(
        f"`TrainingArguments(optim={name!r})` is not an optimizer name; choose one of: {choices}"
    )


def get_optimizer_cls_and_kwargs(
    args: Any, model: nn.Module | None = None
) -> tuple[type[torch.optim.Optimizer], dict[str, Any]]:
    """The optimizer class and keyword arguments (without ``params``) for ``args.optim``.

    ``args`` needs ``optim``, ``optim_args``, ``learning_rate``, ``adam_beta1``, ``adam_beta2``,
    ``adam_epsilon`` (a ``TrainingArguments`` has them); ``model`` is needed by GaLore / APOLLO
    (their groups come from ``optim_target_modules``) and LOMO. Weight decay is not in the kwargs
    (the groups of :func:`create_optimizer` carry it) except where transformers puts it there
    (schedule-free, StableAdamW). Names needing a package: see :mod:`hf_lightning.optim.extras`.
    """
    name = _optim_name(args.optim)
    if name in EXTRA_OPTIMIZERS:
        return extra_optimizer_cls_and_kwargs(
            name, args, model, parse_optim_args(getattr(args, "optim_args", None))
        )
    if name not in SUPPORTED_OPTIMIZERS:
        raise _unknown(name)
    if getattr(args, "optim_target_modules", None) is not None:
        warnings.warn(
            f"`TrainingArguments(optim_target_modules=...)` is only used by GaLore / APOLLO optimizers; "
            f"optim={name!r} ignores it",
            stacklevel=2,
        )
    optim_args = parse_optim_args(getattr(args, "optim_args", None))
    kwargs: dict[str, Any] = {"lr": args.learning_rate}
    if name == "adafactor":
        _warn_unused(name, list(optim_args))
        return _adafactor_class(), {**kwargs, "scale_parameter": False, "relative_step": False}
    if name in _TORCH_CLASSES:
        return _TORCH_CLASSES[name], _torch_kwargs(name, kwargs, optim_args)
    _warn_unused(name, list(optim_args))
    if name == "adamw_hf":
        warnings.warn(
            "`TrainingArguments(optim='adamw_hf')`: transformers removed its own AdamW; using torch.optim.AdamW",
            stacklevel=2,
        )
    kwargs.update(betas=(args.adam_beta1, args.adam_beta2), eps=args.adam_epsilon)
    if name == "adamw_torch_fused":
        kwargs["fused"] = True
    return torch.optim.AdamW, kwargs


def get_parameter_names(
    model: nn.Module, forbidden_layer_types: Any, forbidden_layer_names: Any = None
) -> list[str]:
    """``transformers.trainer_pt_utils.get_parameter_names``: the names of ``model``'s parameters (children first)
    outside every module of ``forbidden_layer_types``, and whose lower-cased name matches none of the regular
    expressions ``forbidden_layer_names`` (searched in the name relative to each module on the way down)."""
    patterns = [re.compile(pattern) for pattern in forbidden_layer_names or ()]
    excluded = tuple(forbidden_layer_types)

    def allowed(name: str) -> bool:
        return not any(pattern.search(name.lower()) for pattern in patterns)

    names: list[str] = []
    for child_name, child in model.named_children():
        if isinstance(child, excluded):
            continue
        inner = get_parameter_names(child, excluded, forbidden_layer_names)
        names += [f"{child_name}.{n}" for n in inner if allowed(f"{child_name}.{n}")]
    return names + [name for name in model._parameters if allowed(name)]


def get_decay_parameter_names(model: nn.Module) -> list[str]:
    """Names of the parameters that get weight decay, as ``transformers.Trainer`` chooses them.

    Excluded: every parameter inside an ``nn.LayerNorm`` (or subclass), and every parameter whose
    lower-cased full name contains "bias", "layernorm" or "rmsnorm", or has a ``norm`` or ``*_norm``
    path component (``model.norm.weight``, ``attn_norm.weight``). Other normalisation classes count
    only through their names, exactly as in transformers, so that the two groups, and therefore
    ``optimizer.pt``, line up with checkpoints transformers writes.
    """
    return get_parameter_names(model, [nn.LayerNorm], _DECAY_EXCLUDED_NAMES)


def _is_optimizer_class(candidate: Any) -> bool:
    return isinstance(candidate, type) and issubclass(candidate, torch.optim.Optimizer)


def create_optimizer(
    model: nn.Module,
    args: Any,
    optimizer_cls_and_kwargs: tuple[Any, dict[str, Any]] | None = None,
    *,
    decay_parameter_names: Callable[[nn.Module], list[str]] = get_decay_parameter_names,
    cls_and_kwargs: Callable[[Any, nn.Module], tuple[Any, dict[str, Any]]] | None = None,
) -> torch.optim.Optimizer:
    """The optimizer ``transformers.Trainer.create_optimizer`` builds, over ``model``'s trainable parameters.

    Group 0 holds the decayed parameters with ``args.weight_decay``, group 1 the rest with 0.0.
    ``optimizer_cls_and_kwargs`` (the Trainer argument of that name) replaces the class and kwargs
    from ``args.optim``; a ``params`` entry in its kwargs replaces the groups (as do ``model`` for
    LOMO and ``optimizer_dict`` for the layer-wise optimizers), and a first element
    that is not an Optimizer class is treated as a factory: ``factory()(model, **kwargs)``.
    ``decay_parameter_names`` and ``cls_and_kwargs`` replace :func:`get_decay_parameter_names` and
    :func:`get_optimizer_cls_and_kwargs` (the Trainer passes its own methods: a subclass's overrides apply).
    """
    decay = set(decay_parameter_names(model))
    named = list(model.named_parameters())
    groups = [
        {
            "params": [p for n, p in named if n in decay and p.requires_grad],
            "weight_decay": args.weight_decay,
        },
        {"params": [p for n, p in named if n not in decay and p.requires_grad], "weight_decay": 0.0},
    ]
    if optimizer_cls_and_kwargs is not None:
        optimizer_cls, optimizer_kwargs = optimizer_cls_and_kwargs
    else:
        optimizer_cls, optimizer_kwargs = (cls_and_kwargs or get_optimizer_cls_and_kwargs)(args, model)
    optimizer_kwargs = dict(optimizer_kwargs)
    if not _is_optimizer_class(optimizer_cls):
        return optimizer_cls()(model, **optimizer_kwargs)
    first: Any = groups
    for key in ("params", "model", "optimizer_dict"):  # transformers' order: the last one present wins
        if key in optimizer_kwargs:
            first = optimizer_kwargs.pop(key)
    optimizer = optimizer_cls(first, **optimizer_kwargs)
    if callable(getattr(optimizer, "fused_backward", None)):
        _step_runs_closure_only(optimizer)
    if "bitsandbytes" in str(optimizer_cls) and optimizer_kwargs.get("optim_bits") == 8:
        _embeddings_in_32_bit(model)
    return optimizer


def _step_runs_closure_only(optimizer: torch.optim.Optimizer) -> None:
    """LOMO updates the weights in ``fused_backward``: its ``step`` only runs the closure (the
    clipping / pre-step hooks Lightning passes), as accelerate makes it a no-op for transformers."""

    def step(self: torch.optim.Optimizer, closure: Any = None) -> None:
        if closure is not None:
            closure()

    optimizer.step = types.MethodType(step, optimizer)  # type: ignore[method-assign]


def _embeddings_in_32_bit(model: nn.Module) -> None:
    """bitsandbytes' 8-bit optimizers keep embedding weights in 32-bit state, as transformers asks."""
    manager = require_package(
        "bitsandbytes", "8-bit bitsandbytes optimizer"
    ).optim.GlobalOptimManager.get_instance()
    for module in model.modules():
        if isinstance(module, nn.Embedding):
            manager.register_module_override(module, "weight", {"optim_bits": 32})


def get_learning_rates(optimizer: torch.optim.Optimizer | None) -> list[float]:
    """The current learning rate of every parameter group."""
    if optimizer is None:
        raise ValueError("get_learning_rates(optimizer=None): create the optimizer first")
    return [group["lr"] for group in optimizer.param_groups]


def current_learning_rate(optimizer: Any, scheduler: Any) -> float:
    """``Trainer._get_learning_rate``: the rate logged for a step, on both paths (Trainer and ``HFModule``).

    The scheduler's last rate (``get_last_lr()[0]``); the first parameter group's rate when there is no
    scheduler, when it is stepped with a metric (``ReduceLROnPlateau``, ``GreedyLR``), or when it keeps
    no last rate.
    """
    if not steps_per_update(scheduler) or not hasattr(scheduler, "get_last_lr"):
        return float(optimizer.param_groups[0]["lr"])
    return float(scheduler.get_last_lr()[0])
