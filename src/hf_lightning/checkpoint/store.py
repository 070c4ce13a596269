"""The HF checkpoint folder format: write, read, rotate and find ``output_dir/checkpoint-{global_step}``.

A checkpoint folder holds what ``transformers.Trainer`` writes, under the same names, so either program
resumes the other's checkpoints::

    checkpoint-{N}/
        model.safetensors         (or the model's save_pretrained output: config.json, shards, ...)
        optimizer.pt  scheduler.pt  scaler.pt (when a grad scaler is used)
        rng_state.pth             (rng_state_{rank}.pth when world_size > 1)
        trainer_state.json        (written by the state object's save_to_json)
        training_args.bin         (see below)
        training_args.json        (our addition: the same arguments as readable JSON)
        <processing class files>  (tokenizer / processor save_pretrained output, when given)

``training_args.bin``: transformers pickles its whole ``TrainingArguments`` object into it, which can only
be read back with ``torch.load(weights_only=False)``, i.e. by trusting the file to run code. We write
``torch.save(args.to_dict())`` instead: a plain dict that ``torch.load(..., weights_only=True)`` reads,
next to ``training_args.json`` with the same content. transformers never reads this file back when
resuming, so the difference does not affect interchange; :func:`load_training_args` reads ours and
refuses transformers' pickled object with a :class:`CheckpointError`.

Beyond transformers, a save is crash-safe: everything is written into the hidden sibling
``.tmp-checkpoint-{N}`` that holds ``checkpoint-is-incomplete.txt`` while it is written; the files are
hashed into a manifest, the sentinel removed, and the folder renamed to ``checkpoint-{N}`` in one step; its
flush to stable storage follows the rename (:mod:`hf_lightning.checkpoint.durability`: the save after next
waits for it, rotation deletes nothing before it; a power loss may then damage the newest, which resume
skips),
or precedes it with ``HF_LIGHTNING_DEFERRED_DURABILITY=0``. A save killed at any point leaves
either no ``checkpoint-{N}`` or a complete one. Loading never unpickles arbitrary
objects (safetensors, ``torch.load(weights_only=True)``); a damaged or unsafe file raises
:class:`CheckpointError` naming it.

Several processes (``world_size > 1``) call :func:`save_checkpoint` with the same ``output_dir`` and
``global_step``; each writes its own ``rng_state_{process_index}.pth``:

- with ``barrier`` (e.g. ``torch.distributed.barrier``), every rank calls it. The main process creates the
  staging folder, [barrier], every rank writes its RNG file into it, [barrier], the main process writes the
  shared files and publishes, [barrier]. The folder appears complete, with every rank's file. A rank that
  fails raises; ending the others is the caller's collective error handling.
- without ``barrier``, the main process saves and publishes with its own RNG file; after the caller's own
  barrier, the other ranks call ``save_checkpoint(..., is_main_process=False)`` (or
  :func:`write_rank_files` on the published folder) to add theirs, each file replaced atomically. A rank
  file missing at resume is logged and skipped, as transformers does.
"""

from __future__ import annotations

import functools
import os
import shutil
from collections.abc import Callable, Mapping
from typing import Any

import torch

from hf_lightning.checkpoint.durability import (
    FULL_DISK_ADVICE,
    defer_durability,
    durability_deferred,
    rotated_path,
    set_aside_renamed,
    wait_for_durability,
    wait_for_flush_of,
)
from hf_lightning.checkpoint.folders import (
    INCOMPLETE_SENTINEL_NAME,
    OPTIMIZER_NAME,
    PREFIX_CHECKPOINT_DIR,
    SCALER_NAME,
    SCHEDULER_NAME,
    TRAINER_STATE_NAME,
    find_resumable_checkpoint,
    is_checkpoint_complete,
    remove_folder,
    rotate_checkpoints,
    sorted_checkpoints,
)
from hf_lightning.checkpoint.io import (
    TRAINING_ARGS_JSON_NAME,
    TRAINING_ARGS_NAME,
    CheckpointError,
    atomic_torch_save,
    disk_full_reported,
    fsync_dir,
    fsync_tree,
    load_training_args,
    write_training_args,
)
from hf_lightning.checkpoint.log_paths import final_paths_in_logs
from hf_lightning.checkpoint.rng_state import capture_rng_state, load_rng_state, rng_state_file_name
from hf_lightning.checkpoint.sealing import FolderSealer
from hf_lightning.checkpoint.state_files import (
    ExtraFile,
    load_optimizer_and_scheduler,
    write_extra_files,
    write_state,
)
from hf_lightning.checkpoint.verify import write_manifest
from hf_lightning.checkpoint.weights import load_model_weights, save_model_weights, unwrap_model
from hf_lightning.utils.logging import get_logger

