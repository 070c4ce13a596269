"""``fsdp`` / ``fsdp_config`` → Lightning's ``ModelParallelStrategy`` (FSDP2) or ``FSDPStrategy`` (FSDP1).

``TrainingArguments`` has already folded the legacy ``fsdp`` words into ``fsdp_config`` and filled its
defaults (``hf_lightning/args/fsdp.py``); the plan builder ``hf_lightning.args.fsdp_settings`` makes it a
frozen :class:`FSDPSettings` (``hf_lightning/plan/fsdp.py``), with transformers' refusals. Here the
settings become a strategy (this module reads no argument):

- version 2 (transformers' default): ``ModelParallelStrategy(data_parallel_size=world,
  tensor_parallel_size=1)``; ``HFModule`` applies ``fully_shard`` to the wrapped layers and the
  root in ``configure_model`` (``adapters/fsdp_module.py``);
- version 1 (deprecated in transformers): ``FSDPStrategy`` (its subclass ``FSDP1Strategy``, which
  shards the HF model on any device: ``adapters/fsdp1_module.py``) with the sharding strategy,
  prefetching, ``use_orig_params``, ``sync_module_states``, activation checkpointing and the wrap policy.

Nothing here reads ``os.environ``; the strategy is built lazily by the plan.
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import Any

from hf_lightning.args.fsdp_settings import fsdp_settings  # re-exported: the plan builder, public here
from hf_lightning.plan.fsdp import FSDPSettings

__all__ = [
    "FSDPSettings",
    "build_fsdp_strategy",
    "checkpoint_layers",
    "fsdp_settings",
    "modules_to_wrap",
    "wraps_module",
]


def _layer_names(settings: FSDPSettings, model: Any) -> set[str]:
    """The class names to wrap under ``TRANSFORMER_BASED_WRAP``; each must exist in ``model``."""
    names = settings.transformer_layer_cls_to_wrap or tuple(getattr(model, "_no_split_modules", None) or ())
    present = {type(module).__name__ for module in model.modules()}
    for name in names:
        if name not in present:
            raise ValueError(
                f"`fsdp_config['transformer_layer_cls_to_wrap']`: could not find the transformer layer class "
                f"{name!r} in the model"
            )
    return set(names)


def wraps_module(settings: FSDPSettings, model: Any) -> Any:
    """A predicate ``module -> bool``: whether ``module`` is sharded as its own unit (the root always is)."""
    policy = settings.auto_wrap_policy
    if policy == "TRANSFORMER_BASED_WRAP":
        names = _layer_names(settings, model)
        return lambda module: type(module).__name__ in names
    if policy == "SIZE_BASED_WRAP" and settings.min_num_params > 0:
        limit = settings.min_num_params
        return lambda module: sum(p.numel() for p in module.parameters()) >= limit
    return lambda module: False


_CONTAINERS = ("ModuleList", "ModuleDict")
"""Never wrapped by size (they have no forward of their own), as torch's size-based policy excludes them."""


def modules_to_wrap(settings: FSDPSettings, model: Any) -> list[Any]:
    """The modules sharded as their own unit, children before parents (``fully_shard`` goes bottom-up).

    ``TRANSFORMER_BASED_WRAP``: the named layer classes. ``SIZE_BASED_WRAP``: as torch's size-based
    policy decides, bottom-up, a module whose parameters not already in a wrapped descendant number at
    least ``min_num_params`` (``ModuleList``/``ModuleDict`` and modules holding a parameter tied to one
    outside them excluded). The root is sharded separately.
    """
    if settings.auto_wrap_policy != "SIZE_BASED_WRAP" or settings.min_num_params <= 0:
        predicate = wraps_module(settings, model)
        return [m for m in _post_order(model) if m is not model and predicate(m)]
    chosen: list[Any] = []
    covered: set[int] = set()  # ids of parameters inside a chosen module
    owners = Counter(id(p) for _, p in model.named_parameters(remove_duplicate=False))
    for module in _post_order(model):
        if module is model or type(module).__name__ in _CONTAINERS or _shares_outside(module, owners):
            continue
        free = [p for p in module.parameters() if id(p) not in covered]
        if sum(p.numel() for p in free) >= settings.min_num_params:
            chosen.append(module)
            covered.update(id(p) for p in free)
    return chosen


