"""``CheckpointPolicy`` (``trainer.checkpoints``): save, resume, the best model and rotation.

The folder format, crash safety and safe loading live in :mod:`hf_lightning.checkpoint.store`, the
best → save → rotate order in :mod:`hf_lightning.checkpoint.rotation`; this part decides *what* goes into a checkpoint and *when* state is restored, as transformers' Trainer does::

    train(resume_from_checkpoint=path)
        _load_from_checkpoint(path)                # weights, before the dataloader is built
        _init_training_state -> _load_callback_state()
        create optimizer and scheduler
        _load_optimizer_and_scheduler(path)        # (save_only_model: fresh optimizer, schedule fast-forwarded)
        on_epoch_begin of the resumed epoch        # RNG restored here when resuming at an epoch boundary ...
        on_step_begin of the first resumed step    # ... or here, after the seen batches were skipped
    each save: _save_checkpoint -> checkpoint-{global_step}, best_model_checkpoint, rotation
    end of train: _after_training_checkpoints -> load the best model, save_total_limit=1 pruning

Two documented divergences from transformers (docs/divergences.md): resuming a ``save_only_model`` checkpoint keeps
the fresh optimizer but continues the learning-rate schedule from the restored step (6), and a JIT checkpoint holds
exactly the state after the last completed optimizer step (7, see :meth:`CheckpointPolicy.save_jit_checkpoint`).
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from typing import TYPE_CHECKING, Any, cast

from hf_lightning.args.enums import SAVING_STRATEGIES
from hf_lightning.callbacks import ExportableState
from hf_lightning.callbacks.background_checkpointing import background_saver
from hf_lightning.callbacks.nonfinite import refuse_nonfinite_checkpoint, warn_nonfinite_save
from hf_lightning.callbacks.restore import restore_callbacks
from hf_lightning.checkpoint.background import save_in_background
from hf_lightning.checkpoint.deepspeed_state import deepspeed_save_options, request_deepspeed_resume
from hf_lightning.checkpoint.durability import wait_for_durability
from hf_lightning.checkpoint.folders import checkpoint_problem, unusable_checkpoint_error
from hf_lightning.checkpoint.fresh_state import fast_forward_scheduler, report_fresh_optimizer
from hf_lightning.checkpoint.io import safe_torch_load
from hf_lightning.checkpoint.rotation import loadable_best_checkpoint, save_tracked_checkpoint
from hf_lightning.checkpoint.sharded import (
    gathered_model_state,
    load_fsdp_optimizer,
    needs_gathering,
    sharded_save_options,
)
from hf_lightning.checkpoint.store import (
    OPTIMIZER_NAME,
    SCALER_NAME,
    SCHEDULER_NAME,
    TRAINER_STATE_NAME,
    CheckpointError,
    checkpoint_path,
    load_model_weights,
    load_optimizer_and_scheduler,
    load_rng_state,
    rotate_checkpoints,
    save_checkpoint,
)
from hf_lightning.utils.logging import get_logger

if TYPE_CHECKING:
    from hf_lightning.trainer.trainer import Trainer

__all__ = ["CheckpointPolicy"]

logger = get_logger(__name__)
_COLLATOR_TOKENIZER = (
    "Saving Trainer.data_collator.tokenizer by default as Trainer.processing_class is `None`"
)


class CheckpointPolicy:
    """What goes into a checkpoint and when state is restored; owns the resume bookkeeping."""

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer
        self.resume_checkpoint: str | None = None
        """The folder being resumed from, until the end of that ``train()``."""
        self.rng_pending: str | None = None
        """"epoch" or "step": where the checkpoint's RNG state is still to be restored."""
        self.resume_for_run: int | None = None  # the run (``trainer.run.number``) that resumes
        self.pending_scaler_state: dict[str, Any] | None = None
        self.last_checkpoint: tuple[int, int] | None = None  # (run number, step) of the last one written
        self.last_save_seconds: float | None = None
        self.content_checked: str | None = None
        """The folder ``resume_from_checkpoint=True`` just found intact, its files hashed once."""
        self.best_damaged = False  # load-best fell back: the end-of-training pruning deletes nothing

    def verified(self, folder: str) -> None:
        """``folder`` was just found intact (``resume_from_checkpoint=True``): not hashed again on load."""
        self.content_checked = folder

    def resume_at(self, folder: str) -> None:
        """This ``train()`` resumes from ``folder``: its RNG (and scaler) state waits for the first epoch."""
        self.resume_checkpoint, self.rng_pending = folder, "epoch"

    # --- saving ----------------------------------------------------------------------------
    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        """``Trainer.save_model``: the model, processing class and arguments (on the saving process)."""
        t = self.trainer
        output_dir = str(t.plan.checkpoint.output_dir) if output_dir is None else output_dir
        full = None  # a sharded (FSDP) model: gathered by every process, written by the saver
        if needs_gathering(t.model):
            full = gathered_model_state(t.model, everywhere=t.plan.checkpoint.save_on_each_node)
        if not t.args.should_save:
            return
        logger.info("Saving model checkpoint to %s", output_dir)
        warn_nonfinite_save(t.model, output_dir, full)  # written as asked, not silently (nonfinite.py)
        t._save(output_dir, state_dict=full)  # overridable, as in transformers (sentence-transformers does)
        if t.plan.hub.push_to_hub and not _internal_call:  # transformers pushes when the user saves the model
            t.push_to_hub(commit_message="Model save", revision=t.plan.hub.hub_revision)

    def save_state(self) -> None:
        """``Trainer.save_state``: ``trainer_state.json`` in ``args.output_dir`` (main process only)."""
        t = self.trainer
        if not t.is_world_process_zero():
            return
        output_dir = str(t.plan.checkpoint.output_dir)
        os.makedirs(output_dir, exist_ok=True)
        t.state.save_to_json(os.path.join(output_dir, TRAINER_STATE_NAME))

    def processing_to_save(self, saver: bool = True) -> Any:
        """The processing class, else the data collator's tokenizer (transformers saves that one instead, and
        says so on the process that saves)."""
        if (t := self.trainer).processing_class is not None:
            return t.processing_class
        if (tokenizer := getattr(t.data_collator, "tokenizer", None)) is not None and saver:
            logger.info(_COLLATOR_TOKENIZER)
        return tokenizer

    def save(self, model: Any, trial: Any) -> None:
        """``Trainer._save_checkpoint``: ``checkpoint-{global_step}`` (crash-safe), best tracking, rotation."""
        t = self.trainer
        started = time.perf_counter()
        args, state = t.args, t.state
        saver = background_saver(t.callback_handler.callbacks)  # callbacks=[BackgroundCheckpointing()]
        index, world, is_saver = self.process_layout()
        if saver is not None:
            self.wait_for_saves(world)  # the previous save is published (its error raised) first
        if t.hp_search_backend is None and trial is None:
            t.store_flos()
        run_dir = t._get_output_dir(trial)
        step = state.global_step
        if refuse_nonfinite_checkpoint(t.run.nonfinite, t, checkpoint_path(run_dir, step)):
            return  # a checkpoint with NaN/inf weights never replaces a finite one (docs/checkpointing.md)
        tracked = t.plan.schedule.save_strategy in SAVING_STRATEGIES and state.best_global_step
        self.export_callback_states()
        if is_saver:
            logger.info("Saving model checkpoint to %s", checkpoint_path(run_dir, step))
        kept = t.plan.checkpoint  # what a checkpoint holds, where, and how many are kept
        optimizer = None if kept.save_only_model else t.optimizer
        sharding = sharded_save_options(t.model, optimizer, args) or deepspeed_save_options(
            t.model, optimizer, everywhere=kept.save_on_each_node
        )

        def write(best: str | None) -> str:
            state.best_model_checkpoint = best
            options = dict(model=t.model, optimizer=t.optimizer, scheduler=t.lr_scheduler,
                scaler=self.grad_scaler(), state=state, args=args, processing_class=self.processing_to_save(is_saver),
                save_only_model=kept.save_only_model, process_index=index, world_size=world,
                is_main_process=is_saver, barrier=t.accelerator.wait_for_everyone if world > 1 else None,
                **sharding)  # fmt: skip
            if saver is None:
                return save_checkpoint(run_dir, step, **options)
            rotate = functools.partial(rotate_checkpoints, run_dir, kept.save_total_limit, best)
            then = functools.partial(self.after_save, folder, is_saver=is_saver)
            return save_in_background(
                saver, run_dir, step, options, rotate=rotate if is_saver else None, then=then
            )

        folder = checkpoint_path(run_dir, step)
        save_tracked_checkpoint(
            run_dir,
            step,
            best_global_step=state.best_global_step if tracked else None,
            best_model_checkpoint=state.best_model_checkpoint,
            write=write,
            save_total_limit=kept.save_total_limit,
            is_saver=is_saver and saver is None,  # a background save rotates once it is published
        )
        self.last_checkpoint = (t.run.number, step)
        if saver is None:
            self.after_save(folder, time.perf_counter() - started, is_saver)

    def after_save(self, folder: str, seconds: float, is_saver: bool) -> None:
        """Once ``folder`` is published: push it (``push_to_hub``), record how long the save took."""
        t = self.trainer
        if t.plan.hub.push_to_hub and is_saver:
            wait_for_durability()  # the pushed files are on disk (checkpoint/durability.py)
            t._push_from_checkpoint(folder)  # trainer.hub: in the background (docs/hub.md)
        self.last_save_seconds = seconds

    def wait_for_saves(self, world: int | None = None) -> None:
        """Wait for the background save in flight (``BackgroundCheckpointing``), raising its error; with
        several processes, every process then waits until the main one is done."""
        saver = background_saver(self.trainer.callback_handler.callbacks)
        try:
            if saver is not None:
                saver.wait()  # its rotation sets folders aside behind the flush waited for below
        except BaseException:  # the save's error is raised; a flush's is logged where it failed
            with contextlib.suppress(Exception):
                wait_for_durability()
            raise
        wait_for_durability()  # the saves' flushes (checkpoint/durability.py), the first error raised
        if saver is None:
            return
        if (world if world is not None else self.process_layout()[1]) > 1:
            self.trainer.accelerator.wait_for_everyone()

    def save_jit_checkpoint(self, trial: Any = None) -> str | None:
        """Save the state after the last completed optimizer step as ``checkpoint-{global_step}`` and stop.

        Called on every rank when the ranks agreed to stop after a SIGTERM. The step just saved by the
        regular schedule is not written twice. Returns the folder, or None when it already existed.
        """
        t, run = self.trainer, self.trainer.run
        run.control.should_training_stop = True
        step = t.state.global_step
        folder = checkpoint_path(t._get_output_dir(trial), step)
        if self.last_checkpoint == (t.run.number, step):  # this run wrote this step already
            logger.info(
                "JIT checkpoint: %s was just written by the save schedule; not writing it again.", folder
            )
            return None
        t._save_checkpoint(t.model, trial)
        return folder

    def export_callback_states(self) -> None:
        """Record the current state of every exportable callback (and ``control``) in ``state``."""
        t, run = self.trainer, self.trainer.run
        exportable = [
            cb for cb in t.callback_handler.callbacks + [t.control] if isinstance(cb, ExportableState)
        ]
        states: dict[str, Any] = {}
        for callback in exportable:
            name = type(callback).__name__
            if name in states:
                previous = states[name]
                states[name] = (previous if isinstance(previous, list) else [previous]) + [callback.state()]
            else:
                states[name] = callback.state()
        run.state.stateful_callbacks = states

    def process_layout(self) -> tuple[int, int, bool]:
        """(process index, world size, whether this process writes the shared files), as the engine sees it."""
        t = self.trainer
        accelerator = t.accelerator
        world = max(int(accelerator.num_processes), 1)
        index = int(accelerator.process_index) if world > 1 else 0
        if world == 1:
            return 0, 1, True
        local = accelerator.local_rank
        writer = (
            (local if local is not None else t.args.local_process_index)
            if t.plan.checkpoint.save_on_each_node
            else index
        )
        return index, world, writer == 0

    def grad_scaler(self) -> Any:
        """The mixed-precision gradient scaler of the running engine, if any."""
        return self.trainer.accelerator.grad_scaler

    # --- resuming ----------------------------------------------------------------------------
    def load_from_checkpoint(self, resume_from_checkpoint: str, model: Any = None) -> None:
        """``Trainer._load_from_checkpoint``: the weights into ``model``; refuse an unusable folder."""
        model = self.trainer.model if model is None else model
        wait_for_durability()  # a checkpoint of this process is read once on disk
        folder = os.fspath(resume_from_checkpoint)
        checked, self.content_checked = (
            self.content_checked == folder,
            None,
        )  # train(resume_from_checkpoint=True)
        problem = checkpoint_problem(folder, content=not checked)
        if problem is not None:
            raise unusable_checkpoint_error(
                folder,
                f"Can't find a valid checkpoint at {folder}: {problem}. "  # transformers' words first
                f"`train(resume_from_checkpoint={folder!r})` cannot resume from this folder. "
                "Pass a complete `checkpoint-N` folder written during training (or `True` for the newest "
                "complete one in output_dir).",
            )
        logger.info("Loading model from %s.", folder)
        load_model_weights(
            model, folder, strict=True
        )  # a model that does not match is named, not half-loaded
        self.resume_at(folder)

    def load_optimizer_and_scheduler(self, checkpoint: str | None) -> None:
        """Restore optimizer and scheduler; without their files keep the fresh optimizer, continue the schedule.

        transformers restarts the schedule of a ``save_only_model`` checkpoint from step 0; we step it to
        the restored ``global_step`` instead (docs/divergences.md).
        """
        if checkpoint is None:
            request_deepspeed_resume(self.trainer.model, None)  # clears what a failed fit left behind
            return
        t = self.trainer
        if (
            t.plan.checkpoint.deepspeed
        ):  # the engine reads its own folder once built (checkpoint/deepspeed_state.py)
            request_deepspeed_resume(t.model, checkpoint)
        has = [os.path.isfile(os.path.join(checkpoint, name)) for name in (OPTIMIZER_NAME, SCHEDULER_NAME)]
        optimizer_pt = os.path.join(checkpoint, OPTIMIZER_NAME) if has[0] else None
        loaded = bool(t.plan.checkpoint.deepspeed) or load_fsdp_optimizer(
            t.model, t.optimizer, checkpoint, optimizer_pt=optimizer_pt
        )
        has[0] = has[0] or loaded
        if all(has):
            # the engine moves it (under FSDP, onto the shards: adapters/fsdp_module.py)
            load_optimizer_and_scheduler(checkpoint, None if loaded else t.optimizer, t.lr_scheduler)
        else:
            step = t.state.global_step
            absent = " and ".join(
                name for name, here in zip((OPTIMIZER_NAME, SCHEDULER_NAME), has) if not here
            )
            report_fresh_optimizer(logger, checkpoint, absent, step, t.args)  # checkpoint/fresh_state.py
            fast_forward_scheduler(t.lr_scheduler, step)
        scaler = os.path.join(checkpoint, SCALER_NAME)
        self.pending_scaler_state = safe_torch_load(scaler) if os.path.isfile(scaler) else None
        self.resume_for_run = t.run.number  # the RNG and scaler wait for this run's first epoch and step

    def load_rng_state(self, checkpoint: str | None) -> None:
        """``Trainer._load_rng_state``: this process's python, numpy and torch generators from ``checkpoint``."""
        if checkpoint is None:
            return
        index, world, _ = self.process_layout()
        args = self.trainer.args
        if world == 1 and args.world_size > 1:
            index, world = args.process_index, args.world_size
        load_rng_state(checkpoint, process_index=index, world_size=world)

    def on_resume_point(self, where: str, skipping: bool = False) -> None:
        """``where`` is "epoch" at each epoch begin (``skipping`` when seen batches will be skipped),
        "step" at each step begin.

        As transformers does, the RNG is restored at the resumed epoch's begin when no batch is skipped,
        else right before the first resumed step (after the skipped batches were drawn). The gradient
        scaler's state waits until the engine that owns the scaler runs.
        """
        t = self.trainer
        pending, checkpoint = self.rng_pending, self.resume_checkpoint
        if checkpoint is None or pending is None or self.resume_for_run != t.run.number:
            return
        scaler = self.grad_scaler()
        if self.pending_scaler_state is not None and scaler is not None:
            scaler.load_state_dict(self.pending_scaler_state)
            self.pending_scaler_state = None
        if where == "epoch" and pending == "epoch" and skipping:
            self.rng_pending = "step"
        elif where == pending:
            t._load_rng_state(checkpoint)
            self.rng_pending = None

    def load_callback_state(self) -> None:
        """With ``restore_callback_states_from_checkpoint``, rebuild the saved stateful callbacks and control."""
        t, run = self.trainer, self.trainer.run
        if not t.plan.checkpoint.restore_callback_states_from_checkpoint:
            return
        run.control = restore_callbacks(t.callback_handler, t.control, t.state.stateful_callbacks)
        logger.info("Continuing training from checkpoint, restoring any callbacks that were passed in")

    # --- the end of training -----------------------------------------------------------------
    def after_training(self, trial: Any) -> None:
        """Load the best model (``load_best_model_at_end``); with ``save_total_limit=1`` keep only the best."""
        t = self.trainer
        self.wait_for_saves()  # every checkpoint of the run is published (a background save's error raised)
        self.resume_checkpoint = self.rng_pending = None
        self.resume_for_run, self.best_damaged = None, False
        best = t.state.best_model_checkpoint
        if t.plan.schedule.load_best_model_at_end and best is not None:
            t._load_best_model()
        if (
            t.args.should_save
            and best is not None
            and t.plan.checkpoint.save_total_limit == 1
            and not self.best_damaged
        ):
            rotate_checkpoints(t._get_output_dir(trial), 1, best, at_train_end=True)

    def load_best_model(self) -> None:
        """``Trainer._load_best_model``: the weights of ``state.best_model_checkpoint`` into the model."""
        t = self.trainer
        wait_for_durability()
        best = cast(str, t.state.best_model_checkpoint)  # called when there is one
        logger.info("Loading best model from %s (score: %s).", best, t.state.best_metric)
        folder = loadable_best_checkpoint(best, logger) if os.path.isdir(best) else best  # its manifest first
        self.best_damaged = folder != best  # (no intact checkpoint left: CheckpointError naming the file)
        try:
            load_model_weights(t.model, folder, strict=True)
        except CheckpointError as exc:
            if exc.path != os.fspath(best) or os.path.isdir(best):
                raise
            logger.warning(
                "Could not locate the best model at %s, if you are running a distributed training "
                "on multiple nodes, you should activate `--save_on_each_node`.",
                best,
            )