__all__ = [
    "INCOMPLETE_SENTINEL_NAME",
    "OPTIMIZER_NAME",
    "PREFIX_CHECKPOINT_DIR",
    "SCALER_NAME",
    "SCHEDULER_NAME",
    "TRAINER_STATE_NAME",
    "TRAINING_ARGS_JSON_NAME",
    "TRAINING_ARGS_NAME",
    "CheckpointError",
    "capture_rng_state",
    "checkpoint_path",
    "find_resumable_checkpoint",
    "is_checkpoint_complete",
    "load_model_weights",
    "load_optimizer_and_scheduler",
    "load_rng_state",
    "load_training_args",
    "rotate_checkpoints",
    "save_checkpoint",
    "save_model",
    "sorted_checkpoints",
    "staging_path",
    "write_rank_files",
    "write_training_args",
]

logger = get_logger(__name__)


def checkpoint_path(output_dir: str | os.PathLike[str], global_step: int) -> str:
    """``output_dir/checkpoint-{global_step}``."""
    return os.path.join(os.fspath(output_dir), f"{PREFIX_CHECKPOINT_DIR}-{global_step}")


def staging_path(output_dir: str | os.PathLike[str], global_step: int) -> str:
    """``output_dir/.tmp-checkpoint-{global_step}``: where a save is written before it is published."""
    return os.path.join(os.fspath(output_dir), f".tmp-{PREFIX_CHECKPOINT_DIR}-{global_step}")


def save_model(
    model: torch.nn.Module,
    output_dir: str | os.PathLike[str],
    *,
    processing_class: Any = None,
    args: Any = None,
    state_dict: Mapping[str, torch.Tensor] | None = None,
    weights: bool = True,
) -> None:
    """``Trainer.save_model``: the model (save_pretrained or ``model.safetensors``), processor and arguments.

    Writes in place (``output_dir`` usually also holds the checkpoints); call it on the main process only.
    ``state_dict`` replaces the model's own (a sharded model's gathered weights); ``weights=False`` writes
    the model's config but no weights (a sharded checkpoint holds them in ``pytorch_model_fsdp_0/``).
    """
    output_dir = os.fspath(output_dir)
    advice = "The files written into it so far are incomplete: free some space and save again."
    with disk_full_reported(output_dir, "the model into", advice):
        os.makedirs(output_dir, exist_ok=True)
        if weights:
            save_model_weights(model, output_dir, state_dict=state_dict)
        else:
            config: Any = getattr(unwrap_model(model), "config", None)
            if callable(getattr(config, "save_pretrained", None)):
                config.save_pretrained(output_dir)
        if processing_class is not None:
            processing_class.save_pretrained(output_dir)
        if args is not None:
            write_training_args(output_dir, args)


def write_rank_files(
    folder: str | os.PathLike[str],
    process_index: int = 0,
    world_size: int = 1,
    *,
    rng_state: dict[str, Any] | None = None,
    durable: bool = True,
) -> str:
    """Write this process's own files (its RNG state) into ``folder``; returns the file written.

    ``folder`` must exist (the main process creates it, see :func:`save_checkpoint`). The file is replaced
    atomically, so a rank killed here leaves the previous file or none, never a truncated one; it is on
    stable storage on return unless ``durable=False`` (a staging folder, which its publication flushes).
    """
    folder = os.fspath(folder)
    if not os.path.isdir(folder):
        raise CheckpointError(
            f"`write_rank_files(folder={folder!r})`: the folder does not exist; the main process must create "
            "it (save_checkpoint on the main process) before the other ranks write their files.",
            folder,
        )
    state = rng_state if rng_state is not None else capture_rng_state(distributed=world_size > 1)
    path = os.path.join(folder, rng_state_file_name(process_index, world_size))
    atomic_torch_save(state, path, durable=durable)
    return path


def _begin_staging(staging: str, global_step: int) -> None:
    os.makedirs(os.path.dirname(staging) or ".", exist_ok=True)
    if os.path.lexists(staging):  # left over from a save that was killed
        shutil.rmtree(staging, ignore_errors=True)
    os.makedirs(staging)
    with open(os.path.join(staging, INCOMPLETE_SENTINEL_NAME), "w", encoding="utf-8") as handle:
        handle.write(f"Checkpoint for step {global_step} is being written; this folder is not usable yet.\n")


