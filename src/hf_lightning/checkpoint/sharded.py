"""A sharded model's state (FSDP2's ``DTensor`` parameters, or FSDP1's flat shards) in and out of a checkpoint folder.

Two layouts, chosen by ``fsdp_config['state_dict_type']``:

- ``FULL_STATE_DICT``: the usual single-process files. Every process takes part in gathering the
  full weights and the full optimizer state; the saving process writes ``model.safetensors`` and
  ``optimizer.pt`` (its state keyed by parameter index, as ``optimizer.state_dict()`` keys it). Such a
  folder resumes with or without FSDP, and ``from_pretrained`` loads it.
- ``SHARDED_STATE_DICT``: transformers' (Accelerate's) folders ``pytorch_model_fsdp_0/`` and
  ``optimizer_0/``, written by ``torch.distributed.checkpoint`` (each process writes its own shard, the
  coordinator the ``.metadata``). The state dicts are keyed ``{"model": ...}`` and
  ``{"optimizer": ...}`` (parameter names as keys), as Accelerate writes them, so either program
  resumes the other's folder.

Reading never unpickles arbitrary objects: the ``.metadata`` of a distributed checkpoint (a pickle)
is read by an unpickler that knows only the checkpoint's own metadata classes, and its shards are read
with ``torch.load(weights_only=True)``. Every function here that takes a sharded model is a
collective: all processes call it, in the same order.

FSDP2 shards the model in place. FSDP1 wraps it: the engine registers the wrapper with
:func:`register_fsdp_root`, and every state-dict call here goes through it, so callers keep passing
the user's model (as transformers keeps ``model`` and ``model_wrapped`` apart).
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Mapping
from typing import Any, cast

import torch
from torch import nn

from hf_lightning.checkpoint.dcp_reader import METADATA as _METADATA
from hf_lightning.checkpoint.dcp_reader import _distributed
from hf_lightning.checkpoint.dcp_reader import dcp_load as _dcp_load

__all__ = [
    "FSDP_MODEL_DIR",
    "FSDP_OPTIMIZER_DIR",
    "OPTIMIZER_BIN_NAME",
    "fsdp_root",
    "gathered_model_state",
    "gathered_optimizer_state",
    "has_sharded_weights",
    "is_sharded",
    "needs_gathering",
    "load_fsdp_optimizer",
    "load_full_model_state",
    "load_indexed_optimizer_state",
    "load_optimizer_state",
    "load_sharded_model",
    "register_fsdp_root",
    "save_sharded_state",
    "sharded_save_options",
    "zero3_gathered",
]

FSDP_MODEL_DIR = "pytorch_model_fsdp_0"
FSDP_OPTIMIZER_DIR = "optimizer_0"
OPTIMIZER_BIN_NAME = "optimizer.bin"
"""Accelerate's full optimizer state under FSDP (keyed by parameter name); read on resume."""

_ROOT_KEY = "_hf_lightning_fsdp_root"


class _RootRef:
    """The FSDP1 wrapper of a model, kept in the model's ``__dict__`` (not a submodule); a copy or a pickle
    of the model does not take it along."""

    def __init__(self, root: nn.Module | None) -> None:
        self.root = root

    def __deepcopy__(self, memo: dict[int, Any]) -> _RootRef:
        return _RootRef(None)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_RootRef, (None,))


def register_fsdp_root(model: nn.Module, root: nn.Module) -> None:
    """Record ``root``, FSDP1's ``FullyShardedDataParallel`` around ``model``, for the functions here."""
    model.__dict__[_ROOT_KEY] = _RootRef(root)


def fsdp_root(model: nn.Module) -> nn.Module | None:
    """The FSDP1 wrapper registered for ``model``, if any."""
    ref = model.__dict__.get(_ROOT_KEY)
    return ref.root if ref is not None else None


def _root(model: nn.Module) -> nn.Module:
    """What the state-dict functions take: FSDP1's wrapper of ``model``, else ``model`` itself."""
    return fsdp_root(model) or model


def is_sharded(model: nn.Module) -> bool:
    """Whether ``model`` is sharded by FSDP: FSDP2's ``DTensor`` parameters, or an FSDP1 wrapper registered."""
    if fsdp_root(model) is not None:
        return True
    return any(callable(getattr(param, "full_tensor", None)) for param in model.parameters())


def _offload(model: nn.Module) -> bool:
    """Whether a rank-0-only gather may offload to the CPU: FSDP1's offload of CPU tensors crashes
    (torch 2.13, a segmentation fault), so on the CPU every process gathers in place."""
    return fsdp_root(model) is None or any(param.is_cuda for param in model.parameters())


def _zero3(model: nn.Module) -> bool:
    return any(hasattr(param, "ds_numel") for param in model.parameters())


