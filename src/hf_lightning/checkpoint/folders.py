"""The ``output_dir/checkpoint-{global_step}`` folders: names, completeness, ordering, rotation, resume.

Ordering and rotation follow transformers' ``sort_checkpoints`` / ``rotate_checkpoints`` with numeric
ordering (transformers tries modification times first and falls back to numbers when they are less
than a second apart; step numbers are what the names promise, so we always use them). Rotation keeps
the newest checkpoint (for resuming) and the best one (for ``load_best_model_at_end``), and deletes a
folder by first renaming it out of the ``checkpoint-*`` namespace, so an interrupted deletion never
leaves a half-deleted ``checkpoint-N`` that looks resumable.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from pathlib import Path

from hf_lightning.checkpoint.durability import ROTATED_NAME, set_aside, wait_for_durability
from hf_lightning.checkpoint.io import CheckpointError, CheckpointFileNotFoundError
from hf_lightning.checkpoint.peft_adapters import ADAPTER_WEIGHT_FILE_NAMES, has_adapter_weights
from hf_lightning.checkpoint.sharded import (
    FSDP_MODEL_DIR,
    FSDP_OPTIMIZER_DIR,
    OPTIMIZER_BIN_NAME,
    has_sharded_weights,
)
from hf_lightning.checkpoint.verify import content_problem, missing_listed_files
from hf_lightning.checkpoint.weights import SAFE_WEIGHTS_INDEX_NAME, WEIGHT_FILE_NAMES, WEIGHTS_INDEX_NAME
from hf_lightning.utils.logging import get_logger

__all__ = [
    "INCOMPLETE_SENTINEL_NAME",
    "OPTIMIZER_NAME",
    "PREFIX_CHECKPOINT_DIR",
    "SCALER_NAME",
    "SCHEDULER_NAME",
    "TRAINER_STATE_NAME",
    "checkpoint_problem",
    "unusable_checkpoint_error",
    "find_resumable_checkpoint",
    "has_model_weights",
    "is_checkpoint_complete",
    "remove_folder",
    "resume_problem",
    "rotate_checkpoints",
    "sorted_checkpoints",
]

PREFIX_CHECKPOINT_DIR = "checkpoint"
OPTIMIZER_NAME = "optimizer.pt"
SCHEDULER_NAME = "scheduler.pt"
SCALER_NAME = "scaler.pt"
TRAINER_STATE_NAME = "trainer_state.json"
INCOMPLETE_SENTINEL_NAME = "checkpoint-is-incomplete.txt"

_CHECKPOINT_RE = re.compile(rf"^{PREFIX_CHECKPOINT_DIR}-(\d+)$")
logger = get_logger(__name__)


def _same_path(first: str, second: str) -> bool:
    return os.path.normpath(os.path.abspath(first)) == os.path.normpath(os.path.abspath(second))


def _index_shards_missing(folder: str) -> str | None:
    for index_name in (SAFE_WEIGHTS_INDEX_NAME, WEIGHTS_INDEX_NAME):
        index = os.path.join(folder, index_name)
        if not os.path.isfile(index):
            continue
        try:
            with open(index, encoding="utf-8") as handle:
                shards = set(json.load(handle)["weight_map"].values())
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return f"its weight index {index_name} is unreadable"
        absent = sorted(shard for shard in shards if not os.path.isfile(os.path.join(folder, shard)))
        if absent:
            return f"the shards {absent} listed in {index_name} are missing"
    return None


_WEIGHT_AND_ADAPTER_FILES = (*WEIGHT_FILE_NAMES, *ADAPTER_WEIGHT_FILE_NAMES)


def has_model_weights(folder: str | os.PathLike[str]) -> bool:
    """Whether ``folder`` holds a model's weights in a layout transformers' Trainer loads: one of the weight
    files or indexes, a distributed checkpoint (``pytorch_model_fsdp_0/``), or a ``PeftModel``'s adapters."""
    folder = os.fspath(folder)
    return (
        any(os.path.isfile(os.path.join(folder, name)) for name in WEIGHT_FILE_NAMES)
        or has_sharded_weights(folder)
        or has_adapter_weights(folder)
    )


