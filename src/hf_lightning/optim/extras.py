"""The ``optim`` names that need a package beyond torch, built as transformers 5.24 builds them.

:func:`extra_optimizer_cls_and_kwargs` answers for every name in :data:`EXTRA_OPTIMIZERS`: it imports
the package (``ImportError`` naming the ``pip install "hf-lightning[extra]"`` line when it is
missing, see :mod:`hf_lightning.optim.packages`) and returns the same class and keyword arguments as
``transformers.Trainer.get_optimizer_cls_and_kwargs``: ``lr``, the Adam betas / epsilon, the
``optim_args`` keys each package reads, and for GaLore / APOLLO the parameter groups of
``optim_target_modules`` (``params``), for LOMO the ``model``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from hf_lightning.optim.low_rank import setup_low_rank_optimizer
from hf_lightning.optim.packages import package_at_least, require_package

__all__ = [
    "EXTRA_OPTIMIZERS",
    "LOMO_OPTIMIZERS",
    "OptimizerRequest",
    "extra_optimizer_cls_and_kwargs",
    "strtobool",
]

_BNB = (
    "adamw_bnb_8bit", "adamw_8bit", "paged_adamw_32bit", "paged_adamw_8bit", "ademamix", "ademamix_8bit",
    "paged_ademamix_32bit", "paged_ademamix_8bit", "lion_32bit", "lion_8bit", "paged_lion_32bit",
    "paged_lion_8bit", "rmsprop_bnb", "rmsprop_bnb_8bit", "rmsprop_bnb_32bit",
)  # fmt: skip
_GALORE = (
    "galore_adamw", "galore_adamw_8bit", "galore_adafactor", "galore_adamw_layerwise",
    "galore_adamw_8bit_layerwise", "galore_adafactor_layerwise",
)  # fmt: skip

LOMO_OPTIMIZERS = ("lomo", "adalomo")
"""The names whose optimizer performs the backward itself (``fused_backward(loss, learning_rate)``)."""


@dataclass
class OptimizerRequest:
    """What a builder reads: the arguments, the model, and the kwargs gathered so far."""

    name: str
    args: Any
    model: nn.Module | None
    kwargs: dict[str, Any]
    adam_kwargs: dict[str, Any]
    optim_args: dict[str, str]

    @property
    def wanted_by(self) -> str:
        return f"TrainingArguments(optim={self.name!r})"

    def require(self, module: str, min_version: str | None = None) -> Any:
        return require_package(module, self.wanted_by, min_version)


def strtobool(value: str) -> bool:
    """transformers' ``strtobool``: "y/yes/t/true/on/1" → True, "n/no/f/false/off/0" → False."""
    lowered = value.lower()
    if lowered in ("y", "yes", "t", "true", "on", "1"):
        return True
    if lowered in ("n", "no", "f", "false", "off", "0"):
        return False
    raise ValueError(
        f"invalid truth value {value!r}: use one of y, yes, t, true, on, 1, n, no, f, false, off, 0"
    )


def _bitsandbytes(r: OptimizerRequest) -> tuple[Any, dict[str, Any]]:
    optim = r.require("bitsandbytes.optim")
    extra: dict[str, Any] = r.adam_kwargs
    if "adam" in r.name:
        cls = optim.AdamW
    elif "lion" in r.name:
        cls, extra = optim.Lion, {"betas": (r.args.adam_beta1, r.args.adam_beta2)}
    elif "rmsprop" in r.name:
        cls, extra = optim.RMSprop, r.optim_args
    else:  # ademamix
        cls, get = optim.AdEMAMix, r.optim_args.get
        extra = {
            "betas": (
                float(get("beta1", r.args.adam_beta1)),
                float(get("beta2", r.args.adam_beta2)),
                float(get("beta3", 0.9999)),
            ),
            "alpha": float(get("alpha", 5.0)),
            "eps": float(get("eps", r.args.adam_epsilon)),
        }
        extra.update({key: int(r.optim_args[key]) for key in ("t_alpha", "t_beta3") if key in r.optim_args})
    bnb_kwargs: dict[str, Any] = {"optim_bits": 8 if "8bit" in r.name else 32}
    if "rmsprop" not in r.name:
        bnb_kwargs["is_paged"] = "paged" in r.name
    return cls, {**r.kwargs, **extra, **bnb_kwargs}


