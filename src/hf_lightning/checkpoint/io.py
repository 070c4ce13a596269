"""Safe, durable file I/O for the checkpoint folder format.

Everything a checkpoint reads goes through :func:`safe_torch_load` or :func:`load_safetensors`, which
never unpickle arbitrary objects (``torch.load(weights_only=True)``) and turn every failure into a
:class:`CheckpointError` that names the file. Everything it writes can be flushed to disk with
:func:`fsync_tree`, and single files can be replaced atomically with :func:`atomic_torch_save`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import errno
import json
import os
import pickle
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import safetensors.torch
import torch

__all__ = [
    "TRAINING_ARGS_JSON_NAME",
    "TRAINING_ARGS_NAME",
    "CheckpointError",
    "CheckpointFileNotFoundError",
    "DiskFullError",
    "args_json_text",
    "atomic_torch_save",
    "atomic_write_bytes",
    "disk_full_error",
    "disk_full_reported",
    "fsync_dir",
    "fsync_tree",
    "load_safetensors",
    "numpy_safe_globals",
    "plain_args_dict",
    "load_training_args",
    "safe_torch_load",
    "torch_save",
    "write_training_args",
]

_REFUSED_MARKER = "Weights only load failed"
TRAINING_ARGS_NAME = "training_args.bin"
TRAINING_ARGS_JSON_NAME = "training_args.json"


class CheckpointError(ValueError):
    """A checkpoint file is missing, truncated, corrupt, or holds objects we refuse to unpickle.

    ``path`` is the offending file (or folder).
    """

    def __init__(self, message: str, path: str | os.PathLike[str] | None = None) -> None:
        super().__init__(message)
        self.path = None if path is None else os.fspath(path)


class CheckpointFileNotFoundError(CheckpointError, FileNotFoundError):
    """A folder with model weights but without ``trainer_state.json``: transformers' Trainer loads the weights
    and then fails opening that file with a ``FileNotFoundError``, so this error is one too."""


class DiskFullError(OSError):
    """Writing ``folder`` failed because its disk (or the user's quota) is full, whichever layer said so:
    the OS (``ENOSPC``), safetensors ("No space left on device") or torch's zip writer ("unexpected pos").

    ``errno`` is ``ENOSPC``; ``folder`` is the checkpoint (or model) folder being written.
    """

    def __init__(self, message: str, folder: str) -> None:
        super().__init__(errno.ENOSPC, message)
        self.folder = folder


_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
_FULL_WORDS = ("No space left on device", "os error 28", "Disk quota exceeded", "os error 122")
# torch's zip writer reports a short write without errno ("[enforce fail ...] unexpected pos 3456 vs 3348")
_SHORT_WRITES = ("unexpected pos", "PytorchStreamWriter failed writing")
_NEARLY_FULL = 1 << 20


def _free_bytes(folder: str) -> int | None:
    path = folder
    while path and not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    try:
        stat = os.statvfs(path or ".")
    except (OSError, AttributeError):  # Windows has no statvfs
        return None
    return min(stat.f_bfree, stat.f_bavail) * stat.f_frsize


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def disk_full_error(exc: BaseException, folder: str, what: str, advice: str) -> DiskFullError | None:
    """A :class:`DiskFullError` for ``exc`` raised while writing ``folder`` when the disk is full, else None.

    Call it before anything is deleted: a short write of torch's counts as a full disk when less than 1 MiB
    is left on the file system of ``folder``.
    """
    full = False
    for error in _chain(exc):
        text = str(error)
        if isinstance(error, OSError) and error.errno in _FULL_ERRNOS or any(w in text for w in _FULL_WORDS):
            full = True
        elif any(w in text for w in _SHORT_WRITES):
            free = _free_bytes(folder)
            full = full or (free is not None and free < _NEARLY_FULL)
    if not full:
        return None
    free = _free_bytes(folder)
    left = f" ({free} bytes free there)" if free is not None else ""
    if isinstance(exc, DiskFullError) and exc.__cause__ is not None:  # a nested write reported it first
        exc = exc.__cause__
    detail = str(exc).splitlines()[0] if str(exc) else "no details"
    return DiskFullError(
        f"The disk is full: writing {what} `{folder}` failed{left} ({type(exc).__name__}: {detail}). {advice}",
        folder,
    )


@contextlib.contextmanager
def disk_full_reported(
    folder: str, what: str, advice: str, discard: Callable[[], None] | None = None
) -> Iterator[None]:
    """Turn a failure of the writes inside into :class:`DiskFullError` when the disk is full; on any failure
    call ``discard()`` (after the free space was measured), then raise."""
    try:
        yield
    except Exception as exc:
        # another folder's full disk (the previous checkpoint's flush, checkpoint/durability.py) keeps its words
        foreign = getattr(exc, "reported_whole", False)
        full = None if foreign else disk_full_error(exc, folder, what, advice)
        if discard is not None:
            discard()
        if full is not None:
            raise full from exc
        raise


@contextlib.contextmanager
def numpy_safe_globals() -> Iterator[None]:
    """Allow the few numpy types an RNG state file holds (``np.random.get_state()``) under ``weights_only``."""
    core = getattr(np, "_core", None) or np.core
    allowed = [core.multiarray._reconstruct, np.ndarray, np.dtype, type(np.dtype(np.uint32))]
    with torch.serialization.safe_globals(allowed):
        yield


def safe_torch_load(path: str, map_location: Any = "cpu", *, allow_numpy: bool = False) -> Any:
    """``torch.load(path, weights_only=True)``; any failure becomes a :class:`CheckpointError` naming ``path``."""
    if not os.path.isfile(path):
        raise CheckpointError(f"Checkpoint file `{path}` does not exist.", path)
    context = numpy_safe_globals() if allow_numpy else contextlib.nullcontext()
    try:
        with context:
            return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        if _REFUSED_MARKER in str(exc):
            raise CheckpointError(
                f"Refused to load `{path}` for safety: it holds Python objects other than tensors and plain "
                "containers, and unpickling them could run arbitrary code. Only files saved from state dicts "
                f"are accepted. torch said: {str(exc).splitlines()[0]}",
                path,
            ) from exc
        raise CheckpointError(f"Checkpoint file `{path}` is corrupt: {exc}", path) from exc
    except Exception as exc:  # torch raises RuntimeError, EOFError, OSError, ... for damaged files
        raise CheckpointError(
            f"Checkpoint file `{path}` is truncated or corrupt and cannot be read "
            f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else 'no details'}).",
            path,
        ) from exc


def load_safetensors(path: str, device: str = "cpu") -> dict[str, torch.Tensor]:
    """Read a ``.safetensors`` file; any failure becomes a :class:`CheckpointError` naming ``path``."""
    if not os.path.isfile(path):
        raise CheckpointError(f"Checkpoint file `{path}` does not exist.", path)
    try:
        return safetensors.torch.load_file(path, device=device)
    except Exception as exc:
        raise CheckpointError(
            f"Checkpoint file `{path}` is truncated or corrupt and cannot be read ({exc}).", path
        ) from exc


def torch_save(obj: Any, path: str) -> None:
    """``torch.save`` into ``path`` and flush it to disk before returning."""
    with open(path, "wb") as handle:
        torch.save(obj, handle)
        handle.flush()
        os.fsync(handle.fileno())


def atomic_write_bytes(path: str, write: Callable[[Any], None], *, durable: bool = True) -> None:
    """Write ``path`` through ``write(handle)`` into a sibling temporary file, fsync it, then rename it over.

    ``durable=False`` leaves out the two fsyncs, for a file whose folder is flushed as a whole later (a
    checkpoint's staging folder: ``checkpoint/store.py``); the rename still keeps readers from a partial file.
    """
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as handle:
            write(handle)
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    if durable:
        fsync_dir(os.path.dirname(path) or ".")


def atomic_torch_save(obj: Any, path: str, *, durable: bool = True) -> None:
    """``torch.save(obj)`` to ``path`` so that readers see either the old file or the whole new one."""
    atomic_write_bytes(path, lambda handle: torch.save(obj, handle), durable=durable)


def fsync_dir(folder: str) -> None:
    """Flush a directory entry (renames and new files in it) to stable storage; best effort."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # e.g. Windows cannot open a directory; rename durability is then best effort
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def fsync_tree(folder: str, *, missing_ok: bool = False) -> None:
    """Flush every file below ``folder``, then every directory, to stable storage; with ``missing_ok`` a file
    deleted meanwhile has nothing left to flush."""
    for root, dirs, files in os.walk(folder, topdown=False):
        for name in files:
            try:
                fd = os.open(os.path.join(root, name), os.O_RDONLY)
            except FileNotFoundError:
                if not missing_ok:
                    raise
                continue
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        for name in dirs:
            fsync_dir(os.path.join(root, name))
    fsync_dir(folder)


def _plain(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return _plain(value.value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_plain(item) for item in value]
    return str(value)


def plain_args_dict(args: Any) -> dict[str, Any]:
    """The training arguments as a dict of plain values (loadable with ``weights_only=True`` and JSON-safe).

    Uses ``args.to_dict()`` when present (TrainingArguments hides tokens there), else the dataclass fields,
    else ``vars(args)``; enums become their values and unknown objects their ``str``.
    """
    if isinstance(args, Mapping):
        raw = dict(args)
    elif callable(getattr(args, "to_dict", None)):
        raw = args.to_dict()
    elif dataclasses.is_dataclass(args) and not isinstance(args, type):
        raw = {field.name: getattr(args, field.name) for field in dataclasses.fields(args)}
    else:
        raw = dict(vars(args))
    return _plain(raw)


def args_json_text(args: Any) -> str:
    """The JSON text written to ``training_args.json`` (``args.to_json_string()`` when it exists)."""
    if callable(getattr(args, "to_json_string", None)):
        from hf_lightning.plan.arguments import json_text_of

        return json_text_of(args)
    return json.dumps(plain_args_dict(args), indent=2, sort_keys=True) + "\n"


def write_training_args(folder: str, args: Any) -> None:
    """Write ``training_args.bin`` (a plain dict, ``weights_only``-loadable) and ``training_args.json``."""
    torch_save(plain_args_dict(args), os.path.join(folder, TRAINING_ARGS_NAME))
    with open(os.path.join(folder, TRAINING_ARGS_JSON_NAME), "w", encoding="utf-8") as handle:
        handle.write(args_json_text(args))


def load_training_args(folder: str | os.PathLike[str]) -> dict[str, Any]:
    """The saved arguments as a dict: ``training_args.json``, else ``training_args.bin`` without unpickling."""
    folder = os.fspath(folder)
    json_path = os.path.join(folder, TRAINING_ARGS_JSON_NAME)
    if os.path.isfile(json_path):
        try:
            with open(json_path, encoding="utf-8") as handle:
                return json.load(handle)
        except (OSError, ValueError) as exc:
            raise CheckpointError(f"`{json_path}` is truncated or corrupt ({exc}).", json_path) from exc
    bin_path = os.path.join(folder, TRAINING_ARGS_NAME)
    loaded = safe_torch_load(bin_path)
    if not isinstance(loaded, dict):
        raise CheckpointError(
            f"`{bin_path}` holds a {type(loaded).__name__}, not a dict of arguments.", bin_path
        )
    return loaded
