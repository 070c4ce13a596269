"""Deferred durability: a synchronous save returns once its checkpoint is published; its flush to stable
storage, and the deletions rotation asked for, complete behind it.

A save writes, hashes and renames as before (:mod:`hf_lightning.checkpoint.store`); what it no longer waits
for is the disk::

    training thread                                      durability thread (one checkpoint at a time)
    ---------------                                      ---------------------------------------------
    write + hash the files into .tmp-checkpoint-N
    wait for the previous checkpoint's flush
      (its error raised here, the staging removed)
    manifest, drop the sentinel,
      rename .tmp-checkpoint-N -> checkpoint-N           fsync every file of checkpoint-N, its folders
    rotation: checkpoint-K -> .rotated-checkpoint-K-pid    and output_dir
      (hidden: no `checkpoint-*` glob matches it)        then delete the .rotated-* folders
    training goes on
    next save / end of train() / resume / load-best / a checkpoint pushed: wait (its error raised)

Why this keeps the guarantee of a fully synchronous save:

- a process killed at any moment: the page cache holds every byte written, so ``checkpoint-N`` is complete
  from the rename on; before it, the previous checkpoint is the newest. A ``.rotated-*`` folder left behind
  is put back under its name when the next ``train()`` takes the lock (``leftovers.remove_leftovers``), and
  the next save's rotation deletes it again.
- a power loss before the flush ends may damage ``checkpoint-N``: its manifest (sizes and checksums) makes
  the resume search skip it, and the folders rotation set aside are still on disk, because they are only
  deleted once ``checkpoint-N`` is durable; the search considers them too (``folders.find_resumable_checkpoint``).
- a failed flush (``ENOSPC``, ``EIO``): the new folder is deleted (its pages may be lost), the set-aside
  folders get their names back, and the error is raised at the next wait, reported as a failed save is.

On by default (docs/divergences.md). ``HF_LIGHTNING_DEFERRED_DURABILITY=0`` makes a save return only once its
checkpoint is on stable storage, so that a machine that loses power right after a save still has it.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import threading

from hf_lightning.checkpoint.io import disk_full_error, fsync_dir, fsync_tree

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
]

logger = logging.getLogger(__name__)

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
    """The flush of one published checkpoint, and the folders waiting for it to be deleted."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self.lock = threading.Lock()
        self.aside: list[tuple[str, str]] = []  # (hidden path, original path)
        self.durable = False
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="hf-lightning-durability", daemon=False)

    def _run(self) -> None:
        try:
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

        remove_folder(self.folder)
        for hidden, original in self.aside:
            if not os.path.lexists(original):
                os.replace(hidden, original)
        self.aside.clear()
        fsync_dir(os.path.dirname(self.folder) or ".")


def _flush_tree(folder: str) -> None:
    """``io.fsync_tree``, except that a file deleted meanwhile has nothing left to flush."""
    fsync_tree(folder, missing_ok=True)


_pending: _Pending | None = None
_guard = threading.Lock()


def defer_durability(folder: str) -> None:
    """Flush the just published ``folder`` (files, folders, its parent) in the background."""
    global _pending
    job = _Pending(folder)
    with _guard:
        _pending = job
    job.thread.start()


def set_aside(path: str) -> bool:
    """Hide ``path`` (a folder to delete) until the pending flush ended, then delete it behind.

    Returns False when no flush is pending: the caller deletes ``path`` itself.
    """
    if _pending is None:
        return False
    hidden = rotated_path(path)
    os.replace(path, hidden)
    return set_aside_renamed(hidden, path)


def set_aside_renamed(hidden: str, original: str) -> bool:
    """As :func:`set_aside` for a folder already renamed from ``original`` to ``hidden``."""
    job = _pending
    if job is None:
        shutil.rmtree(hidden, ignore_errors=True)
        return False
    with job.lock:
        if not job.durable:
            job.aside.append((hidden, original))
            return True
    shutil.rmtree(hidden, ignore_errors=True)  # the flush ended meanwhile
    return True


def wait_for_durability() -> None:
    """Wait for the pending flush; raise its error (a full disk as :class:`DiskFullError`) after undoing it."""
    global _pending
    with _guard:
        job, _pending = _pending, None
    if job is None:
        return
    job.thread.join()
    if job.error is None:
        return
    full = disk_full_error(job.error, job.folder, "checkpoint", FULL_DISK_ADVICE)  # measured before deleting
    job.undo()
    if full is not None:
        full.reported_whole = True  # type: ignore[attr-defined]  # a later save's report keeps these words
        raise full from job.error
    raise job.error
