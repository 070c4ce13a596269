"""Deferred durability: a synchronous save returns once its checkpoint is published; its flush to stable
storage, and the deletions rotation asked for, complete behind it.

A save writes, hashes and renames as before (:mod:`hf_lightning.checkpoint.store`); what it no longer waits
for is the disk::

    training thread                                      durability threads (in publication order)
    ---------------                                      ---------------------------------------------
    write + hash the files into .tmp-checkpoint-N        (the writebacks sealing.py starts every
                                                           32 MiB run on; the last ones are not waited for)
    wait for the flush of the checkpoint before the      (checkpoint-(N-1)'s flush may still run)
      previous one, and for any flush that has ended
      (an error raised here, the staging removed)
    manifest, drop the sentinel,
      rename .tmp-checkpoint-N -> checkpoint-N           once checkpoint-(N-1)'s flush and N's writebacks
    rotation: checkpoint-K -> .rotated-checkpoint-K-pid    have ended: fsync every file of checkpoint-N,
      (hidden: no `checkpoint-*` glob matches it)          its folders and output_dir, then delete the
    training goes on                                       .rotated-* folders set aside since N
    end of train() / resume / load-best / a checkpoint pushed: wait for all (the first error raised)

A folder whose flush is pending is never renamed (a flush walks it by name): rotation, and a step saved
again, wait for that flush first (:func:`wait_for_flush_of`). The disk is thus at most one checkpoint behind
the one being published: a save waits for the disk only when saves come faster than the disk stores them,
as transformers' saves do once the kernel's dirty-page limit is reached.

Why this keeps the guarantee of a fully synchronous save:

- a process killed at any moment: the page cache holds every byte written, so ``checkpoint-N`` is complete
  from the rename on; before it, the previous checkpoint is the newest. A ``.rotated-*`` folder left behind
  is put back under its name when the next ``train()`` takes the lock (``leftovers.remove_leftovers``), and
  the next save's rotation deletes it again.
- a power loss before the flush ends may damage ``checkpoint-N``: its manifest (sizes and checksums) makes
  the resume search skip it (and ``checkpoint-(N-1)`` too, if its flush was still running), and the folders
  rotation set aside are still on disk, because a folder set aside is only deleted once the newest
  checkpoint (and so every earlier one) is durable; the search considers them too
  (``folders.find_resumable_checkpoint``).
- a failed flush (``ENOSPC``, ``EIO``): the new folder is deleted (its pages may be lost), the set-aside
  folders get their names back, and the error is raised at the next wait, reported as a failed save is.

On by default (docs/divergences.md). ``HF_LIGHTNING_DEFERRED_DURABILITY=0`` makes a save return only once its
checkpoint is on stable storage, so that a machine that loses power right after a save still has it.
"""

from __future__ import annotations

import os
import re
import shutil
import threading
from collections.abc import Sequence
from concurrent.futures import Future

from hf_lightning.checkpoint.io import disk_full_error, fsync_dir, fsync_tree
from hf_lightning.utils.logging import get_logger

__all__ = [
    "FULL_DISK_ADVICE",
    "ROTATED_NAME",
    "ROTATED_PREFIX",
    "defer_durability",
    "durability_deferred",
    "rotated_path",
    "set_aside",
    "set_aside_renamed",
    "wait_for_durability",
    "wait_for_flush_of",
]

logger = get_logger(__name__)

ROTATED_PREFIX = ".rotated-"
"""A folder rotation (or a step saved again) deletes, renamed while the new checkpoint is not durable yet."""
ROTATED_NAME = re.compile(rf"^{re.escape(ROTATED_PREFIX)}(checkpoint-(\d+))-\d+$")
"""The name of such a folder: group 1 its original name, group 2 its step."""


def rotated_path(path: str) -> str:
    """Where :func:`set_aside` hides ``path`` (``.rotated-checkpoint-N-<pid>`` beside it)."""
    parent, name = os.path.split(os.path.normpath(path))
    return os.path.join(parent, f"{ROTATED_PREFIX}{name}-{os.getpid()}")


_ENV = "HF_LIGHTNING_DEFERRED_DURABILITY"
FULL_DISK_ADVICE = (  # what a save that fails for a full disk tells, here and in checkpoint.store
    "Nothing of this save is left on disk and the checkpoints written before are intact: free some space "
    "(or lower `save_total_limit`), then resume with `train(resume_from_checkpoint=True)`."
)


_ON, _OFF = ("", "1", "true", "yes", "on"), ("0", "false", "no", "off")


def durability_deferred() -> bool:
    """Whether a synchronous save leaves its flush to the background: yes unless
    ``HF_LIGHTNING_DEFERRED_DURABILITY=0``; a value that is neither on nor off raises ``ValueError``."""
    value = os.environ.get(_ENV, "").strip().lower()
    if value in _ON:
        return True
    if value in _OFF:
        return False
    raise ValueError(
        f"{_ENV}={os.environ[_ENV]!r} is not understood: use 0 (false, no, off) for a save that returns only "
        "once its checkpoint is on stable storage, or 1 (true, yes, on; the default when unset) to flush "
        "it behind the save."
    )


