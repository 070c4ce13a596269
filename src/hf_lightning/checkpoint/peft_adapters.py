"""PEFT adapters in a checkpoint folder: the files a ``PeftModel`` saves, recognised and loaded through peft itself.

A ``PeftModel`` saves only its adapters (``PeftModel.save_pretrained``, which transformers' Trainer calls for
each ``checkpoint-N`` and for ``save_model``)::

    checkpoint-{N}/
        adapter_model.safetensors   the adapter named "default" (LoRA matrices, IA3 vectors, prompt embeddings, ...)
        adapter_config.json
        README.md
        <name>/adapter_model.safetensors, <name>/adapter_config.json   each other adapter

Loading follows transformers' Trainer (``model.load_adapter(folder, adapter_name)``, which is peft's
``load_peft_weights`` then ``set_peft_model_state_dict``), with one check first: the keys in each adapter
file must be exactly those ``get_peft_model_state_dict`` gives for that adapter of the model (what its
``save_pretrained`` writes). Otherwise :class:`CheckpointError` names the missing and unexpected keys, and no
weight has changed. The base model's frozen weights are not in the checkpoint (as with transformers): they
stay those the model was built with.

peft is never imported here: a model can only be a ``PeftModel`` when the program already imported peft.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from safetensors import safe_open
from torch import nn

from hf_lightning.checkpoint.io import CheckpointError, safe_torch_load

__all__ = [
    "ADAPTER_CONFIG_NAME",
    "ADAPTER_SAFE_WEIGHTS_NAME",
    "ADAPTER_WEIGHTS_NAME",
    "ADAPTER_WEIGHT_FILE_NAMES",
    "adapter_folders",
    "has_adapter_weights",
    "is_peft_model",
    "load_adapter_weights",
]

ADAPTER_SAFE_WEIGHTS_NAME = "adapter_model.safetensors"
ADAPTER_WEIGHTS_NAME = "adapter_model.bin"
ADAPTER_CONFIG_NAME = "adapter_config.json"
ADAPTER_WEIGHT_FILE_NAMES = (ADAPTER_SAFE_WEIGHTS_NAME, ADAPTER_WEIGHTS_NAME)
DEFAULT_ADAPTER = "default"
"""The adapter ``PeftModel.save_pretrained`` writes at the top of the folder; others go into ``<name>/``."""


def is_peft_model(model: nn.Module) -> bool:
    """Whether ``model`` is a ``peft.PeftModel`` (``False`` when peft is not imported)."""
    peft_model = getattr(sys.modules.get("peft.peft_model"), "PeftModel", None)
    return isinstance(peft_model, type) and isinstance(model, peft_model)


def _weights_file(folder: str) -> str | None:
    for name in ADAPTER_WEIGHT_FILE_NAMES:
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            return path
    return None


def adapter_folders(folder: str | os.PathLike[str]) -> dict[str, str]:
    """``{adapter name: its weights file}`` for the adapters saved in ``folder``, as ``PeftModel.save_pretrained``
    lays them out (``default`` at the top, each other adapter in its own subfolder)."""
    folder = os.fspath(folder)
    found: dict[str, str] = {}
    top = _weights_file(folder)
    if top is not None:
        found[DEFAULT_ADAPTER] = top
    if os.path.isdir(folder):
        for name in sorted(os.listdir(folder)):
            sub = os.path.join(folder, name)
            path = _weights_file(sub) if os.path.isdir(sub) else None
            if path is not None and name != DEFAULT_ADAPTER:
                found[name] = path
    return found


def has_adapter_weights(folder: str | os.PathLike[str]) -> bool:
    """Whether ``folder`` holds PEFT adapter weights (at its top or in an adapter subfolder)."""
    return bool(adapter_folders(folder))


def _file_shapes(path: str) -> dict[str, tuple[int, ...]]:
    """The shape of each tensor of an adapter file (a safetensors file from its header)."""
    if path.endswith(".safetensors"):
        try:
            with safe_open(path, framework="pt") as handle:
                return {name: tuple(handle.get_slice(name).get_shape()) for name in handle.keys()}
        except Exception as exc:  # safetensors raises its own SafetensorError
            raise CheckpointError(
                f"Adapter weights `{path}` are truncated or corrupt ({exc}).", path
            ) from exc
    return {name: tuple(value.shape) for name, value in safe_torch_load(path, "cpu").items()}


def _adapter_problem(model: Any, name: str, path: str) -> str | None:
    """How the file ``path`` differs from what ``save_pretrained`` writes for adapter ``name``, or ``None``."""
    from peft.utils import get_peft_model_state_dict  # noqa: PLC0415

    saved = get_peft_model_state_dict(model, adapter_name=name)
    expected = {key: tuple(value.shape) for key, value in saved.items()}
    present = _file_shapes(path)
    missing, unexpected = sorted(set(expected) - set(present)), sorted(set(present) - set(expected))
    if missing or unexpected:
        return (
            f"`{path}` does not match adapter `{name}` of {type(model).__name__}. "
            f"Missing keys: [{_short(missing)}]; unexpected keys: [{_short(unexpected)}]"
        )
    wrong = sorted(
        f"{key}: {present[key]} in the file, {shape} in the model"
        for key, shape in expected.items()
        if present[key] != shape
    )
    return f"`{path}` has other shapes than adapter `{name}`: [{_short(wrong)}]" if wrong else None


def _short(names: list[str]) -> str:
    return ", ".join(names[:10]) + (f", ... ({len(names)} in all)" if len(names) > 10 else "")


def _plan(model: Any, folder: str) -> dict[str, str]:
    """The adapter files to load, by adapter name, after checking each against the model's adapter."""
    saved = adapter_folders(folder)
    plan: dict[str, str] = {}
    problems = []
    for name in model.peft_config:
        path = saved.get(name)
        if path is None:
            where = folder if name == DEFAULT_ADAPTER else os.path.join(folder, name)
            problems.append(f"adapter `{name}` has no {ADAPTER_SAFE_WEIGHTS_NAME} in `{where}`")
            continue
        problem = _adapter_problem(model, name, path)
        if problem is not None:
            problems.append(problem)
        plan[name] = path
    extra = sorted(set(saved) - set(model.peft_config))
    if extra:
        problems.append(f"the folder holds adapters the model does not have: {extra}")
    if problems:
        raise CheckpointError(
            f"The adapters in `{folder}` do not fit the model, nothing was loaded: "
            + "; ".join(problems)
            + ".",
            folder,
        )
    return plan


def load_adapter_weights(model: nn.Module, folder: str | os.PathLike[str]) -> Any:
    """Load every adapter saved in ``folder`` into the ``PeftModel`` ``model``, checked first (module docstring).

    Returns torch's ``(missing_keys, unexpected_keys)``, both empty.
    """
    folder = os.fspath(folder)
    peft_model: Any = model
    for name, path in _plan(peft_model, folder).items():
        result = peft_model.load_adapter(os.path.dirname(path), adapter_name=name, torch_device="cpu")
        if result.missing_keys:  # peft filters them to this adapter's own keys
            raise CheckpointError(
                f"peft left keys of adapter `{name}` unloaded from `{path}`: [{_short(sorted(result.missing_keys))}]",
                path,
            )
    return nn.modules.module._IncompatibleKeys([], [])
