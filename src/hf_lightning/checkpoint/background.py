"""Saving checkpoints in the background: the step waits for a copy of the state in host memory only.

A background save splits :func:`hf_lightning.checkpoint.store.save_checkpoint` in two::

    training thread                                     saver thread (one save at a time)
    ---------------                                     ---------------------------------
    wait for the previous save (its error raised here)
    snapshot: weights, optimizer, scheduler and scaler
      states copied to host memory (aliases kept),
      trainer state and arguments frozen
    staging folder + every rank's RNG file [barriers]
    training goes on                                    weights, optimizer.pt, ... written into the
                                                        staging folder, hashed, fsynced; manifest;
                                                        rename to checkpoint-N; rotation
    next save, or the end of train(): wait, raise the saver's error, run what follows a save

The files are those of a synchronous save, byte for byte; a crash (a kill, a power loss) while the saver
writes leaves the staging folder unpublished and the previous checkpoint the newest complete one, as a
crash during a synchronous save does. The snapshot costs one more copy of the checkpoint in host memory,
kept to the end of ``train()``: each save copies the state into the buffers of the one
before (copying 2.2 GB into memory already mapped took 0.39 s on the development machine, into new memory
1.9 s: the new pages are faulted in and zeroed first; docs/performance.md). The first save's buffers are
prepared the same way ahead of it: :meth:`BackgroundSaver.prepare`, called after the first step, faults in
host memory of the state's sizes on a thread of its own, and the first snapshot copies into it.
"""

from __future__ import annotations

import copy
import ctypes
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch

from hf_lightning.utils.logging import get_logger

__all__ = [
    "BackgroundSaver",
    "FrozenArgs",
    "FrozenState",
    "host_copy",
    "save_in_background",
    "snapshot_save_options",
]

logger = get_logger(__name__)


Storages = dict[Any, torch.UntypedStorage]
"""Host copies of storages, by their source's (device, address, bytes)."""


def _shared_storage(tensor: torch.Tensor) -> tuple[Any, torch.UntypedStorage] | None:
    """The key and storage of a tensor whose storage :func:`host_copy` copies once for all its aliases;
    None for a meta, sparse or non-strided tensor (copied on its own, or kept)."""
    if tensor.device.type == "meta" or tensor.is_sparse or tensor.layout != torch.strided:
        return None
    source = tensor.untyped_storage()
    return (source.device, source.data_ptr(), source.nbytes()), source


def _copy_tensor(tensor: torch.Tensor, storages: Storages, spare: Storages) -> torch.Tensor:
    tensor = tensor.detach()
    shared = _shared_storage(tensor)
    if shared is None:
        return tensor.to("cpu", copy=True) if tensor.device.type != "meta" else tensor
    key, source = shared
    copied = storages.get(key)
    if copied is None:
        # the previous snapshot's buffer of this storage: no new pages to fault in
        reused = spare.pop(key, None)
        if reused is not None:
            copied = reused.copy_(source)
        else:
            copied = source.cpu() if source.device.type != "cpu" else source.clone()
        storages[key] = copied
    out = torch.empty(0, dtype=tensor.dtype)
    return out.set_(copied, tensor.storage_offset(), tensor.shape, tensor.stride())


def host_copy(obj: Any, _memo: dict[int, Any] | None = None) -> Any:
    """``obj`` with every tensor copied to CPU memory, in nested dicts, lists and tuples.

    Tensors that share memory share it in the copy as well (tied weights stay tied, views stay views), and
    an object met twice is copied once, so ``torch.save`` and ``save_pretrained`` write from the copy
    exactly what they write from the original.
    """
    memo: dict[int, Any] = {} if _memo is None else _memo
    if id(obj) in memo:
        return memo[id(obj)]
    if isinstance(obj, torch.Tensor):
        copied: Any = _copy_tensor(obj, memo.setdefault(_STORAGES, {}), memo.setdefault(_SPARE, {}))
    elif isinstance(obj, Mapping):
        items = [(key, host_copy(value, memo)) for key, value in obj.items()]
        try:
            copied = type(obj)(items)  # type: ignore[call-arg]  # an OrderedDict stays one
        except TypeError:
            copied = dict(items)
        if hasattr(obj, "_metadata"):  # a module state dict's versions, which torch.save writes
            copied._metadata = copy.deepcopy(obj._metadata)
    elif isinstance(obj, list):
        copied = [host_copy(value, memo) for value in obj]
    elif isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        copied = tuple(host_copy(value, memo) for value in obj)
    else:
        copied = copy.deepcopy(obj, memo)
    memo[id(obj)] = copied
    return copied