def checkpoint_problem(folder: str | os.PathLike[str], content: bool = True) -> str | None:
    """Why ``folder`` cannot be resumed from, or ``None`` when it is complete.

    ``content=False`` leaves out the content check (:func:`~hf_lightning.checkpoint.verify.content_problem`)
    for a folder whose content was just checked.
    """
    folder = os.fspath(folder)
    if not os.path.isdir(folder):
        return "it is not a folder"
    if os.path.exists(os.path.join(folder, INCOMPLETE_SENTINEL_NAME)):
        return f"it still holds {INCOMPLETE_SENTINEL_NAME}, so its save never finished"
    if not has_model_weights(folder):
        return (
            f"it has no model weights (one of {', '.join(WEIGHT_FILE_NAMES)}, {FSDP_MODEL_DIR}/, or a PEFT "
            f"adapter's {' or '.join(ADAPTER_WEIGHT_FILE_NAMES)})"
        )
    if not os.path.isfile(os.path.join(folder, TRAINER_STATE_NAME)):
        return f"it has no {TRAINER_STATE_NAME}"
    empty = sorted(
        name
        for name in (*_WEIGHT_AND_ADAPTER_FILES, TRAINER_STATE_NAME, OPTIMIZER_NAME, SCHEDULER_NAME)
        if os.path.isfile(os.path.join(folder, name)) and os.path.getsize(os.path.join(folder, name)) == 0
    )
    if empty:
        return f"its files {empty} are empty"
    return _index_shards_missing(folder) or (content_problem(folder) if content else None)


def unusable_checkpoint_error(folder: str, message: str) -> CheckpointError:
    """The error for resuming from ``folder`` that :func:`checkpoint_problem` refused: a
    :class:`CheckpointFileNotFoundError` (also ``FileNotFoundError``, transformers' error there) for model
    weights without ``trainer_state.json``, else a :class:`CheckpointError` (``ValueError``)."""
    lacks_state = not os.path.isfile(os.path.join(folder, TRAINER_STATE_NAME))
    if os.path.isdir(folder) and has_model_weights(folder) and lacks_state:
        return CheckpointFileNotFoundError(message, folder)
    return CheckpointError(message, folder)


def resume_problem(folder: str | os.PathLike[str]) -> str | None:
    """Why ``resume_from_checkpoint=True`` passes over ``folder``: :func:`checkpoint_problem`, or a file
    the save wrote (optimizer, scheduler, scaler, RNG state) that is gone since, which would resume with
    a fresh optimizer or another random stream than the uninterrupted run had."""
    problem = checkpoint_problem(folder)
    if problem is not None:
        return problem
    gone = missing_listed_files(folder) or _missing_state_files(os.fspath(folder))
    return f"the files {gone} it was saved with are missing" if gone else None


def _missing_state_files(folder: str) -> list[str]:
    """Without a manifest: the files a checkpoint written here always holds that are gone, the manifest
    first (every checkpoint written here has one, and without it no damage could be seen), judged from its
    ``training_args.json`` (``save_only_model`` writes no optimizer or scheduler). A folder without
    ``training_args.json`` (written by transformers) is not judged; one that does not parse is damaged."""
    if os.path.isfile(os.path.join(folder, "checkpoint-manifest.json")):
        return []
    path = os.path.join(folder, "training_args.json")
    if not os.path.isfile(path):
        return []
    try:
        with open(path, encoding="utf-8") as f:
            saved_args = json.load(f)
    except (OSError, ValueError):
        saved_args = {}
    names = os.listdir(folder)
    expected = [] if saved_args.get("save_only_model") else [OPTIMIZER_NAME, SCHEDULER_NAME]
    gone = ["checkpoint-manifest.json"]
    gone += [name for name in expected if name not in names and not _sharded_optimizer(name, names)]
    if not any(name.startswith("rng_state") for name in names):
        gone.append("rng_state.pth")
    return gone