def _anyprecision(r: OptimizerRequest) -> tuple[Any, dict[str, Any]]:
    cls = r.require("torchdistx").optimizers.AnyPrecisionAdamW
    get = r.optim_args.get
    return cls, {
        **r.kwargs,
        **r.adam_kwargs,
        "use_kahan_summation": strtobool(get("use_kahan_summation", "False")),
        "momentum_dtype": getattr(torch, get("momentum_dtype", "float32")),
        "variance_dtype": getattr(torch, get("variance_dtype", "float32")),
        "compensation_buffer_dtype": getattr(torch, get("compensation_buffer_dtype", "bfloat16")),
    }


def _galore(r: OptimizerRequest) -> tuple[Any, dict[str, Any]]:
    galore = r.require("galore_torch")
    base = r.name.removesuffix("_layerwise")
    cls = {
        "galore_adamw": galore.GaLoreAdamW,
        "galore_adamw_8bit": galore.GaLoreAdamW8bit,
        "galore_adafactor": galore.GaLoreAdafactor,
    }[base]
    pop = r.optim_args.pop
    low_rank = {
        "rank": int(pop("rank", 128)),
        "update_proj_gap": int(pop("update_proj_gap", 200)),
        "scale": float(pop("scale", 0.25)),
        "proj_type": pop("proj_type", "std"),
    }
    kwargs = dict(r.kwargs)
    if base == "galore_adafactor":  # transformers sets these after building the layer-wise optimizers,
        kwargs.update(scale_parameter=False, relative_step=False)  # whose Adafactor then rejects `lr`
    return setup_low_rank_optimizer(r.args, r.model, r.name, cls, low_rank, kwargs)


def _apollo(r: OptimizerRequest) -> tuple[Any, dict[str, Any]]:
    cls = r.require("apollo_torch").APOLLOAdamW
    pop = r.optim_args.pop
    low_rank = {
        "rank": int(pop("rank", 128)),
        "proj": pop("proj", "random"),
        "scale_type": pop("scale_type", "channel"),
        "update_proj_gap": int(pop("update_proj_gap", 200)),
        "scale": float(pop("scale", 1.0)),
        "proj_type": pop("proj_type", "std"),
        **r.adam_kwargs,
    }
    return setup_low_rank_optimizer(r.args, r.model, r.name, cls, low_rank, dict(r.kwargs))


def _lomo(r: OptimizerRequest) -> tuple[Any, dict[str, Any]]:
    lomo = r.require("lomo_optim")
    if r.model is None:
        raise ValueError(f"`{r.wanted_by}` needs the model: the LOMO optimizers are built over it")
    cls = lomo.AdaLomo if "ada" in r.name else lomo.Lomo
    return cls, {**r.kwargs, "model": r.model}


def _grokadamw(r: OptimizerRequest) -> tuple[Any, dict[str, Any]]:
    cls = r.require("grokadamw").GrokAdamW
    get = r.optim_args.get
    return cls, {
        **r.kwargs,
        "alpha_init": float(get("alpha_init", 0.98)),
        "lamb": float(get("lamb", 2.0)),
        "gamma": float(get("gamma", 0.1)),
        "grokking_signal_decay_rate": float(get("grokking_signal_decay_rate", 0.1)),
        "gradient_clipping": float(get("gradient_clipping", 1.0)),
    }


def _torchao(r: OptimizerRequest) -> tuple[Any, dict[str, Any]]:
    r.require("torchao", min_version="0.4.0")
    new_home = package_at_least("torchao", "0.11.0")
    low_bit = importlib.import_module("torchao.optim" if new_home else "torchao.prototype.low_bit_optim")
    cls = low_bit.AdamW4bit if r.name == "adamw_torch_4bit" else low_bit.AdamW8bit
    get = r.optim_args.get
    return cls, {
        **r.kwargs,
        "block_size": get("block_size", 256),
        "bf16_stochastic_round": strtobool(get("bf16_stochastic_round", "False")),
        **r.adam_kwargs,
    }