_STORAGES = -1  # the memo's entry for the storages copied so far (no object has id -1)
_SPARE = -2  # the memo's entry for host buffers free to be written over (an earlier snapshot's)


def _storage_sizes(obj: Any, found: dict[Any, int], seen: set[int]) -> None:
    """Add to ``found`` the key and size of every storage :func:`host_copy` would copy from ``obj``."""
    if id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        shared = _shared_storage(obj)
        if shared is not None:
            found[shared[0]] = shared[1].nbytes()
    elif isinstance(obj, Mapping):
        for value in obj.values():
            _storage_sizes(value, found, seen)
    elif isinstance(obj, (list, tuple)):
        for value in obj:
            _storage_sizes(value, found, seen)


def _faulted_in(sizes: Mapping[Any, int]) -> Storages:
    """New host storages of the given sizes, every page written once (``memset`` releases the GIL)."""
    made: Storages = {}
    for key, nbytes in sizes.items():
        storage = torch.UntypedStorage(nbytes)
        if nbytes:
            ctypes.memset(storage.data_ptr(), 0, nbytes)
        made[key] = storage
    return made


class FrozenState:
    """A ``state_dict()`` taken now, for an object whose state goes on changing (scheduler, scaler)."""

    def __init__(self, holder: Any) -> None:
        self._state = host_copy(holder.state_dict())

    def state_dict(self) -> Any:
        """The state as it was when this object was made."""
        return self._state


class FrozenArgs:
    """The training arguments as ``to_dict()`` and ``to_json_string()`` gave them when the save began."""

    def __init__(self, args: Any) -> None:
        self._dict = copy.deepcopy(args.to_dict()) if callable(getattr(args, "to_dict", None)) else None
        self._json = None
        if callable(getattr(args, "to_json_string", None)):
            from hf_lightning.plan.arguments import json_text_of

            self._json = json_text_of(args)
        self._args = args if self._dict is None else None

    def to_dict(self) -> dict[str, Any]:
        """``args.to_dict()`` at snapshot time."""
        return self._dict if self._dict is not None else dict(vars(self._args))

    def to_json_string(self) -> str:
        """``args.to_json_string()`` at snapshot time."""
        from hf_lightning.checkpoint.io import args_json_text

        return self._json if self._json is not None else args_json_text(self.to_dict())


def snapshot_save_options(
    options: dict[str, Any], model_state_dict: Any, buffers: Storages | None = None
) -> dict[str, Any]:
    """The keyword arguments of ``save_checkpoint`` with the training state frozen for a background save.

    ``model_state_dict`` is the weights the synchronous save would write (the model's own state dict when
    none was given). The model object itself is kept: it writes its files (``save_pretrained``) from the
    frozen weights. ``buffers``: the host copies of the previous snapshot, which nothing reads any more;
    a storage of the same address and size is copied into its old buffer instead of new memory, and
    ``buffers`` then holds this snapshot's copies.
    """
    storages: Storages = {}
    spare: Storages = buffers if buffers is not None else {}
    frozen = dict(options)
    frozen["model_state_dict"] = host_copy(model_state_dict, {_STORAGES: storages, _SPARE: spare})
    optimizer = options.get("optimizer")
    if optimizer is not None and not options.get("save_only_model"):
        given = options.get("optimizer_state_dict")
        state = given or optimizer.state_dict()
        frozen["optimizer_state_dict"] = host_copy(state, {_STORAGES: storages, _SPARE: spare})
    for name in ("scheduler", "scaler"):
        if options.get(name) is not None:
            frozen[name] = FrozenState(options[name])
    if options.get("state") is not None:
        frozen["state"] = copy.deepcopy(options["state"])
    if options.get("args") is not None:
        frozen["args"] = FrozenArgs(options["args"])
    if buffers is not None:
        buffers.clear()  # what was not reused is freed
        buffers.update(storages)
    return frozen