def _sharded_optimizer(name: str, names: list[str]) -> bool:
    """An FSDP checkpoint keeps its optimizer in ``optimizer_0/`` (sharded) or ``optimizer.bin`` (Accelerate's)."""
    return name == OPTIMIZER_NAME and (FSDP_OPTIMIZER_DIR in names or OPTIMIZER_BIN_NAME in names)


def is_checkpoint_complete(folder: str | os.PathLike[str]) -> bool:
    """True when ``folder`` holds no incomplete-save sentinel, has model weights and ``trainer_state.json``.

    ``optimizer.pt`` / ``scheduler.pt`` are optional: a ``save_only_model`` checkpoint has neither.
    """
    return checkpoint_problem(folder) is None


def _step_of(name: str) -> int | None:
    match = _CHECKPOINT_RE.match(name)
    return int(match.group(1)) if match else None


def sorted_checkpoints(
    output_dir: str | os.PathLike[str], best_model_checkpoint: str | None = None
) -> list[str]:
    """``checkpoint-N`` folders in ``output_dir``, oldest step first.

    When ``best_model_checkpoint`` is one of them and not the newest, it is moved just before the newest,
    as transformers' ``sort_checkpoints`` does, so that deleting from the front spares it.
    """
    output_dir = os.fspath(output_dir)
    if not os.path.isdir(output_dir):
        return []
    found = []
    for name in os.listdir(output_dir):
        step = _step_of(name)
        if step is not None and os.path.isdir(os.path.join(output_dir, name)):
            found.append((step, str(Path(output_dir) / name)))
    ordered = [path for _, path in sorted(found)]
    if best_model_checkpoint is not None and ordered and not _same_path(ordered[-1], best_model_checkpoint):
        best = [path for path in ordered if _same_path(path, best_model_checkpoint)]
        if best:
            newest = ordered[-1]
            ordered = [path for path in ordered if path not in (best[0], newest)] + [best[0], newest]
    return ordered


def remove_folder(path: str) -> None:
    """Delete ``path`` after renaming it to a hidden sibling, so a crash mid-delete leaves no ``checkpoint-N``."""
    parent, name = os.path.split(os.path.normpath(path))
    trash = os.path.join(parent, f".trash-{name}-{os.getpid()}")
    try:
        os.replace(path, trash)
    except OSError:
        trash = path
    shutil.rmtree(trash, ignore_errors=True)


def _final_prune(checkpoints: list[str], best: str) -> list[str]:
    if not any(_same_path(path, best) for path in checkpoints):
        logger.warning("Best checkpoint `%s` is gone; keeping every checkpoint.", best)
        return []
    doomed = [path for path in checkpoints if not _same_path(path, best)]
    for path in doomed:
        logger.info("Deleting older checkpoint [%s] due to args.save_total_limit", path)
        remove_folder(path)
    return doomed


