"""The names hf_lightning writes into ``output_dir`` only while a save or a rotation runs, and removing what an
interrupted one left.

Each of these is renamed or deleted before its operation returns; a process killed in between leaves it::

    .tmp-checkpoint-{N}/          a save being written (``store.staging_path``)
    .old-checkpoint-{N}-{pid}/    the previous copy of a step saved again (``store._publish``)
    .trash-{name}-{pid}/          a folder being deleted (``folders.remove_folder``)
    .rotated-checkpoint-{N}-{pid}/
                                  a checkpoint rotation deletes once the newest is on disk
                                  (``durability.set_aside``): given back its name when that is free
    checkpoint-{N}/{file}.tmp-{pid}
                                  a file being replaced atomically (``io.atomic_write_bytes``): a rank's RNG
                                  state added to a published checkpoint
    .hf-lightning.lock            the lock of the job training into output_dir (``checkpoint/lock.py``)

:func:`remove_leftovers` deletes (or gives back its name) the first five at the start of ``train()``, once the lock is held (so no
other job's save is in flight); :data:`TEMPORARY_PATTERNS` holds all six as the glob patterns
huggingface_hub's ``ignore_patterns`` take, so a push never uploads them. A leftover that is a symbolic link
is unlinked, never followed: nothing outside ``output_dir`` is deleted.
"""

from __future__ import annotations

import os
import re
import shutil

from hf_lightning.checkpoint.durability import ROTATED_NAME
from hf_lightning.utils.logging import get_logger

__all__ = ["LOCK_NAME", "TEMPORARY_PATTERNS", "find_leftovers", "remove_leftovers"]

LOCK_NAME = ".hf-lightning.lock"
TEMPORARY_PATTERNS = (
    ".tmp-checkpoint-*",
    ".old-checkpoint-*",
    ".trash-*",
    ".rotated-*",
    "*.tmp-[0-9]*",
    LOCK_NAME,
)
"""Never pushed to the Hub (huggingface_hub ``fnmatch`` patterns; ``*`` also matches ``/``)."""

_FOLDERS = re.compile(
    r"^(\.tmp-checkpoint-\d+|\.old-checkpoint-\d+-\d+|\.trash-.+-\d+|\.rotated-checkpoint-\d+-\d+)$"
)
_FILES = re.compile(r"^.+\.tmp-\d+$")
_CHECKPOINT = re.compile(r"^checkpoint-\d+$")
logger = get_logger(__name__)


def find_leftovers(output_dir: str | os.PathLike[str]) -> list[str]:
    """The paths of what interrupted saves and rotations left in ``output_dir`` (sorted; [] if none)."""
    output_dir = os.fspath(output_dir)
    if not os.path.isdir(output_dir):
        return []
    found = []
    with os.scandir(output_dir) as entries:
        for entry in entries:
            if _FOLDERS.match(entry.name):
                found.append(entry.path)
            elif _CHECKPOINT.match(entry.name) and entry.is_dir(follow_symlinks=False):
                with os.scandir(entry.path) as files:
                    found += [
                        f.path for f in files if _FILES.match(f.name) and not f.is_dir(follow_symlinks=False)
                    ]
    return sorted(found)


def _remove(path: str) -> None:
    rotated = ROTATED_NAME.match(os.path.basename(path))
    original = os.path.join(os.path.dirname(path), rotated.group(1)) if rotated else None
    if original is not None and not os.path.islink(path) and not os.path.lexists(original):
        os.replace(path, original)  # an interrupted rotation is undone: the next save's rotation redoes it
        return
    if os.path.islink(path) or not os.path.isdir(path):
        os.unlink(path)  # a link is removed itself: its target, maybe outside output_dir, stays
    else:
        shutil.rmtree(path)  # never follows the links inside


def remove_leftovers(output_dir: str | os.PathLike[str]) -> list[str]:
    """Delete :func:`find_leftovers` (a warning lists them); returns the paths removed.

    Call it only while no save into ``output_dir`` can be in flight: once this job holds the lock, on the
    process that writes the checkpoints.
    """
    removed = []
    for path in find_leftovers(output_dir):
        try:
            _remove(path)
        except FileNotFoundError:
            continue
        except OSError as exc:
            logger.warning("Could not remove `%s`, left by an interrupted save: %s", path, exc)
            continue
        removed.append(path)
    if removed:
        logger.warning(
            "Removed what interrupted checkpoint saves or rotations left in `%s` (a checkpoint a rotation "
            "had set aside is renamed back instead): %s",
            os.fspath(output_dir),
            ", ".join(os.path.relpath(path, output_dir) for path in removed),
        )
    return removed