class _Pending:
    """The flush of one published checkpoint, and the folders waiting for it to be deleted.

    Flushes run in publication order: each one's thread first waits for the one before it, so a checkpoint
    is durable only once every earlier one has been flushed (or has failed). A folder whose flush is pending
    is never renamed: rotation and a step saved again wait for it first (:func:`wait_for_flush_of`).
    """

    def __init__(self, folder: str, before: _Pending | None, writebacks: Sequence[Future[None]]) -> None:
        self.folder = folder
        self.before = before
        self.writebacks = list(writebacks)  # the save's own writebacks still running: flushed after them
        self.lock = threading.Lock()
        self.aside: list[tuple[str, str]] = []  # (hidden path, original path)
        self.durable = False
        self.undone = False
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="hf-lightning-durability", daemon=False)

    def _run(self) -> None:
        if self.before is not None:
            self.before.thread.join()
            self.before = None  # a finished job is not kept alive by the next one
        try:
            for writeback in self.writebacks:
                writeback.result()  # a writeback's error is reported to it alone (Linux): it fails the flush
            self.writebacks.clear()
            _flush_tree(self.folder)
            fsync_dir(os.path.dirname(self.folder) or ".")
        except BaseException as exc:  # noqa: BLE001 - raised in the thread that waits
            logger.error("Flushing the checkpoint %s to disk failed: %s", self.folder, exc)
            self.error = exc
            return
        with self.lock:
            self.durable, doomed = True, list(self.aside)
            self.aside.clear()
        for hidden, _ in doomed:
            shutil.rmtree(hidden, ignore_errors=True)

    def undo(self) -> None:
        """After a failed flush: delete the new folder, give the set-aside folders their names back."""
        from hf_lightning.checkpoint.folders import remove_folder

        with self.lock:
            self.undone, restored = True, list(self.aside)
            self.aside.clear()
        remove_folder(self.folder)
        for hidden, original in restored:
            if not os.path.lexists(original):
                os.replace(hidden, original)
        fsync_dir(os.path.dirname(self.folder) or ".")


def _flush_tree(folder: str) -> None:
    """``io.fsync_tree``, except that a file deleted meanwhile has nothing left to flush."""
    fsync_tree(folder, missing_ok=True)


_pending: list[_Pending] = []  # published, not yet waited for; oldest first
_newest: _Pending | None = None  # the last checkpoint published: set-aside folders wait for it
_guard = threading.Lock()


def defer_durability(folder: str, writebacks: Sequence[Future[None]] = ()) -> None:
    """Flush the just published ``folder`` (files, folders, its parent) in the background, after the
    flushes already pending and the save's ``writebacks`` (``FolderSealer.take_writebacks``)."""
    global _newest
    with _guard:
        job = _Pending(folder, _pending[-1] if _pending else None, writebacks)
        _pending.append(job)
        _newest = job
        job.thread.start()  # under the guard: a job in the list has started


def set_aside(path: str) -> bool:
    """Hide ``path`` (a folder to delete) until the newest checkpoint's flush ended, then delete it behind.

    A flush pending for ``path`` itself is waited for first (its error raised). Returns False when the
    newest checkpoint is durable already: the caller deletes ``path`` itself.
    """
    wait_for_flush_of(path)
    job = _newest
    if job is None or job.durable:
        return False
    hidden = rotated_path(path)
    os.replace(path, hidden)
    return set_aside_renamed(hidden, path)


def set_aside_renamed(hidden: str, original: str) -> bool:
    """As :func:`set_aside` for a folder already renamed from ``original`` to ``hidden``."""
    job = _newest
    if job is None:
        shutil.rmtree(hidden, ignore_errors=True)
        return False
    with job.lock:
        if not job.durable and not job.undone:
            job.aside.append((hidden, original))
            return True
        keep = job.undone and not os.path.lexists(original)  # the newest is gone: nothing newer is durable
    if keep:
        os.replace(hidden, original)
    else:
        shutil.rmtree(hidden, ignore_errors=True)  # the flush ended meanwhile
    return True


def wait_for_flush_of(path: str) -> None:
    """Before the published folder ``path`` is renamed: wait for its flush (and the earlier ones), raising
    the first error, so that a flush never walks a folder that has moved."""
    target = os.path.normpath(path)
    with _guard:
        found = [i for i, job in enumerate(_pending) if os.path.normpath(job.folder) == target]
    if found:
        _collect(found[-1] + 1)


def wait_for_durability(*, behind: int = 0) -> None:
    """Wait for the pending flushes, raise the first one's error (a full disk as :class:`DiskFullError`)
    after undoing every failed one.

    ``behind=1`` (a save about to publish) leaves the newest flush running unless it has already ended:
    the disk may then be one checkpoint behind the one published next, never two.
    """
    with _guard:
        count = len(_pending) if behind <= 0 else max(len(_pending) - behind, 0)
    _collect(count)


def _collect(count: int) -> None:
    """Join the ``count`` oldest pending flushes (and those after them that have ended), undo the failed
    ones, raise the first error."""
    with _guard:
        while count < len(_pending) and not _pending[count].thread.is_alive():
            count += 1  # an ended flush is collected now: its error is not left for later
        jobs = _pending[:count]
        del _pending[:count]
    first: tuple[BaseException, BaseException] | None = None  # (what is raised, its cause)
    for job in jobs:
        try:
            job.thread.join()
            if job.error is None:
                continue
            # a full disk is measured before the folder is deleted
            full = disk_full_error(job.error, job.folder, "checkpoint", FULL_DISK_ADVICE)
            job.undo()
            if full is not None:
                full.reported_whole = True  # type: ignore[attr-defined]  # a later save's report keeps these
            found = (full if full is not None else job.error, job.error)
        except BaseException as exc:  # noqa: BLE001 - an undo that failed: the other jobs are still handled
            found = (exc, exc)
        first = first or found
    if first is None:
        return
    raised, cause = first
    if raised is cause:
        raise raised
    raise raised from cause