def rotate_checkpoints(
    output_dir: str | os.PathLike[str],
    save_total_limit: int | None,
    best_model_checkpoint: str | None = None,
    *,
    at_train_end: bool = False,
) -> list[str]:
    """Delete the oldest checkpoints beyond ``save_total_limit``; returns the deleted paths.

    The newest checkpoint and ``best_model_checkpoint`` are always kept, so ``save_total_limit=1`` with a
    best checkpoint that is not the newest keeps two. ``None`` or a limit <= 0 deletes nothing. With
    ``at_train_end=True`` this is the pass transformers makes after training instead: when
    ``save_total_limit == 1`` and a best checkpoint is known, every other checkpoint goes.
    """
    if save_total_limit is None or save_total_limit <= 0:
        return []
    checkpoints = sorted_checkpoints(output_dir)
    if at_train_end:
        if save_total_limit != 1 or best_model_checkpoint is None:
            return []
        return _final_prune(checkpoints, best_model_checkpoint)
    # ordered (and the unreliable-mtime warning given) before the count, as transformers
    if len(checkpoints) > 1:
        checkpoints = _write_order(checkpoints)
    if len(checkpoints) <= save_total_limit:
        return []
    protected = [checkpoints[-1]]
    if best_model_checkpoint is not None and not _same_path(best_model_checkpoint, checkpoints[-1]):
        protected.append(best_model_checkpoint)
    keep = max(save_total_limit, len(protected))
    deleted: list[str] = []
    for path in checkpoints:
        if len(checkpoints) - len(deleted) <= keep:
            break
        if not any(_same_path(path, kept) for kept in protected):
            if not set_aside(path):  # hidden now, deleted once the newest checkpoint is durable
                remove_folder(path)
            deleted.append(path)
    return deleted


_MTIME_WARNED: list[bool] = []


def _write_order(checkpoints: list[str]) -> list[str]:
    """The order rotation deletes in, transformers' (``use_mtime=True``): oldest written first, unless the
    folders' modification times span under a second (a filesystem whose times are not reliable, or saves
    that fast); then by step, with transformers' warning, once per process."""
    try:
        timed = sorted((os.path.getmtime(path), path) for path in checkpoints)
    except OSError:  # a folder gone meanwhile: the step order
        return checkpoints
    if timed[-1][0] - timed[0][0] < 1.0:
        if not _MTIME_WARNED:
            _MTIME_WARNED.append(True)
            logger.warning("mtime may not be reliable on this filesystem, falling back to numerical ordering")
        return checkpoints
    return [path for _, path in timed]


def _rotated_checkpoints(output_dir: str) -> list[tuple[int, str]]:
    """(step, path) of the folders a rotation set aside (``.rotated-checkpoint-N-pid``) and a crash left."""
    found = []
    for name in os.listdir(output_dir) if os.path.isdir(output_dir) else []:
        match = ROTATED_NAME.match(name)
        if match and os.path.isdir(os.path.join(output_dir, name)):
            found.append((int(match.group(2)), os.path.join(output_dir, name)))
    return found


def find_resumable_checkpoint(
    output_dir: str | os.PathLike[str], logger: logging.Logger | None = None
) -> str | None:
    """The newest intact ``checkpoint-N`` in ``output_dir`` (``None`` if none); each skipped one is logged.

    Intact: :func:`resume_problem` finds nothing (complete, every file parses and matches its checksum,
    nothing the save wrote is gone). A folder rotation set aside before a power loss damaged the newest
    checkpoint (checkpoint/durability.py) competes by its step; when chosen it gets its name back.
    """
    wait_for_durability()  # this process's newest checkpoint is on disk first
    log = logger if logger is not None else get_logger(__name__)
    output_dir = os.fspath(output_dir)
    visible = [(_step_of(os.path.basename(path)) or 0, True, path) for path in sorted_checkpoints(output_dir)]
    hidden = [(step, False, path) for step, path in _rotated_checkpoints(output_dir)]
    for step, shown, path in sorted(visible + hidden, reverse=True):  # newest first, a visible one first
        problem = resume_problem(path)
        if problem is None:
            return path if shown else _restore(path, step, log)
        log.warning("Skipping checkpoint `%s` when looking for one to resume from: %s.", path, problem)
    return None


def _restore(hidden: str, step: int, log: logging.Logger) -> str:
    original = os.path.join(os.path.dirname(hidden), f"{PREFIX_CHECKPOINT_DIR}-{step}")
    if os.path.lexists(original):
        return hidden
    os.replace(hidden, original)
    log.warning(
        "Resuming from `%s`, which a rotation had set aside before the newer ones were damaged.", original
    )
    return original
