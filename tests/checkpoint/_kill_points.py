"""Kill a training process with SIGKILL at its N-th file operation inside ``output_dir`` (a test helper).

:func:`killed_run` (or ``python -m tests.checkpoint._kill_points OUT KILL_AT WHEN COUNT_FILE``) trains
``tests.checkpoint.test_crash_safety.make_trainer(OUT, save_total_limit=2)`` with every file operation of
the Python layer on a path inside ``OUT`` counted (creating, writing, renaming, deleting a file or folder;
``shutil.rmtree`` and ``os.makedirs`` count once) and kills itself just before (``WHEN=before``) or just
after (``after``) operation number ``KILL_AT``. ``KILL_AT=0`` kills nothing and writes the number of
operations of the whole run to ``COUNT_FILE``.

Only the operations of the main thread and of the thread writing the model's files beside the optimizer's
(``hf-lightning-save-model``, whose operations are the same in every run) are counted: another thread of
the library (deferred durability's flush, which deletes the folders rotation set aside as timing decides)
runs its operations uncounted, so that the run has as many operations in the counting run as in the killed
run. The kill still stops that thread wherever it has got to. ``DEFERRED=1`` (or ``deferred=True``) trains
with ``HF_LIGHTNING_DEFERRED_DURABILITY=1``.
"""

from __future__ import annotations

import builtins
import functools
import os
import shutil
import signal
import sys
import threading
from typing import Any

import safetensors.torch

_state = threading.local()
_count_lock = threading.Lock()
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def _inside(path: Any, root: str) -> bool:
    try:
        path = os.fspath(path)
    except TypeError:
        return False
    if isinstance(path, bytes):
        path = path.decode()
    return os.path.abspath(path).startswith(root + os.sep) or os.path.abspath(path) == root


def _counted_thread() -> bool:
    thread = threading.current_thread()
    return thread is threading.main_thread() or thread.name.startswith("hf-lightning-save-model")


def install(root: str, kill_at: int, when: str) -> list[int]:
    """Wrap the file operations; returns the one-element list counting them."""
    root = os.path.abspath(root)
    count = [0]

    def counted(function: Any, writes: Any = lambda *a, **k: True, path_at: int = 0) -> Any:
        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            skip = (
                getattr(_state, "inside", False)
                or not _counted_thread()
                or len(args) <= path_at
                or not _inside(args[path_at], root)
            )
            if skip or not writes(*args, **kwargs):
                return function(*args, **kwargs)
            with _count_lock:
                count[0] += 1
                number = count[0]
            if number == kill_at and when == "before":
                os.kill(os.getpid(), signal.SIGKILL)
            _state.inside = True
            try:
                result = function(*args, **kwargs)
            finally:
                _state.inside = False
            if number == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            return result

        return wrapper

    def open_writes(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> bool:
        return any(flag in mode for flag in "wax+")

    def os_open_writes(path: Any, flags: int, *args: Any, **kwargs: Any) -> bool:
        return bool(flags & _WRITE_FLAGS)

    builtins.open = counted(builtins.open, open_writes)
    os.open = counted(os.open, os_open_writes)
    for name in ("replace", "rename", "remove", "unlink", "rmdir", "makedirs", "mkdir"):
        setattr(os, name, counted(getattr(os, name)))
    shutil.rmtree = counted(shutil.rmtree)
    safetensors.torch.save_file = counted(safetensors.torch.save_file, path_at=1)
    return count


def run(out: str, kill_at: int, when: str, count_file: str, deferred: bool = False) -> None:
    """Train into ``out`` with the kill point installed (see the module docstring)."""
    import torch

    os.environ["HF_LIGHTNING_DEFERRED_DURABILITY"] = "1" if deferred else "0"

    torch.set_num_threads(1)
    from tests.checkpoint.test_crash_safety import make_trainer

    count = install(out, kill_at, when)
    make_trainer(out, save_total_limit=2).train()
    with open(count_file, "w", encoding="utf-8") as handle:
        handle.write(str(count[0]))


# what a first train() imports (the engine): imported once, in the fork server
_PRELOAD = [
    "tests.checkpoint.test_crash_safety",
    "hf_lightning.adapters.fit",
    "hf_lightning.adapters.accelerator",
    "hf_lightning.adapters.callbacks.loop_driver",
    "hf_lightning.adapters.callbacks.reporting",
    "hf_lightning.adapters.argument_table",
    "hf_lightning.adapters.evaluation",
]


def killed_run(out: str, kill_at: int, when: str, count_file: str, deferred: bool = False) -> int:
    """:func:`run` in a process forked from a server that imported the libraries once; its exit code
    (``-SIGKILL`` when the kill point was reached)."""
    import multiprocessing

    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(_PRELOAD)
    process = context.Process(target=run, args=(out, kill_at, when, count_file, deferred))
    process.start()
    process.join(600)
    if process.exitcode is None:
        process.kill()
        process.join()
    return int(process.exitcode if process.exitcode is not None else -signal.SIGKILL)


if __name__ == "__main__":
    run(*sys.argv[1:2], int(sys.argv[2]), *sys.argv[3:5], deferred=os.environ.get("DEFERRED") == "1")