def _schedule_free(r: OptimizerRequest) -> tuple[Any, dict[str, Any]]:
    schedulefree = r.require("schedulefree", min_version="1.4.0" if r.name == "schedule_free_radam" else None)
    extra: dict[str, Any] = {}
    if r.name == "schedule_free_radam":
        cls, extra = schedulefree.RAdamScheduleFree, dict(r.adam_kwargs)
    elif r.name == "schedule_free_adamw":
        cls, extra = schedulefree.AdamWScheduleFree, dict(r.adam_kwargs)
    else:
        cls = schedulefree.SGDScheduleFree
    extra["weight_decay"] = r.args.weight_decay
    if r.name != "schedule_free_radam":
        extra["warmup_steps"] = r.args.warmup_steps
    extra["weight_lr_power"] = float(r.optim_args.get("weight_lr_power", 2.0))
    extra["r"] = float(r.optim_args.get("r", 0.0))
    return cls, {**r.kwargs, **extra}


def _stable_adamw(r: OptimizerRequest) -> tuple[Any, dict[str, Any]]:
    cls = r.require("optimi").StableAdamW
    pop = r.optim_args.pop
    max_lr, kahan_sum = pop("max_lr", None), pop("kahan_sum", None)
    kwargs = {
        **r.kwargs,
        **r.adam_kwargs,
        "weight_decay": r.args.weight_decay,
        "decouple_lr": bool(pop("decouple_lr", False)),
        "max_lr": float(max_lr) if max_lr is not None else None,
        "kahan_sum": bool(kahan_sum) if kahan_sum is not None else None,
    }
    if _triton_without_gpu(r.require("optimi")):
        kwargs["triton"] = False  # docs/divergences.md: optimi would pick its Triton kernels for CPU tensors
    return cls, kwargs


def _triton_without_gpu(optimi: Any) -> bool:
    """Whether optimi (0.3.x) would run its Triton kernels with no GPU: it decides before it has looked at a
    single parameter, so with Triton installed (it comes with CUDA builds of torch) it picks Triton even
    for CPU tensors, and the first step fails with "0 active drivers"."""
    utils = getattr(optimi, "utils", None)
    return bool(getattr(utils, "HAS_TRITON", False)) and not torch.cuda.is_available()


def _device_adamw(module: str, home: str, attribute: str) -> Callable[[OptimizerRequest], Any]:
    def build(r: OptimizerRequest) -> tuple[Any, dict[str, Any]]:
        r.require(module)
        return getattr(importlib.import_module(home), attribute), {**r.kwargs, **r.adam_kwargs}

    return build


EXTRA_OPTIMIZERS: dict[str, Callable[[OptimizerRequest], tuple[Any, dict[str, Any]]]] = {
    **dict.fromkeys(_BNB, _bitsandbytes),
    **dict.fromkeys(_GALORE, _galore),
    "apollo_adamw": _apollo,
    "apollo_adamw_layerwise": _apollo,
    "adamw_anyprecision": _anyprecision,
    "lomo": _lomo,
    "adalomo": _lomo,
    "grokadamw": _grokadamw,
    "adamw_torch_4bit": _torchao,
    "adamw_torch_8bit": _torchao,
    "schedule_free_radam": _schedule_free,
    "schedule_free_adamw": _schedule_free,
    "schedule_free_sgd": _schedule_free,
    "stable_adamw": _stable_adamw,
    "adamw_torch_xla": _device_adamw("torch_xla", "torch_xla.amp.syncfree", "AdamW"),
    "adamw_torch_npu_fused": _device_adamw("torch_npu", "torch_npu.optim", "NpuFusedAdamW"),
}
"""Every ``OptimizerNames`` value that needs a package beyond torch, with its builder."""


def extra_optimizer_cls_and_kwargs(
    name: str, args: Any, model: nn.Module | None, optim_args: dict[str, str]
) -> tuple[Any, dict[str, Any]]:
    """The class and kwargs transformers builds for ``name`` (one of :data:`EXTRA_OPTIMIZERS`)."""
    request = OptimizerRequest(
        name=name,
        args=args,
        model=model,
        kwargs={"lr": args.learning_rate},
        adam_kwargs={"betas": (args.adam_beta1, args.adam_beta2), "eps": args.adam_epsilon},
        optim_args=optim_args,
    )
    return EXTRA_OPTIMIZERS[name](request)
