"""Model weights in the HF checkpoint folder: write and read ``model.safetensors`` and its variants.

Writing: a model with ``save_pretrained`` writes its own files (config, safetensors, shards); any other
``nn.Module`` gets one ``model.safetensors`` from its state dict (metadata ``{"format": "pt"}``, as
transformers writes it). safetensors refuses tensors that share memory, so tied weights (the GPT-2
``lm_head.weight`` is ``transformer.wte.weight``) are written once, under the first name in the state dict.

Reading puts in what the model class's ``from_pretrained`` would load from the folder:
``model.safetensors``, ``model.safetensors.index.json`` (shards), ``pytorch_model.bin`` or its index (the
``.bin`` files with ``weights_only=True``); transformers 5's key conversions for a ``PreTrainedModel``
(``hf_lightning.checkpoint.conversion``: renamed, merged and split tensors); a ``PeftModel``'s adapter files
(``hf_lightning.checkpoint.peft_adapters``); a folder with only a distributed checkpoint
(``pytorch_model_fsdp_0/``, ``fsdp_config['state_dict_type']="SHARDED_STATE_DICT"``) through
``hf_lightning.checkpoint.sharded``, as is a sharded (FSDP2) model. A key missing from the file is not an error when
the model ties it to a key the file has: loading the kept name fills both. Every key is checked before any weight
changes: the model is either loaded whole or left as it was, with a :class:`CheckpointError` naming the keys.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from typing import Any, cast

import safetensors.torch
import torch
from torch import nn

from hf_lightning.checkpoint.conversion import is_pretrained_model, to_model_state
from hf_lightning.checkpoint.io import CheckpointError, load_safetensors, safe_torch_load
from hf_lightning.checkpoint.peft_adapters import has_adapter_weights, is_peft_model, load_adapter_weights
from hf_lightning.checkpoint.sharded import (
    fsdp_root,
    has_sharded_weights,
    is_sharded,
    load_full_model_state,
    load_sharded_model,
    zero3_gathered,
)

__all__ = [
    "SAFE_WEIGHTS_INDEX_NAME",
    "SAFE_WEIGHTS_NAME",
    "WEIGHTS_INDEX_NAME",
    "WEIGHTS_NAME",
    "WEIGHT_FILE_NAMES",
    "dedupe_shared_tensors",
    "load_model_weights",
    "save_model_weights",
    "unwrap_model",
]

SAFE_WEIGHTS_NAME = "model.safetensors"
SAFE_WEIGHTS_INDEX_NAME = "model.safetensors.index.json"
WEIGHTS_NAME = "pytorch_model.bin"
WEIGHTS_INDEX_NAME = "pytorch_model.bin.index.json"
WEIGHT_FILE_NAMES = (SAFE_WEIGHTS_NAME, SAFE_WEIGHTS_INDEX_NAME, WEIGHTS_NAME, WEIGHTS_INDEX_NAME)


def unwrap_model(model: nn.Module) -> nn.Module:
    """Strip ``DistributedDataParallel`` / ``DataParallel`` and ``torch.compile`` wrappers."""
    while True:
        if isinstance(model, (nn.DataParallel, nn.parallel.DistributedDataParallel)):
            model = model.module
        elif isinstance(getattr(model, "_orig_mod", None), nn.Module):
            model = cast(nn.Module, model._orig_mod)
        else:
            return model


def _alias_key(tensor: torch.Tensor) -> tuple[Any, ...] | None:
    if tensor.device.type == "meta" or tensor.numel() == 0:
        return None
    storage = tensor.untyped_storage().data_ptr()
    return (storage, tensor.storage_offset(), tuple(tensor.shape), tuple(tensor.stride()), tensor.dtype)


def dedupe_shared_tensors(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A state dict safetensors accepts: exact aliases kept once (first name), other overlaps copied."""
    kept: dict[str, torch.Tensor] = {}
    seen_alias: set[tuple[Any, ...]] = set()
    seen_storage: set[int] = set()
    for name, tensor in state_dict.items():
        tensor = tensor.detach()
        key = _alias_key(tensor)
        if key is not None and key in seen_alias:
            continue
        if key is not None:
            seen_alias.add(key)
            if key[0] in seen_storage:  # overlaps another kept tensor without being the same view
                tensor = tensor.clone()
            seen_storage.add(key[0])
        kept[name] = tensor.contiguous()
    return kept


def save_model_weights(
    model: nn.Module, folder: str, state_dict: Mapping[str, torch.Tensor] | None = None
) -> None:
    """Write ``model`` into ``folder``: its ``save_pretrained`` when it has one, else ``model.safetensors``."""
    model = unwrap_model(model)
    os.makedirs(folder, exist_ok=True)
    if callable(getattr(model, "save_pretrained", None)):
        kwargs = {} if state_dict is None else {"state_dict": dict(state_dict)}
        cast(Any, model).save_pretrained(folder, **kwargs)
        return
    tensors = dedupe_shared_tensors(model.state_dict() if state_dict is None else state_dict)
    tensors = {name: tensor.cpu() for name, tensor in tensors.items()}
    safetensors.torch.save_file(tensors, os.path.join(folder, SAFE_WEIGHTS_NAME), metadata={"format": "pt"})