class BackgroundSaver:
    """Runs one save at a time in a thread of its own; its error is raised in the thread that waits for it.

    ``submit(job, describe, then)`` waits for the save in flight, then starts ``job()``; ``then(result)``
    runs in the training thread once the job succeeded, when :meth:`wait` or :meth:`poll` sees it done.
    """

    def __init__(self) -> None:
        self.buffers: Storages = {}
        """The host copy of the last save's state, written over by the next save (:meth:`release` frees it)."""
        self._thread: threading.Thread | None = None
        self._outcome: tuple[str, Any] | None = None
        self._describe = ""
        self._then: Callable[[Any], None] | None = None
        self._preparing: threading.Thread | None = None
        self._prepared: Storages = {}

    def prepare(self, states: Iterable[Any]) -> None:
        """Fault in, on a thread of its own, host memory for a snapshot of ``states`` (the state dicts a save
        writes), unless this saver holds a copy already: the first snapshot then copies into memory already
        mapped instead of waiting for new pages (at 2.2 GB: seconds on a virtual machine, 0.2-0.4 s mapped;
        docs/performance.md). A storage whose address or size changed by then gets new memory as before."""
        if self.buffers or self._preparing is not None:
            return
        sizes: dict[Any, int] = {}
        seen: set[int] = set()
        for state in states:
            _storage_sizes(state, sizes, seen)

        def run() -> None:
            try:
                self._prepared = _faulted_in(sizes)
            except (MemoryError, RuntimeError) as exc:  # the snapshot allocates as it did without it
                logger.debug("Preparing host memory for the first background save failed: %s", exc)

        self._preparing = threading.Thread(target=run, name="hf-lightning-checkpoint-prepare", daemon=True)
        self._preparing.start()

    def host_buffers(self) -> Storages:
        """The host memory the next snapshot copies into: the last save's copy, or what :meth:`prepare` made
        (waited for here)."""
        if self._preparing is not None:
            self._preparing.join()
            self._preparing = None
            if not self.buffers:
                self.buffers.update(self._prepared)
            self._prepared = {}
        return self.buffers

    @property
    def busy(self) -> bool:
        """Whether a save is in flight (or finished without having been waited for)."""
        return self._thread is not None

    def submit(
        self, job: Callable[[], Any], describe: str, then: Callable[[Any], None] | None = None
    ) -> None:
        """Start ``job`` in the background once the previous save ended (its error is raised first)."""
        self.wait()
        self._describe, self._then, self._outcome = describe, then, None

        def run() -> None:
            try:
                self._outcome = ("ok", job())
            except BaseException as exc:  # noqa: BLE001 - handed to the training thread
                self._outcome = ("error", exc)

        self._thread = threading.Thread(target=run, name="hf-lightning-checkpoint", daemon=False)
        self._thread.start()

    def release(self) -> None:
        """Wait for the save in flight, then free the host copy kept for the next save (or prepared for it)."""
        self.wait()
        self.host_buffers()
        self.buffers.clear()

    def poll(self) -> None:
        """When the save in flight has ended: as :meth:`wait` (raise its error, run its follow-up)."""
        if self._thread is not None and not self._thread.is_alive():
            self.wait()

    def wait(self) -> None:
        """Wait for the save in flight; raise its error (logged with the folder), else run its follow-up."""
        thread = self._thread
        if thread is None:
            return
        thread.join()
        self._thread = None
        status, value = self._outcome or ("error", RuntimeError("the background save ended without a result"))
        if status == "error":
            logger.error("The background save of %s failed: %s", self._describe, value)
            raise value
        if self._then is not None:
            self._then(value)


def save_in_background(
    saver: BackgroundSaver,
    output_dir: str | os.PathLike[str],
    global_step: int,
    options: dict[str, Any],
    *,
    rotate: Callable[[], Any] | None = None,
    then: Callable[[float], None] | None = None,
) -> str:
    """``save_checkpoint(output_dir, global_step, **options)`` with the main process's writing in ``saver``.

    Call it on every process, with the options of a synchronous save. On the main process the state is
    snapshot here; the files, their publication and then ``rotate()`` run in the background, and
    ``then(seconds the background part took)`` runs in the training thread once they succeeded.
    """
    from hf_lightning.checkpoint.store import checkpoint_path, save_checkpoint
    from hf_lightning.checkpoint.weights import unwrap_model

    if options.get("is_main_process", True):
        saver.wait()  # the previous save has written its files: its host copy can take this state
        weights = options.get("sharded_writer") is None or options.get("model_state_dict") is not None
        given = options.get("model_state_dict")
        state_dict = (
            (given if given is not None else unwrap_model(options["model"]).state_dict()) if weights else None
        )
        options = snapshot_save_options(options, state_dict, saver.host_buffers())
    folder = checkpoint_path(output_dir, global_step)

    def defer(job: Callable[[], str]) -> None:
        def run() -> float:
            started = time.perf_counter()
            job()
            if rotate is not None:
                rotate()
            return time.perf_counter() - started

        saver.submit(run, describe=folder, then=then)

    return save_checkpoint(output_dir, global_step, **options, defer=defer)