def zero3_gathered(model: nn.Module, modifier_rank: int | None = None) -> Any:
    """DeepSpeed ZeRO-3's partitions of ``model`` gathered for the ``with`` block (a no-op otherwise); every
    process enters it. With ``modifier_rank`` that process's changes are kept when they are partitioned again."""
    if not _zero3(model):
        return contextlib.nullcontext()
    import deepspeed

    return deepspeed.zero.GatheredParameters(list(model.parameters()), modifier_rank=modifier_rank)


def needs_gathering(model: nn.Module) -> bool:
    """Whether ``model``'s full weights must be gathered to be saved: FSDP2 shards or DeepSpeed ZeRO-3 partitions."""
    return is_sharded(model) or _zero3(model)


def has_sharded_weights(folder: str | os.PathLike[str]) -> bool:
    """Whether ``folder`` holds a distributed checkpoint of the model (``pytorch_model_fsdp_0/.metadata``)."""
    return os.path.isfile(os.path.join(os.fspath(folder), FSDP_MODEL_DIR, _METADATA))


def _options(**kwargs: Any) -> Any:
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(**kwargs)


def gathered_model_state(model: nn.Module, *, everywhere: bool = True) -> dict[str, torch.Tensor]:
    """The full weights of a sharded ``model`` on the CPU; without ``everywhere`` only process 0 gets them
    (the others get ``{}``)."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    if _zero3(model):  # DeepSpeed ZeRO-3: every process gathers the partitions for the copy
        with zero3_gathered(model):
            return {name: value.detach().cpu().clone() for name, value in model.state_dict().items()}
    if fsdp_root(model) is not None:  # FSDP1: FULL_STATE_DICT through the wrapper
        offload = not everywhere and _offload(model)
        state = cast(
            dict[str, torch.Tensor],
            get_model_state_dict(_root(model), options=_options(full_state_dict=True, cpu_offload=offload)),
        )
        return {name: value.detach().cpu() for name, value in state.items()}  # (on the CPU: every process)
    if everywhere:
        return {
            name: (value.full_tensor() if callable(getattr(value, "full_tensor", None)) else value)
            .detach()
            .cpu()
            for name, value in model.state_dict().items()
        }
    return cast(
        dict[str, torch.Tensor],
        get_model_state_dict(model, options=_options(full_state_dict=True, cpu_offload=True)),
    )


_WRAPPERS = ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "_orig_mod.")


def _clean(name: str) -> str:
    """A parameter's name without the wrappers' segments (as the state-dict functions name it)."""
    for segment in _WRAPPERS:
        name = name.replace(segment, "")
    return name


def _names_in_order(model: nn.Module, optimizer: torch.optim.Optimizer) -> list[str]:
    """The name of each parameter the optimizer holds, in its ``state_dict`` index order."""
    names = {id(param): _clean(name) for name, param in model.named_parameters()}
    order = []
    for group in optimizer.param_groups:
        for param in group["params"]:
            if id(param) not in names:
                raise ValueError(
                    "The optimizer holds a parameter that is not the model's; a sharded checkpoint can only "
                    "hold the model's own parameters"
                )
            order.append(names[id(param)])
    return order


def _indexed(by_name: Mapping[str, Any]) -> dict[str, Any]:
    """A name-keyed optimizer state dict, keyed by index as ``optimizer.state_dict()`` keys it."""
    index: dict[str, int] = {}
    groups = []
    for group in by_name["param_groups"]:
        ids = [index.setdefault(name, len(index)) for name in group["params"]]
        groups.append({**group, "params": ids})
    return {"state": {index[name]: value for name, value in by_name["state"].items()}, "param_groups": groups}


def _by_name(indexed: Mapping[str, Any], names: list[str]) -> dict[str, Any]:
    """The reverse of :func:`_indexed`, with the names of the optimizer's parameters in index order."""
    try:
        groups = [
            {**group, "params": [names[i] for i in group["params"]]} for group in indexed["param_groups"]
        ]
        state = {names[int(i)]: value for i, value in indexed["state"].items()}
    except (IndexError, KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"the optimizer state does not fit this optimizer's parameters ({exc})") from exc
    return {"state": state, "param_groups": groups}


def gathered_optimizer_state(
    model: nn.Module, optimizer: torch.optim.Optimizer, *, everywhere: bool = True
) -> dict[str, Any]:
    """The full optimizer state of a sharded model, keyed by index (what ``optimizer.pt`` holds)."""
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    offload = not everywhere and _offload(model)
    state = get_optimizer_state_dict(
        _root(model), optimizer, options=_options(full_state_dict=True, cpu_offload=offload)
    )
    return _indexed(state) if state else {}


