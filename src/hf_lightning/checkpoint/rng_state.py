"""Random number generator state in a checkpoint: ``rng_state.pth`` / ``rng_state_{rank}.pth``.

The file holds a dict with the keys transformers uses: ``"python"`` (``random.getstate()``),
``"numpy"`` (``np.random.get_state()``), ``"cpu"`` (``torch.random.get_rng_state()``) and, when CUDA is
available, ``"cuda"`` (the current device's state, or a list of every device's state when training is
distributed). A run with one process writes ``rng_state.pth``; with several, each process writes
``rng_state_{process_index}.pth``. Either program can restore the other's files.
"""

from __future__ import annotations

import os
import random
from typing import Any

import numpy as np
import torch

from hf_lightning.checkpoint.io import CheckpointError, safe_torch_load
from hf_lightning.utils.logging import get_logger

__all__ = ["capture_rng_state", "load_rng_state", "restore_rng_state", "rng_state_file_name"]

logger = get_logger(__name__)


def rng_state_file_name(process_index: int = 0, world_size: int = 1) -> str:
    """``rng_state.pth`` for one process, ``rng_state_{process_index}.pth`` when ``world_size > 1``."""
    return "rng_state.pth" if world_size <= 1 else f"rng_state_{process_index}.pth"


def capture_rng_state(distributed: bool = False) -> dict[str, Any]:
    """The current RNG states; with ``distributed=True`` the CUDA entry lists every visible device."""
    states: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "cpu": torch.random.get_rng_state(),
    }
    if torch.cuda.is_available():
        states["cuda"] = (
            torch.cuda.random.get_rng_state_all() if distributed else torch.cuda.random.get_rng_state()
        )
    return states


def _restore_cuda(state: Any) -> None:
    try:
        if isinstance(state, (list, tuple)):
            torch.cuda.random.set_rng_state_all(state)
        else:
            torch.cuda.random.set_rng_state(state)
    except Exception as exc:  # a different device count than at save time
        logger.warning(
            "Could not restore the CUDA RNG state (%s); resumed runs will not be bit-identical.", exc
        )


def restore_rng_state(states: dict[str, Any], source: str = "<rng state>") -> None:
    """Set the python, numpy, torch CPU (and CUDA, when present and available) generators from ``states``."""
    missing = [key for key in ("python", "numpy", "cpu") if key not in states]
    if missing:
        raise CheckpointError(f"RNG state `{source}` lacks the entries {missing}.", source)
    random.setstate(_as_python_state(states["python"]))
    np.random.set_state(states["numpy"])
    torch.random.set_rng_state(states["cpu"])
    if "cuda" in states and torch.cuda.is_available():
        _restore_cuda(states["cuda"])


def _as_python_state(state: Any) -> tuple[Any, ...]:
    """``random.setstate`` needs tuples; a state that went through JSON or lists is converted back."""
    version, internal, gauss = state
    return (version, tuple(internal), gauss)


def load_rng_state(folder: str | os.PathLike[str], process_index: int = 0, world_size: int = 1) -> bool:
    """Restore this process's RNG state from ``folder``; ``False`` (logged) when the file is absent.

    A missing file is not an error, as in transformers: a run resumed with a different number of processes
    continues with its current generators. A damaged or unsafe file raises :class:`CheckpointError`.
    """
    path = os.path.join(os.fspath(folder), rng_state_file_name(process_index, world_size))
    if not os.path.isfile(path):
        logger.info(
            "No RNG state file `%s` (process %d of %d); the resumed run will not reproduce the RNG stream.",
            path,
            process_index,
            world_size,
        )
        return False
    states = safe_torch_load(path, map_location="cpu", allow_numpy=True)
    if not isinstance(states, dict):
        raise CheckpointError(f"RNG state file `{path}` holds a {type(states).__name__}, not a dict.", path)
    restore_rng_state(states, source=path)
    return True