def checkpoint_layers(model: Any, layers: list[Any]) -> None:
    """Activation checkpointing on ``layers`` of ``model`` (torch's checkpoint wrapper), chosen by the caller
    from the whole model, so every process wraps the same ones."""
    if not layers:
        return
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import apply_activation_checkpointing

    chosen = {id(layer) for layer in layers}
    apply_activation_checkpointing(model, check_fn=lambda module: id(module) in chosen)


def _shares_outside(module: Any, owners: Counter[int]) -> bool:
    """Whether a parameter of ``module`` is tied to one outside it (GPT-2's ``lm_head`` and ``wte``): FSDP2
    keeps tied parameters in one unit, so such a module is left to its parent."""
    inside = Counter(id(p) for _, p in module.named_parameters(remove_duplicate=False))
    return any(count < owners[key] for key, count in inside.items())


def _post_order(module: Any) -> list[Any]:
    order: list[Any] = []
    for child in module.children():
        order.extend(_post_order(child))
    order.append(module)
    return order


class _V1WrapPolicy:
    """FSDP1's callable wrap policy: the modules :func:`modules_to_wrap` picks, as FSDP2 shards them.

    The first module it sees is the model's root; the choice is made there, once, from the whole model
    (``SIZE_BASED_WRAP`` as torch's size-based policy decides, except that a module holding a parameter
    tied to one outside it is left to its parent: wrapped apart, GPT-2's ``transformer`` would reshard the
    embedding ``lm_head`` then uses).
    """

    def __init__(self, settings: FSDPSettings) -> None:
        self.settings = settings
        self.chosen: set[int] | None = None

    def __call__(self, module: Any, recurse: bool, nonwrapped_numel: int) -> bool:
        if self.chosen is None:  # the root
            self.chosen = {id(layer) for layer in modules_to_wrap(self.settings, module)}
        return recurse or id(module) in self.chosen


def build_fsdp_strategy(settings: FSDPSettings, world_size: int, backend: str | None, timeout_s: int) -> Any:
    """The Lightning strategy for ``settings`` (FSDP2: ``ModelParallelStrategy``; FSDP1: ``FSDPStrategy``)."""
    timeout = timedelta(seconds=timeout_s)
    if settings.version == 2:
        from lightning.pytorch.strategies import ModelParallelStrategy

        return ModelParallelStrategy(
            data_parallel_size=world_size,
            tensor_parallel_size=1,
            save_distributed_checkpoint=settings.state_dict_type == "SHARDED_STATE_DICT",
            process_group_backend=backend,
            timeout=timeout,
        )
    from .fsdp1_module import FSDP1Strategy

    options: dict[str, Any] = {
        "sharding_strategy": str(settings.reshard_after_forward).upper(),
        "auto_wrap_policy": _V1WrapPolicy(settings),
        "cpu_offload": settings.cpu_offload,
        "state_dict_type": "sharded" if settings.state_dict_type == "SHARDED_STATE_DICT" else "full",
        "process_group_backend": backend,
        "timeout": timeout,
        "forward_prefetch": settings.forward_prefetch,
        "use_orig_params": settings.use_orig_params,
        "sync_module_states": settings.sync_module_states,
        **_v1_prefetch(settings.backward_prefetch),
    }
    if settings.limit_all_gathers is not None:
        options["limit_all_gathers"] = settings.limit_all_gathers
    if settings.activation_checkpointing:  # applied after wrapping, to the layers the wrap policy picks
        options["checkpointing"] = settings
    return FSDP1Strategy(**options)


def _v1_prefetch(name: str) -> dict[str, Any]:
    if name == "NO_PREFETCH":
        return {"backward_prefetch": None}
    from torch.distributed.fsdp import BackwardPrefetch

    return {"backward_prefetch": BackwardPrefetch[name]}