def _write_main_files(staging: str, options: dict[str, Any], sealer: FolderSealer) -> None:
    """The main process's files: the model's (in a second thread during a synchronous save, ``in_step``)
    while the optimizer's and scheduler's are written (this one), then the trainer state and extra files."""
    sharded = options["sharded_writer"] is not None  # the optimizer (and model) are in the writer's folders
    weights = not sharded or options["model_state_dict"] is not None  # DeepSpeed: full weights beside them
    write_model = functools.partial(save_model, options["model"], staging,
        processing_class=options["processing_class"], args=options["args"],
        state_dict=options["model_state_dict"], weights=weights)  # fmt: skip
    holders = [] if options["save_only_model"] else [
        (name, holder) for name, holder in ((OPTIMIZER_NAME, "optimizer"), (SCHEDULER_NAME, "scheduler"),
                                            (SCALER_NAME, "scaler"))
        if options[holder] is not None and not (sharded and holder == "optimizer")
    ]  # fmt: skip
    # a background save (``defer``) keeps to one thread: training runs on the other cores meanwhile
    with sealer.beside(write_model, when=bool(holders) and options["in_step"]):
        for name, holder in holders:
            given = options["optimizer_state_dict"] if holder == "optimizer" else None
            state = given or options[holder].state_dict()
            sealer.write(name, functools.partial(torch.save, state))
    if options["state"] is not None:
        write_state(options["state"], os.path.join(staging, TRAINER_STATE_NAME))
    write_extra_files(staging, options["extra_files"])


def _publish(staging: str, final: str, sealer: FolderSealer | None = None, deferred: bool = False) -> None:
    """Record the checksums, drop the sentinel, rename ``staging`` to ``final``: durable before the rename,
    or (``deferred``) flushed behind it, see :mod:`hf_lightning.checkpoint.durability`."""
    entries = sealer.finish() if sealer is not None else None  # hashed (flushed unless deferred)
    # deferred: the disk at most one checkpoint behind this one (durability.py); durable: none behind
    wait_for_durability(behind=1 if deferred else 0)
    write_manifest(staging, entries)  # checkpoint/verify.py: lets a resume detect a damaged file
    if not deferred:
        fsync_tree(staging)  # the manifest and the folders (the sealed files are on disk already)
    os.remove(os.path.join(staging, INCOMPLETE_SENTINEL_NAME))
    if not deferred:
        fsync_dir(staging)
    parent, name = os.path.split(final)
    previous = None
    if os.path.lexists(final):
        wait_for_flush_of(final)  # its earlier copy's flush walks `final` by name: it ends first
        # Two renames: a crash between them leaves no checkpoint-N (never a mixed one), and resuming
        # falls back to the previous step. The old copy is then deleted like rotation deletes folders.
        previous = rotated_path(final) if deferred else os.path.join(parent, f".old-{name}-{os.getpid()}")
        os.replace(final, previous)
    os.replace(staging, final)
    if deferred:
        defer_durability(final, sealer.take_writebacks() if sealer is not None else ())  # behind
        if previous is not None:
            set_aside_renamed(previous, final)  # deleted once final is durable
        return
    if previous is not None:
        fsync_dir(parent or ".")
        remove_folder(previous)
    fsync_dir(parent or ".")


def _check_save_call(global_step: Any, process_index: int, world_size: int) -> None:
    if isinstance(global_step, bool) or not isinstance(global_step, int) or global_step < 0:
        raise ValueError(f"`save_checkpoint(global_step={global_step!r})` must be a non-negative int.")
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"`save_checkpoint(world_size={world_size!r})` must be an int >= 1.")
    if not isinstance(process_index, int) or not 0 <= process_index < world_size:
        raise ValueError(
            f"`save_checkpoint(process_index={process_index!r})` must be in [0, world_size={world_size})."
        )


