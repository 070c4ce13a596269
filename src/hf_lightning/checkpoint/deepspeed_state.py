"""A DeepSpeed engine's state in a ``checkpoint-N`` folder, in transformers' layout, read without running code.

Under ``deepspeed`` transformers saves a checkpoint with the engine's own ``save_checkpoint``: a
``global_step{N}/`` folder (``mp_rank_00_model_states.pt``, and with ZeRO one
``zero_pp_rank_{r}_mp_rank_00_optim_states.pt`` per process holding that process's fp32 partition and
optimizer state), a ``latest`` file naming it and DeepSpeed's ``zero_to_fp32.py``, beside the usual
``model.safetensors`` (gathered under ZeRO-3), ``scheduler.pt``, RNG files and ``trainer_state.json``.
There is no ``optimizer.pt``. On resume, the engine reads its folder back once it exists (the
optimizer state and the fp32 master weights, on every process).

The engine writes and reads those files with ``torch.load(weights_only=False)``; here they are read
with ``weights_only=True`` and only DeepSpeed's own plain checkpoint classes allowed, so a planted file
raises :class:`CheckpointError` naming it and its code never runs.

The engine (a Lightning strategy's object) is registered on the user's model by the adapters, as the
FSDP1 wrapper is (``checkpoint/sharded.py``); every function here that takes it is a collective.
"""

from __future__ import annotations

import contextlib
import os
import pickle
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from hf_lightning.checkpoint.io import CheckpointError
from hf_lightning.checkpoint.sharded import _RootRef, zero3_gathered

__all__ = [
    "deepspeed_engine",
    "deepspeed_save_options",
    "has_deepspeed_state",
    "load_pending_deepspeed_state",
    "register_deepspeed_engine",
    "request_deepspeed_resume",
]

_ENGINE_KEY = "_hf_lightning_deepspeed_engine"
_RESUME_KEY = "_hf_lightning_deepspeed_resume"
LATEST_NAME = "latest"


def register_deepspeed_engine(model: nn.Module, engine: Any) -> None:
    """Record the DeepSpeed engine training ``model`` (transformers' ``model_wrapped``)."""
    model.__dict__[_ENGINE_KEY] = _RootRef(engine)


def deepspeed_engine(model: nn.Module) -> Any:
    """The DeepSpeed engine registered for ``model``, if any."""
    ref = model.__dict__.get(_ENGINE_KEY)
    return ref.root if ref is not None else None


def has_deepspeed_state(folder: str | os.PathLike[str]) -> bool:
    """Whether ``folder`` holds a DeepSpeed engine checkpoint (a ``latest`` file naming its ``global_step*`` folder)."""
    latest = os.path.join(os.fspath(folder), LATEST_NAME)
    if not os.path.isfile(latest):
        return False
    with open(latest, encoding="utf-8") as handle:
        tag = handle.read().strip()
    return bool(tag) and os.path.isdir(os.path.join(os.fspath(folder), tag))


def deepspeed_save_options(model: nn.Module, optimizer: Any, everywhere: bool) -> dict[str, Any]:
    """``save_checkpoint``'s options under DeepSpeed (``{}`` without an engine), computed on every process.

    The full weights (gathered under ZeRO-3) are written as ``model.safetensors``: copied to host memory on
    process 0 only, or on every process with ``everywhere`` (``save_on_each_node``: each node's saver);
    unless ``optimizer`` is None (``save_only_model``) the engine writes its ``global_step{N}/`` folder on
    every process.
    """
    engine = deepspeed_engine(model)
    if engine is None:
        return {}
    saver = everywhere or not torch.distributed.is_initialized() or torch.distributed.get_rank() == 0
    weights: dict[str, torch.Tensor] = {}
    with zero3_gathered(model):  # ZeRO-3: every process takes part; only a saver keeps a copy in host memory
        if saver:
            weights = {name: value.detach().cpu().clone() for name, value in model.state_dict().items()}
    options: dict[str, Any] = {"model_state_dict": weights}
    if optimizer is not None:
        options["sharded_writer"] = lambda folder: engine.save_checkpoint(folder)
    return options


def request_deepspeed_resume(model: nn.Module, folder: str | None) -> None:
    """Ask the engine, once built, to read ``folder``'s DeepSpeed state (see :func:`load_pending_deepspeed_state`).

    Raises:
        CheckpointError: ``folder`` holds no DeepSpeed state (it was written without ``deepspeed``), as
            transformers refuses it.
    """
    if folder is None:  # no resume: forget a request a failed fit left behind
        model.__dict__.pop(_RESUME_KEY, None)
        return
    if not has_deepspeed_state(folder):
        raise CheckpointError(
            f"Can't find a valid checkpoint at {folder}: under `deepspeed` a checkpoint must hold DeepSpeed's "
            f"state (a `{LATEST_NAME}` file and its `global_step*` folder), and this one was written without "
            "DeepSpeed. Resume it without `deepspeed`, or load only its weights with `from_pretrained`.",
            folder,
        )
    model.__dict__[_RESUME_KEY] = os.fspath(folder)


def load_pending_deepspeed_state(model: nn.Module, engine: Any) -> str | None:
    """Read the state asked for by :func:`request_deepspeed_resume` into ``engine``; the folder, or None."""
    folder = model.__dict__.pop(_RESUME_KEY, None)
    if folder is None:
        return None
    with _safe_engine_loading(engine):
        path, _ = engine.load_checkpoint(
            folder, load_module_strict=True, load_optimizer_states=True, load_lr_scheduler_states=False
        )
    if path is None:
        raise CheckpointError(f"DeepSpeed found no checkpoint to resume in `{folder}`", folder)
    return str(folder)


def _allowed_globals() -> list[Any]:
    """The classes DeepSpeed pickles into its checkpoint files (plain records and enums)."""
    from deepspeed.runtime.fp16.loss_scaler import DynamicLossScaler, LossScaler
    from deepspeed.runtime.zero.config import ZeroStageEnum
    from deepspeed.utils.tensor_fragment import fragment_address

    return [LossScaler, DynamicLossScaler, ZeroStageEnum, fragment_address, set]


@contextlib.contextmanager
def _safe_engine_loading(engine: Any) -> Iterator[None]:
    """The engine's checkpoint reader with ``torch.load(weights_only=True)``, DeepSpeed's classes allowed."""
    checkpoint_engine = engine.checkpoint_engine

    def load(path: str, map_location: Any = None) -> Any:
        try:
            with torch.serialization.safe_globals(_allowed_globals()):
                return torch.load(path, map_location=map_location, weights_only=True)
        except (pickle.UnpicklingError, RuntimeError, EOFError, OSError) as exc:
            raise CheckpointError(
                f"`{path}` is not a DeepSpeed checkpoint file this version can read safely: {exc}", path
            ) from exc

    checkpoint_engine.load = load  # an instance attribute: shadows the class's unsafe reader
    try:
        yield
    finally:
        del checkpoint_engine.load
