"""One job at a time in an ``output_dir``: a lock file taken at the start of ``train()``, before any step.

Two jobs saving into one ``output_dir`` rotate, replace and delete each other's checkpoints (with
transformers, silently; the second one used to die on a ``FileNotFoundError`` naming a staging folder).
``train()`` takes ``output_dir/.hf-lightning.lock`` on the main process of the job (``process_index`` 0:
one lock per job, however many processes torchrun started) and releases it when it returns or raises::

    fd = open(".hf-lightning.lock"); flock(fd, LOCK_EX | LOCK_NB)   # held: OutputDirBusyError naming the holder
    write {"pid", "host", "started", "command"}                     # what the error of a second job shows
    ... train ...
    unlink(".hf-lightning.lock"); close(fd)

The kernel releases an ``flock`` when its process dies, SIGKILL included, so a dead job never blocks the next
one; the file it leaves only names it. Forked children (data loader workers) close their copy of the
descriptor, so they do not hold the lock after their parent died. Where the file system has no ``flock``
(some network file systems), the recorded process is checked instead: alive on this host, the folder is
busy; dead, the lock is taken over.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from typing import Any

from hf_lightning.checkpoint.durability import durability_deferred, wait_for_durability
from hf_lightning.checkpoint.leftovers import LOCK_NAME, remove_leftovers
from hf_lightning.utils.logging import get_logger

try:  # POSIX
    import fcntl
except ImportError:  # pragma: no cover - Windows: the recorded process is checked instead
    fcntl = None  # type: ignore[assignment]

__all__ = ["LOCK_NAME", "OutputDirBusyError", "OutputDirLock", "claim_output_dir"]

logger = get_logger(__name__)
_HELD: dict[str, list[Any]] = {}
"""realpath -> [lock, depth]: this process's locks (a nested train() into the same folder re-enters)."""


class OutputDirBusyError(RuntimeError):
    """Another process trains into the same ``output_dir``; ``holder`` is what its lock file says."""

    def __init__(self, message: str, holder: dict[str, Any]) -> None:
        super().__init__(message)
        self.holder = holder


def _alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _read(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _busy(folder: str, holder: dict[str, Any]) -> OutputDirBusyError:
    who = f"process {holder.get('pid', '?')} on {holder.get('host', '?')}"
    since = f", training since {holder['started']}" if holder.get("started") else ""
    command = f" (`{holder['command']}`)" if holder.get("command") else ""
    return OutputDirBusyError(
        f"Another process writes into output_dir `{folder}`: {who}{since}{command} holds "
        f"`{os.path.join(folder, LOCK_NAME)}`. Two jobs in one output_dir rotate and replace each other's "
        "checkpoints; wait for that job to end, or give this one another `output_dir`.",
        holder,
    )


class OutputDirLock:
    """The lock file of one ``output_dir`` (see the module docstring)."""

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.folder = os.fspath(folder)
        self.path = os.path.join(self.folder, LOCK_NAME)
        self.fd: int | None = None
        self.created = False  # whether acquire() made the folder (release() removes it if left empty)

    def acquire(self) -> None:
        """Take the lock or raise :class:`OutputDirBusyError` naming the process that holds it."""
        self.created = not os.path.isdir(self.folder)
        os.makedirs(self.folder, exist_ok=True)
        while self.fd is None:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                locked = _flock(fd)
            except BaseException:
                os.close(fd)
                raise
            if locked is False:
                os.close(fd)
                raise _busy(self.folder, _read(self.path))
            if locked is None:  # no flock here: judge by the recorded process
                holder = _read(self.path)
                mine = holder.get("pid") == os.getpid() and holder.get("host") == socket.gethostname()
                if (
                    holder
                    and not mine
                    and _alive(holder.get("pid"))
                    and holder.get("host") == socket.gethostname()
                ):
                    os.close(fd)
                    raise _busy(self.folder, holder)
            if _same_file(fd, self.path):
                self.fd = fd
            else:  # its previous holder removed the file between our open and our lock: take the new one
                os.close(fd)
        self._record()

    def _record(self) -> None:
        info = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": time.strftime("%Y-%m-%d %H:%M:%S"),
            "command": " ".join(sys.argv)[:300],
        }
        fd = self.fd if self.fd is not None else -1
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(info) + "\n").encode("utf-8"), 0)

    def release(self) -> None:
        """Remove the lock file and let it go (nothing when not held); a folder acquire() made and the run left
        empty (a search trial that saved nothing) goes too, as transformers never makes it."""
        if self.fd is None:
            return
        with contextlib.suppress(OSError):
            if _same_file(self.fd, self.path):
                os.unlink(self.path)
        os.close(self.fd)
        self.fd = None
        if self.created:
            with contextlib.suppress(OSError):  # not empty: kept
                os.rmdir(self.folder)


def _flock(fd: int) -> bool | None:
    """True when locked, False when another process holds it, None when the file system has no flock."""
    if fcntl is None:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError as exc:
        if exc.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
            return None
        raise
    return True


def _same_file(fd: int, path: str) -> bool:
    try:
        on_disk = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (held.st_dev, held.st_ino) == (on_disk.st_dev, on_disk.st_ino)


def _close_in_child() -> None:
    """After a fork: the child's copies of the held descriptors are closed (the parent keeps its locks)."""
    for lock, _ in _HELD.values():
        if lock.fd is not None:
            with contextlib.suppress(OSError):
                os.close(lock.fd)
            lock.fd = None
    _HELD.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_close_in_child)


@contextlib.contextmanager
def claim_output_dir(folder: str | os.PathLike[str], *, lock: bool, clean: bool) -> Iterator[None]:
    """For one ``train()``: hold the folder's lock (``lock``: the job's main process), then remove what
    interrupted saves left (``clean``: the process writing the checkpoints); release the lock at the end."""
    durability_deferred()  # a bad HF_LIGHTNING_DEFERRED_DURABILITY is refused before the first step, not at a save
    key = os.path.realpath(os.fspath(folder))
    held = _HELD.get(key) if lock else None
    if held is not None:
        held[1] += 1
    elif lock:
        new = OutputDirLock(folder)
        new.acquire()
        _HELD[key] = held = [new, 1]
    try:
        if clean:
            wait_for_durability()  # a train() that raised may have left its last flush running
            remove_leftovers(folder)
        yield
    finally:
        if held is not None:
            held[1] -= 1
            if held[1] == 0:
                _HELD.pop(key, None)
                held[0].release()