def save_checkpoint(
    output_dir: str | os.PathLike[str],
    global_step: int,
    *,
    model: torch.nn.Module,
    optimizer: Any = None,
    scheduler: Any = None,
    scaler: Any = None,
    state: Any = None,
    args: Any = None,
    processing_class: Any = None,
    save_only_model: bool = False,
    process_index: int = 0,
    world_size: int = 1,
    is_main_process: bool = True,
    extra_files: Mapping[str, ExtraFile] | None = None,
    barrier: Callable[[], None] | None = None,
    model_state_dict: Mapping[str, torch.Tensor] | None = None,
    optimizer_state_dict: Mapping[str, Any] | None = None,
    sharded_writer: Callable[[str], None] | None = None,
    defer: Callable[[Callable[[], str]], None] | None = None,
) -> str:
    """Write ``output_dir/checkpoint-{global_step}`` crash-safely; returns its path.

    ``state`` is written by its ``save_to_json(path)`` (a mapping as JSON); without it the folder is not
    resumable. ``save_only_model`` writes no optimizer, scheduler, scaler or RNG files. ``extra_files`` maps
    file names to bytes, text, or a callable writing the given path. A step saved again replaces its folder.
    ``world_size > 1``: see "Several processes" in the module docstring.

    A sharded model (``hf_lightning.checkpoint.sharded``): ``model_state_dict`` and ``optimizer_state_dict``
    are its gathered full states, written by the main process instead of the objects' own; or
    ``sharded_writer(staging)``, called on every process between the barriers, writes each process's shards
    (FSDP's folders, DeepSpeed's ``global_step{N}/``: no ``optimizer.pt`` then, and weights only if
    ``model_state_dict`` is given), so the folder is published only after every rank finished. ``defer``
    (on every process; ``checkpoint/background.py``): the main process hands the writing of its files (from
    a snapshot of the state) and the publication to ``defer(job)``; no process waits at the last barrier.
    """
    _check_save_call(global_step, process_index, world_size)
    final = checkpoint_path(output_dir, global_step)
    if not is_main_process and barrier is None:  # the main process has published `final` already
        if not save_only_model:
            write_rank_files(final, process_index, world_size)
        return final
    staging = staging_path(output_dir, global_step)
    main_files = dict(model=model, optimizer=optimizer, scheduler=scheduler, scaler=scaler, state=state, args=args,
        processing_class=processing_class, save_only_model=save_only_model, extra_files=extra_files,
        model_state_dict=model_state_dict, optimizer_state_dict=optimizer_state_dict,
        sharded_writer=sharded_writer, in_step=defer is None)  # fmt: skip
    # a failed save leaves no staging folder (it would hold the disk space a full disk needs back)
    discard = (lambda: shutil.rmtree(staging, ignore_errors=True)) if is_main_process else None
    with disk_full_reported(final, "checkpoint", FULL_DISK_ADVICE, discard=discard):
        _stage_and_publish(staging, final, global_step, main_files if is_main_process else None,
            rank=None if save_only_model else (process_index, world_size), barrier=barrier,
            sharded_writer=sharded_writer, defer=defer)  # fmt: skip
    _call(barrier if defer is None else None)  # a deferred save is published later: no one waits for it
    return final


def _stage_and_publish(
    staging: str,
    final: str,
    global_step: int,
    main_files: dict[str, Any] | None,
    *,
    rank: tuple[int, int] | None,
    barrier: Callable[[], None] | None,
    sharded_writer: Callable[[str], None] | None,
    defer: Callable[[Callable[[], str]], None] | None,
) -> None:
    """The main process (``main_files``) creates ``staging``, every process writes its own files, then the
    main one writes its files and publishes (or hands that to ``defer``); see "Several processes" in the
    module docstring."""
    if main_files is not None:
        os.makedirs(os.path.dirname(staging), exist_ok=True)
        _begin_staging(staging, global_step)
    _call(barrier)
    if sharded_writer is not None:
        with final_paths_in_logs(staging, final):
            sharded_writer(staging)
    if rank is not None:  # flushed with the folder: the main process's sealer, or the durability thread
        write_rank_files(staging, *rank, durable=False)
    _call(barrier)  # every rank's own files are in the staging folder
    if main_files is None:
        return
    if defer is None:
        _write_and_publish(staging, final, main_files, deferred=durability_deferred())
    else:
        defer(functools.partial(_write_and_publish_reported, staging, final, main_files))


def _write_and_publish(staging: str, final: str, options: dict[str, Any], deferred: bool = False) -> str:
    """The main process's files into ``staging`` (hashed, and flushed as they are written unless
    ``deferred``: then after the publication, behind), then publish."""
    sealer = FolderSealer(staging, durable=not deferred)
    try:
        with final_paths_in_logs(staging, final):  # transformers' "saved in ..." lines name checkpoint-N
            _write_main_files(staging, options, sealer)
        _publish(staging, final, sealer, deferred=deferred)
    finally:
        sealer.close()
    return final


def _write_and_publish_reported(staging: str, final: str, options: dict[str, Any]) -> str:
    """:func:`_write_and_publish` behind the training (background saving): a full disk is reported as the
    synchronous save reports it, and the staging folder is removed on any failure."""
    with disk_full_reported(
        final, "checkpoint", FULL_DISK_ADVICE, discard=lambda: shutil.rmtree(staging, ignore_errors=True)
    ):
        return _write_and_publish(staging, final, options, deferred=durability_deferred())


def _call(barrier: Callable[[], None] | None) -> None:
    if barrier is not None:
        barrier()