def save_sharded_state(folder: str, model: nn.Module, optimizer: torch.optim.Optimizer | None) -> None:
    """Write ``folder/pytorch_model_fsdp_0`` (and ``optimizer_0`` unless ``optimizer`` is None), every process its shard."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

    single = not _distributed()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*assuming the intent is to")  # one process: intended
        model_state = {"model": get_model_state_dict(_root(model))}
        dcp.save(model_state, checkpoint_id=os.path.join(folder, FSDP_MODEL_DIR), no_dist=single)
        if optimizer is not None:
            state = {"optimizer": get_optimizer_state_dict(_root(model), optimizer)}
            dcp.save(state, checkpoint_id=os.path.join(folder, FSDP_OPTIMIZER_DIR), no_dist=single)


def load_sharded_model(model: nn.Module, folder: str | os.PathLike[str]) -> None:
    """Load ``folder/pytorch_model_fsdp_0`` into ``model``, sharded or not (a model missing a key is refused)."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict

    state = {"model": get_model_state_dict(_root(model))}
    _dcp_load(state, os.path.join(os.fspath(folder), FSDP_MODEL_DIR))
    set_model_state_dict(_root(model), state["model"])


def load_full_model_state(model: nn.Module, state_dict: Mapping[str, torch.Tensor]) -> None:
    """Load full (unsharded) weights into a sharded ``model``; a key tied to a given one is filled from it."""
    from torch.distributed.checkpoint.state_dict import set_model_state_dict

    complete = dict(state_dict)
    params = dict(model.named_parameters(remove_duplicate=False))
    for name, param in params.items():
        if name not in complete:
            twin = next((other for other, p in params.items() if p is param and other in complete), None)
            if twin is not None:
                complete[name] = complete[twin]
    set_model_state_dict(_root(model), cast(Any, complete), options=_options(full_state_dict=True))


def load_optimizer_state(model: nn.Module, optimizer: torch.optim.Optimizer, folder: str) -> str | None:
    """Restore ``optimizer`` from ``folder``'s ``optimizer_0/`` or Accelerate's ``optimizer.bin``.

    Returns the name loaded, or ``None`` when the folder has neither (the caller reads ``optimizer.pt``).
    """
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict, set_optimizer_state_dict

    sharded = is_sharded(model)
    directory = os.path.join(folder, FSDP_OPTIMIZER_DIR)
    if os.path.isdir(directory):
        root = _root(model)
        state = {"optimizer": get_optimizer_state_dict(root, optimizer)}  # a template: shapes and names
        _dcp_load(state, directory)
        set_optimizer_state_dict(root, optimizer, state["optimizer"])
        return FSDP_OPTIMIZER_DIR
    path = os.path.join(folder, OPTIMIZER_BIN_NAME)
    if os.path.isfile(path):
        from hf_lightning.checkpoint.io import safe_torch_load

        state = safe_torch_load(path, map_location="cpu")
        set_optimizer_state_dict(_root(model), optimizer, state, options=_options(full_state_dict=sharded))
        return OPTIMIZER_BIN_NAME
    return None


def load_indexed_optimizer_state(
    model: nn.Module, optimizer: torch.optim.Optimizer, indexed: Mapping[str, Any]
) -> None:
    """Load an ``optimizer.pt`` state (full, keyed by index) into the optimizer of a sharded ``model``."""
    from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

    by_name = _by_name(indexed, _names_in_order(model, optimizer))
    set_optimizer_state_dict(_root(model), optimizer, by_name, options=_options(full_state_dict=True))


def sharded_save_options(model: nn.Module, optimizer: Any, args: Any) -> dict[str, Any]:
    """``save_checkpoint``'s options for a sharded model (``{}`` otherwise), computed on every process.

    ``fsdp_config['state_dict_type']``: ``FULL_STATE_DICT`` (the default) gathers the full weights and
    optimizer state for the saver; ``SHARDED_STATE_DICT`` gives the writer of the shard folders that every
    process runs. ``optimizer`` is ``None`` with ``save_only_model``.
    """
    if not is_sharded(model):
        return {}
    kind = str((args.fsdp_config or {}).get("state_dict_type", "FULL_STATE_DICT")).upper()
    if kind == "SHARDED_STATE_DICT":
        return {"sharded_writer": lambda folder: save_sharded_state(folder, model, optimizer)}
    everywhere = bool(args.save_on_each_node)  # else only process 0 receives the gathered tensors
    return {
        "model_state_dict": gathered_model_state(model, everywhere=everywhere),
        "optimizer_state_dict": None
        if optimizer is None
        else gathered_optimizer_state(model, optimizer, everywhere=everywhere),
    }


def load_fsdp_optimizer(model: nn.Module, optimizer: Any, folder: str, *, optimizer_pt: str | None) -> bool:
    """The optimizer of an FSDP checkpoint (``optimizer_0/``, Accelerate's ``optimizer.bin``), or
    ``optimizer_pt`` (the folder's ``optimizer.pt``, if any) into the optimizer of an already sharded model;
    whether one was loaded."""
    if optimizer is None:
        return False
    if load_optimizer_state(model, optimizer, folder) is not None:
        return True
    if optimizer_pt is not None and is_sharded(model):
        from hf_lightning.checkpoint.io import safe_torch_load

        indexed = safe_torch_load(optimizer_pt, map_location="cpu")
        load_indexed_optimizer_state(model, optimizer, indexed)
        return True
    return False
