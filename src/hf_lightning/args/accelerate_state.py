"""accelerate's process-wide state, set up as transformers sets it up, for the code that reads it directly.

transformers' ``TrainingArguments`` set up accelerate's ``PartialState`` (the processes and the device)
and its ``Trainer`` builds an ``Accelerator``, which completes it into an ``AcceleratorState`` (with the
mixed precision). Code written for transformers reads that state without going through the Trainer:
``accelerate.utils.set_seed(seed, device_specific=True)`` (TRL's GRPO, RLOO and distillation trainers),
``AcceleratorState().deepspeed_plugin`` (TRL's reference-model sync), ``accelerate.logging.get_logger``
(every TRL trainer logs through it). hf_lightning trains on Lightning and reads none of it, but sets it
up at the same two moments so that code finds it:

- :func:`set_up_partial_state` when the arguments are built, if accelerate is imported already (building
  the arguments imports no torch): accelerate's state is reset (unless
  ``accelerator_config={"use_configured_state": True}``) and a ``PartialState`` made for the arguments'
  device. Under torchrun the default process group is opened first (``process_group.py``), as
  transformers' arguments open it; Lightning's strategy reuses it.
- :func:`complete_accelerator_state` when the Trainer is built: an ``AcceleratorState`` with the
  arguments' mixed precision (over a ``PartialState`` made then if none is there), unless one with the
  same device kind and precision is there already.

Where accelerate's own reading of the launch could disagree with Lightning's (MPI variables, ``srun``
without torchrun), or the variables describe no complete torchrun launch (``WORLD_SIZE`` without
``RANK``, ``MASTER_ADDR`` and ``MASTER_PORT``), nothing is set up: accelerate's state is left as it was
rather than opening a process group of its own.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

__all__ = ["complete_accelerator_state", "set_up_partial_state"]

# a multi-process launch that does not give torchrun's variables (MPI, srun): accelerate would read it
# otherwise than Lightning does
_OTHER_LAUNCHERS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE", "SLURM_NTASKS")
_TORCHRUN = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def _size(env: Mapping[str, str], name: str) -> int:
    try:
        return int(env.get(name) or 1)
    except ValueError:
        return 1


def dist_initialized() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def _launch_ready(
    backend: str | None, timeout_s: int | None, device_type: str, env: Mapping[str, str]
) -> bool:
    """Whether accelerate's state may be set up: one process, or torchrun's launch with the default
    process group open (opened here when it is not). A launch accelerate would read otherwise than
    Lightning, or variables that describe no complete launch (a test's ``WORLD_SIZE`` alone), leave it."""
    if dist_initialized():
        return True
    if any(_size(env, name) > 1 for name in _OTHER_LAUNCHERS):
        return False
    launched = "WORLD_SIZE" in env or env.get("LOCAL_RANK", "-1") != "-1"  # what accelerate reads as torchrun
    if not launched:
        return True
    if not all(env.get(name) for name in _TORCHRUN):
        return False
    from hf_lightning.process_group import ensure_process_group

    ensure_process_group(backend, timeout_s, device_type)  # accelerate opens a group of one itself
    return True


def set_up_partial_state(args: Any, *, configured: bool, env: Mapping[str, str] | None = None) -> None:
    """accelerate's ``PartialState`` for ``args`` (see the module docstring); ``configured``:
    ``use_configured_state`` was given, so an existing state is kept. Only when accelerate is already
    imported (building the arguments imports no torch; the Trainer completes the state anyway)."""
    if "accelerate" not in sys.modules:
        return
    env = os.environ if env is None else env
    from accelerate.state import AcceleratorState, PartialState

    if configured and PartialState._shared_state:
        return
    if not _launch_ready(args.ddp_backend, args.ddp_timeout, args.device.type, env):
        return
    AcceleratorState._reset_state(reset_partial_state=True)
    _partial_state(args.device.type, args.ddp_backend, args.ddp_timeout)


def _partial_state(device_type: str, backend: str | None, timeout_s: int | None) -> None:
    from accelerate.state import PartialState

    kwargs: dict[str, Any] = {"cpu": device_type == "cpu"}
    if dist_initialized():  # on one process a backend makes accelerate look for a group (transformers fails)
        kwargs["backend"] = backend
    if timeout_s:
        kwargs["timeout"] = timedelta(seconds=int(timeout_s))
    PartialState(**kwargs)


def complete_accelerator_state(settings: Any) -> None:
    """accelerate's ``AcceleratorState`` as the Trainer's ``Accelerator`` would make it: over the
    ``PartialState`` of the arguments, with their mixed precision; ``settings``: the Trainer's
    ``AcceleratorSettings`` (``args/accelerator.py``)."""
    mixed_precision, device_type = settings.mixed_precision, settings.device.type
    backend, timeout_s = settings.distributed.process_group_backend, settings.distributed.timeout_s
    try:
        from accelerate.state import AcceleratorState, PartialState
        from accelerate.utils import TorchDynamoPlugin
    except ImportError:  # accelerate is a dependency; a trimmed environment only loses this courtesy
        return
    if not _launch_ready(backend, timeout_s, device_type, os.environ):
        return
    shared = AcceleratorState._shared_state
    if shared.get("_mixed_precision") is not None:  # an AcceleratorState exists
        device = shared.get("device")
        if shared["_mixed_precision"] == mixed_precision and getattr(device, "type", None) == device_type:
            return
        AcceleratorState._reset_state(reset_partial_state=False)
    if (
        PartialState._shared_state
        and getattr(PartialState._shared_state.get("device"), "type", None) != device_type
    ):
        AcceleratorState._reset_state(reset_partial_state=True)
    if not PartialState._shared_state:
        _partial_state(device_type, backend, timeout_s)
    AcceleratorState(mixed_precision=mixed_precision, cpu=device_type == "cpu", dynamo_plugin=TorchDynamoPlugin(),
                     _from_accelerator=True)  # fmt: skip
