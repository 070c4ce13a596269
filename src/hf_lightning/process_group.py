"""The default ``torch.distributed`` process group of a launched job (torchrun's ``WORLD_SIZE`` > 1), opened
when someone needs it before a fit (``main_process_first``, a standalone evaluation, the accelerator's
collectives) and closed when the interpreter ends. Lightning's strategy reuses a group opened here."""

from __future__ import annotations

import atexit
import os
import sys
import time
from datetime import timedelta
from typing import Any

import torch.distributed as dist

__all__ = ["close_process_group_at_exit", "ensure_process_group", "note_failed_run"]

_closing_registered = False
_failed_run = False  # a fit of this process raised: its peers may be left waiting in a collective


def ensure_process_group(
    backend: str | None = None, timeout_s: int | None = None, device_type: str = "cpu"
) -> bool:
    """Whether a default process group with several ranks exists, initialising it from the launcher's
    environment (``WORLD_SIZE`` > 1, ``MASTER_ADDR``, ...) when nobody has (nccl for CUDA devices,
    gloo otherwise, unless ``backend`` says)."""
    if not dist.is_available():
        return False
    if dist.is_initialized():
        return dist.get_world_size() > 1
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return False
    backend = backend or ("nccl" if device_type == "cuda" else "gloo")
    kwargs: dict[str, Any] = {"timeout": timedelta(seconds=timeout_s)} if timeout_s else {}
    dist.init_process_group(backend=backend, **kwargs)
    close_process_group_at_exit()
    return dist.get_world_size() > 1


def close_process_group_at_exit() -> None:
    """Close the default process group when the interpreter ends, if one is open then.

    A gloo group still alive at interpreter shutdown can abort a process that finished all its work
    ("terminate called without an active exception", exit code 134); Lightning opens the group for a
    fit and leaves it open."""
    global _closing_registered
    if not _closing_registered and dist.is_available() and dist.is_initialized():
        atexit.register(_destroy_process_group)
        _closing_registered = True


def note_failed_run() -> None:
    """Record that a fit of this process raised (caught or not): at exit it does not wait for the others."""
    global _failed_run
    _failed_run = True


def _destroy_process_group() -> None:
    """Wait for the other processes (when this one ends without an uncaught exception), let gloo's
    worker threads drop the collectives they still hold while the interpreter can still run their clean-up (a
    gloo thread freeing a finished all-gather during shutdown aborts the process), then close the group."""
    if not (dist.is_available() and dist.is_initialized()):
        return
    # an uncaught exception (or a failed fit, even one the script caught) ends this process: the others may be
    # waiting in a collective it will never join (a barrier would wait with them); closing the group makes
    # theirs fail, as when transformers' run fails
    uncaught = getattr(sys, "last_value", None) is not None or getattr(sys, "last_exc", None) is not None
    failed = uncaught or _failed_run
    if dist.get_backend() == "gloo" and dist.get_world_size() > 1 and not failed:
        try:
            dist.monitored_barrier(timeout=timedelta(seconds=5))
        except Exception:  # a process gone or busy: close without it
            pass
        time.sleep(0.2)  # the GIL released: gloo's threads finish with their work items
    dist.destroy_process_group()