def _read_index(path: str) -> dict[str, str]:
    try:
        with open(path, encoding="utf-8") as handle:
            weight_map = json.load(handle)["weight_map"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"Checkpoint index `{path}` is truncated or corrupt ({exc}).", path) from exc
    if not isinstance(weight_map, dict):
        raise CheckpointError(f"Checkpoint index `{path}` has no `weight_map` object.", path)
    return weight_map


def _locate_weights(
    folder: str,
) -> tuple[list[str], set[str] | None, Callable[[str], dict[str, torch.Tensor]]]:
    """Shard paths, the keys an index promises (None for one file), and the loader for them."""
    loaders = {"safetensors": load_safetensors, "torch": lambda path: safe_torch_load(path, "cpu")}
    for name, kind, indexed in (
        (SAFE_WEIGHTS_NAME, "safetensors", False),
        (SAFE_WEIGHTS_INDEX_NAME, "safetensors", True),
        (WEIGHTS_NAME, "torch", False),
        (WEIGHTS_INDEX_NAME, "torch", True),
    ):
        path = os.path.join(folder, name)
        if not os.path.isfile(path):
            continue
        if not indexed:
            return [path], None, loaders[kind]
        weight_map = _read_index(path)
        shards = [os.path.join(folder, shard) for shard in sorted(set(weight_map.values()))]
        for shard in shards:
            if not os.path.isfile(shard):
                raise CheckpointError(f"Shard `{shard}` listed in `{path}` is missing.", shard)
        return shards, set(weight_map), loaders[kind]
    raise CheckpointError(
        f"No model weights in `{folder}`: expected one of {', '.join(WEIGHT_FILE_NAMES)}.", folder
    )


def _not_saved(model: nn.Module) -> set[str]:
    """The keys the model's ``save_pretrained`` leaves out (``_keys_to_ignore_on_save``: Marian's sinusoidal
    position tables, rebuilt by the model): not missing from a checkpoint, as transformers' resume takes them."""
    return set(getattr(model, "_keys_to_ignore_on_save", None) or ())


def _mismatch(model: nn.Module, loaded: set[str]) -> tuple[list[str], list[str]]:
    """Missing and unexpected keys, where a key tied to a loaded key, or one the model never saves, does not
    count as missing."""
    groups: dict[tuple[Any, ...], list[str]] = {}
    expected = model.state_dict(keep_vars=True)
    not_saved = _not_saved(model)
    for name, tensor in expected.items():
        if name in not_saved and name not in loaded:
            continue
        key = _alias_key(tensor)
        groups.setdefault(key if key is not None else ("solo", name), []).append(name)
    missing = []
    for names in groups.values():
        if not any(name in loaded for name in names):
            missing.extend(names)
    unexpected = sorted(name for name in loaded if name not in expected)
    return sorted(missing), unexpected


def _short(names: list[str]) -> str:
    return ", ".join(names[:10]) + (f", ... ({len(names)} in all)" if len(names) > 10 else "")


def _refuse_mismatch(model: nn.Module, folder: str, missing: list[str], unexpected: list[str]) -> None:
    if missing or unexpected:
        raise CheckpointError(
            f"`load_model_weights(strict=True)`: the weights in `{folder}` do not match "
            f"{type(model).__name__}. Missing keys: [{_short(missing)}]; unexpected keys: [{_short(unexpected)}].",
            folder,
        )


def _refuse_other_shapes(model: nn.Module, folder: str, shapes: Mapping[str, tuple[int, ...]]) -> None:
    """A tensor whose shape differs from the model's is refused before anything is copied (torch would copy
    the others first, leaving a model of two checkpoints). FSDP1's wrapped modules hold flat shards, whose shapes
    say nothing of the full tensors: its own state-dict loading checks them. A model whose class overrides
    ``load_state_dict`` decides for itself what fits (a buffer that grows as it trains takes the saved size),
    as transformers leaves it to: its own method runs, and only the error it raises is reported."""
    if fsdp_root(model) is not None or type(model).load_state_dict is not nn.Module.load_state_dict:
        return
    expected = model.state_dict()
    wrong = sorted(
        f"{name}: {tuple(shape)} in the checkpoint, {tuple(expected[name].shape)} in the model"
        for name, shape in shapes.items()
        if name in expected and tuple(shape) != tuple(expected[name].shape)
    )
    if wrong:
        raise CheckpointError(
            f"The weights in `{folder}` do not fit {type(model).__name__}, nothing was loaded; other shapes: "
            f"[{_short(wrong)}].",
            folder,
        )


def _safetensors_shapes(path: str) -> dict[str, tuple[int, ...]]:
    """The shape of every tensor in a safetensors file, from its header (``{}`` for another format)."""
    if not path.endswith(".safetensors"):
        return {}
    try:
        with safetensors.safe_open(path, framework="pt") as handle:
            return {name: tuple(handle.get_slice(name).get_shape()) for name in handle.keys()}
    except Exception:  # a damaged file: reading it reports what is wrong, naming it
        return {}


