"""``sort_checkpoints`` and ``rotate_checkpoints`` with ``transformers.trainer_utils``' signatures, for code that
calls them itself (``hf_lightning.trainer_utils`` re-exports them).

The Trainer's own rotation is ``checkpoint/folders.py``'s (the same order and the same protected folders, with
crash-safe deletion and the newest checkpoint's durability first); these two keep transformers' arguments
(``checkpoint_prefix``, ``use_mtime``) and return values.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from hf_lightning.checkpoint.folders import remove_folder
from hf_lightning.utils.logging import get_logger

__all__ = ["rotate_checkpoints", "sort_checkpoints"]

logger = get_logger(__name__)

_warned_mtime: list[bool] = []


def sort_checkpoints(
    output_dir: str,
    checkpoint_prefix: str = "checkpoint",
    use_mtime: bool = False,
    best_model_checkpoint: str | None = None,
) -> list[str]:
    """The ``{checkpoint_prefix}-N`` folders of ``output_dir``, oldest first: by step ``N``, or by modification
    time with ``use_mtime`` (by step, with a warning, when the times span under a second: a filesystem whose
    times are not reliable). ``best_model_checkpoint``, when listed and not the newest, moves just before the
    newest, where deleting from the front spares it."""
    keyed: list[tuple[float, str]] = []
    for folder in Path(output_dir).glob(f"{checkpoint_prefix}-*"):
        if not folder.is_dir():
            continue
        path = str(folder)
        if use_mtime:
            keyed.append((os.path.getmtime(path), path))
        elif match := re.match(f".*{checkpoint_prefix}-([0-9]+)", path):
            keyed.append((int(match.group(1)), path))
    keyed.sort()
    if use_mtime and len(keyed) > 1 and keyed[-1][0] - keyed[0][0] < 1.0:
        if not _warned_mtime:
            _warned_mtime.append(True)
            logger.warning("mtime may not be reliable on this filesystem, falling back to numerical ordering")
        return sort_checkpoints(output_dir, checkpoint_prefix, False, best_model_checkpoint)
    ordered = [path for _, path in keyed]
    best = None if best_model_checkpoint is None else str(Path(best_model_checkpoint))
    if best is not None and best in ordered and ordered[-1] != best:
        newest = ordered[-1]
        ordered = [path for path in ordered if path not in (best, newest)] + [best, newest]
    return ordered


def rotate_checkpoints(
    output_dir: str,
    save_total_limit: int | None = None,
    best_model_checkpoint: str | None = None,
    use_mtime: bool = False,
    checkpoint_prefix: str = "checkpoint",
) -> None:
    """Delete the oldest checkpoints of ``output_dir`` until ``save_total_limit`` are left (nothing when it is
    None or <= 0), never the newest nor ``best_model_checkpoint``: with both kept, two can remain."""
    if save_total_limit is None or save_total_limit <= 0:
        return
    checkpoints = sort_checkpoints(output_dir, checkpoint_prefix, use_mtime)
    if len(checkpoints) <= save_total_limit:
        return
    protected = {checkpoints[-1]}
    if best_model_checkpoint is not None:
        protected.add(str(Path(best_model_checkpoint)))
    remaining = len(checkpoints)
    for path in checkpoints:
        if remaining <= max(save_total_limit, len(protected)):
            break
        if path not in protected:
            remove_folder(path)
            remaining -= 1