def _load_into_sharded(model: nn.Module, folder: str, state: dict[str, torch.Tensor], strict: bool) -> Any:
    """Full weights into a sharded (FSDP2) model; every process reads them and keeps its shard."""
    params = dict(model.named_parameters(remove_duplicate=False))
    expected = set(model.state_dict())
    tied = {name for name, p in params.items() if any(q is p and o in state for o, q in params.items())}
    missing = sorted(expected - set(state) - tied - _not_saved(model))
    unexpected = sorted(set(state) - expected)
    if strict:
        _refuse_mismatch(model, folder, missing, unexpected)
    try:
        load_full_model_state(model, {name: value for name, value in state.items() if name in expected})
    except (RuntimeError, ValueError, KeyError) as exc:
        raise CheckpointError(
            f"The weights in `{folder}` do not fit {type(model).__name__}: {exc}", folder
        ) from exc
    return nn.modules.module._IncompatibleKeys(missing, unexpected)


def load_model_weights(model: nn.Module, folder: str | os.PathLike[str], strict: bool = True) -> Any:
    """Load the weights in ``folder`` into ``model`` as its class's ``from_pretrained`` reads them; returns
    torch's ``(missing_keys, unexpected_keys)``.

    A ``PeftModel`` with adapter files in ``folder`` gets its adapters (``checkpoint/peft_adapters.py``, always
    checked). A transformers ``PreTrainedModel`` gets its key conversions (``checkpoint/conversion.py``). With
    ``strict=True`` a key the model lacks, or a model key neither in the files nor tied to one that is, raises
    :class:`CheckpointError` naming them before any weight is changed.
    """
    folder = os.fspath(folder)
    model = unwrap_model(model)
    with zero3_gathered(model, modifier_rank=0):  # DeepSpeed ZeRO-3: into the gathered parameters
        if is_peft_model(model) and has_adapter_weights(folder):
            return load_adapter_weights(model, folder)
        return _load_plain(model, folder, strict)


def _copy_in(model: nn.Module, state_dict: Mapping[str, torch.Tensor], path: str) -> None:
    try:
        model.load_state_dict(state_dict, strict=False)
    except RuntimeError as exc:
        raise CheckpointError(
            f"The weights in `{path}` do not fit {type(model).__name__}: {exc}", path
        ) from exc


def _load_plain(model: nn.Module, folder: str, strict: bool) -> Any:
    if not any(
        os.path.isfile(os.path.join(folder, name)) for name in WEIGHT_FILE_NAMES
    ) and has_sharded_weights(folder):
        load_sharded_model(
            model, folder
        )  # pytorch_model_fsdp_0/: a key the model has but the files lack raises
        return nn.modules.module._IncompatibleKeys([], [])
    if not any(
        os.path.isfile(os.path.join(folder, name)) for name in WEIGHT_FILE_NAMES
    ) and has_adapter_weights(folder):
        raise CheckpointError(
            f"`{folder}` holds PEFT adapters only (adapter_model.safetensors), and {type(model).__name__} is not "
            "a `peft.PeftModel` to load them into. Wrap the base model with `peft.get_peft_model` (or "
            "`PeftModel.from_pretrained`) as it was when the checkpoint was written.",
            folder,
        )
    paths, index_keys, loader = _locate_weights(folder)
    if index_keys is not None and not is_pretrained_model(model) and not is_sharded(model):
        return _load_shard_by_shard(model, folder, paths, index_keys, loader, strict)
    state: dict[str, torch.Tensor] = {}
    for path in paths:  # as from_pretrained: every shard, then the conversion over all of them
        state.update(loader(path))
    state = to_model_state(model, state, folder)
    _refuse_other_shapes(model, folder, {name: tuple(value.shape) for name, value in state.items()})
    if is_sharded(model):
        return _load_into_sharded(model, folder, state, strict)
    missing, unexpected = _mismatch(model, set(state))
    if strict:
        _refuse_mismatch(model, folder, missing, unexpected)
    _copy_in(model, state, paths[0] if len(paths) == 1 else folder)
    return nn.modules.module._IncompatibleKeys(missing, unexpected)


def _load_shard_by_shard(
    model: nn.Module,
    folder: str,
    paths: list[str],
    index_keys: set[str],
    loader: Callable[[str], dict[str, torch.Tensor]],
    strict: bool,
) -> Any:
    """An indexed checkpoint of a model without key conversions: checked against the index, then one shard at a time."""
    missing, unexpected = _mismatch(model, index_keys)
    if strict:
        _refuse_mismatch(model, folder, missing, unexpected)
    for path in paths:
        _refuse_other_shapes(model, folder, _safetensors_shapes(path))
    for path in paths:
        state_dict = loader(path)
        _copy_in(model, state_dict, path)
        del state_dict
    return nn.modules.module._IncompatibleKeys(missing, unexpected)
