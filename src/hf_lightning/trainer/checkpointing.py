"""Checkpoints of the Trainer: ``save_model``, ``save_state``, the checkpoints written during training, resuming.

The folder format, crash safety and safe loading live in :mod:`hf_lightning.checkpoint.store`; this mixin
decides *what* goes into a checkpoint and *when* state is restored, as transformers' Trainer does::

    train(resume_from_checkpoint=path)
        _load_from_checkpoint(path)                # weights, before the dataloader is built
        _init_training_state -> _load_callback_state()
        create optimizer and scheduler
        _load_optimizer_and_scheduler(path)        # (save_only_model: fresh optimizer, schedule fast-forwarded)
        on_epoch_begin of the resumed epoch        # RNG restored here when resuming at an epoch boundary ...
        on_step_begin of the first resumed step    # ... or here, after the seen batches were skipped
    each save: _save_checkpoint -> checkpoint-{global_step}, best_model_checkpoint, rotation
    end of train: _after_training_checkpoints -> load the best model, save_total_limit=1 pruning

Two documented divergences from transformers (DESIGN.md): resuming a ``save_only_model`` checkpoint keeps
the fresh optimizer but continues the learning-rate schedule from the restored step (6), and a JIT
checkpoint holds exactly the state after the last completed optimizer step (7, see
:meth:`TrainerCheckpointMixin._save_jit_checkpoint`).
"""

from __future__ import annotations

import logging
import os
import time
import warnings
from typing import Any

import torch

from hf_lightning.callbacks import ExportableState, TrainerControl
from hf_lightning.checkpoint.folders import checkpoint_problem
from hf_lightning.checkpoint.io import safe_torch_load
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
    save_model,
)
from hf_lightning.trainer.base import TrainerBase

__all__ = ["TrainerCheckpointMixin", "fast_forward_scheduler"]

logger = logging.getLogger(__name__)

_SAVING_STRATEGIES = ("steps", "epoch", "best")


def _value(strategy: Any) -> Any:
    return getattr(strategy, "value", strategy)


def fast_forward_scheduler(scheduler: Any, steps: int) -> None:
    """Step ``scheduler`` ``steps`` times without an optimizer step, so its learning rate is that of ``steps``.

    Metric-driven schedulers (``ReduceLROnPlateau``, ``GreedyLR``) have no step-indexed schedule and are
    left as they are.
    """
    if scheduler is None or steps <= 0 or not hasattr(scheduler, "step"):
        return
    if (
        isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)
        or type(scheduler).__name__ == "GreedyLR"
    ):
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "scheduler.step() before optimizer.step()": intended here
        for _ in range(steps):
            scheduler.step()


def _restore_callbacks(handler: Any, control: TrainerControl, stored: dict[str, Any]) -> TrainerControl:
    """Rebuild the callbacks (and ``control``) named in ``stored`` from their saved states, as transformers does."""
    present = handler.callbacks + [control]
    missing, rebuilt = [], []
    for name, data in stored.items():
        same = [cb for cb in present if type(cb).__name__ == name]
        if not same:
            missing.append(name)
            continue
        for callback, state in zip(same, data if isinstance(data, list) else [data]):
            new = type(callback)(**state.get("args", {}))
            for attribute, value in state.get("attributes", {}).items():
                setattr(new, attribute, value)
            if isinstance(callback, TrainerControl):
                control = new
            else:
                rebuilt.append(new)
                handler.remove_callback(type(new))
    if missing:
        logger.warning(
            "Checkpoint included callbacks not included in current configuration. "
            f"Ignoring. ({', '.join(missing)})"
        )
    for callback in rebuilt:
        handler.add_callback(callback)
    return control


class TrainerCheckpointMixin(TrainerBase):
    """``save_model``, ``save_state``, ``_save_checkpoint``, resuming and the best model at the end."""

    jit_kill_wait: float = 3.0
    """Seconds between SIGTERM and the JIT checkpoint request (transformers' ``kill_wait``); counted in the
    grace period the log reports."""

    # --- saving ----------------------------------------------------------------------------
    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        """Save the model (``save_pretrained`` or ``model.safetensors``), the processing class and the
        arguments to ``output_dir`` (default ``args.output_dir``); only the process that saves writes."""
        output_dir = self.args.output_dir if output_dir is None else output_dir
        if not self.args.should_save:
            return
        logger.info("Saving model checkpoint to %s", output_dir)
        save_model(self.model, output_dir, processing_class=self._processing_to_save(), args=self.args)

    def save_state(self) -> None:
        """Write ``trainer_state.json`` to ``args.output_dir`` (on the main process only)."""
        if not self.is_world_process_zero():
            return
        os.makedirs(self.args.output_dir, exist_ok=True)
        self.state.save_to_json(os.path.join(self.args.output_dir, TRAINER_STATE_NAME))

    def _processing_to_save(self) -> Any:
        """The processing class, else the data collator's tokenizer (transformers saves that one instead)."""
        if self.processing_class is not None:
            return self.processing_class
        return getattr(getattr(self, "data_collator", None), "tokenizer", None)

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        """Write ``checkpoint-{global_step}`` (crash-safe), track the best checkpoint and rotate old ones."""
        started = time.perf_counter()
        args, state = self.args, self.state
        if getattr(self, "hp_search_backend", None) is None and trial is None:
            self.store_flos()
        run_dir = self._get_output_dir(trial)
        step = state.global_step
        if _value(args.save_strategy) in _SAVING_STRATEGIES and state.best_global_step:
            best = checkpoint_path(run_dir, state.best_global_step)
            if state.best_global_step == step or os.path.exists(best):
                state.best_model_checkpoint = best
        self._export_callback_states()
        index, world, is_saver = self._process_layout()
        if is_saver:
            logger.info("Saving model checkpoint to %s", checkpoint_path(run_dir, step))
        folder = save_checkpoint(
            run_dir,
            step,
            model=self.model,
            optimizer=self.optimizer,
            scheduler=self.lr_scheduler,
            scaler=self._grad_scaler(),
            state=state,
            args=args,
            processing_class=self._processing_to_save(),
            save_only_model=args.save_only_model,
            process_index=index,
            world_size=world,
            is_main_process=is_saver,
            barrier=self.accelerator.wait_for_everyone if world > 1 else None,
        )
        if is_saver:
            rotate_checkpoints(run_dir, args.save_total_limit, state.best_model_checkpoint)
        self._last_checkpoint = (state, step)  # this run's state object: a later train() has another
        self._last_save_seconds = time.perf_counter() - started
        logger.debug("Saved %s in %.2fs", folder, self._last_save_seconds)

    def _save_jit_checkpoint(self, trial: Any = None) -> str | None:
        """Save the state after the last completed optimizer step as ``checkpoint-{global_step}`` and stop.

        Called on every rank when the ranks agreed to stop after a SIGTERM. The step just saved by the
        regular schedule is not written twice. Returns the folder, or None when it already existed.
        """
        self.control.should_training_stop = True
        step = self.state.global_step
        folder = checkpoint_path(self._get_output_dir(trial), step)
        last_state, last_step = getattr(self, "_last_checkpoint", (None, None))
        if last_state is self.state and last_step == step:
            logger.info(
                "JIT checkpoint: %s was just written by the save schedule; not writing it again.", folder
            )
            return None
        self._save_checkpoint(self.model, trial)
        return folder

    def _export_callback_states(self) -> None:
        """Record the current state of every exportable callback (and ``control``) in ``state``."""
        exportable = [
            cb for cb in self.callback_handler.callbacks + [self.control] if isinstance(cb, ExportableState)
        ]
        states: dict[str, Any] = {}
        for callback in exportable:
            name = type(callback).__name__
            if name in states:
                previous = states[name]
                states[name] = (previous if isinstance(previous, list) else [previous]) + [callback.state()]
            else:
                states[name] = callback.state()
        self.state.stateful_callbacks = states

    def _process_layout(self) -> tuple[int, int, bool]:
        """(process index, world size, whether this process writes the shared files), as the engine sees it."""
        accelerator = self.accelerator
        world = max(int(accelerator.num_processes), 1)
        index = int(accelerator.process_index) if world > 1 else 0
        local = getattr(getattr(accelerator, "_trainer", None), "local_rank", None)
        if world == 1:
            return 0, 1, True
        writer = (
            (local if local is not None else self.args.local_process_index)
            if self.args.save_on_each_node
            else index
        )
        return index, world, writer == 0

    def _grad_scaler(self) -> Any:
        """The mixed-precision gradient scaler of the running engine, if any."""
        engine = getattr(self.accelerator, "_trainer", None)
        return getattr(getattr(engine, "precision_plugin", None), "scaler", None)

    # --- resuming ----------------------------------------------------------------------------
    def _load_from_checkpoint(self, resume_from_checkpoint: str, model: Any = None) -> None:
        """Load the checkpoint's weights into ``model`` (default ``self.model``); refuse an unusable folder."""
        model = self.model if model is None else model
        folder = os.fspath(resume_from_checkpoint)
        problem = checkpoint_problem(folder)
        if problem is not None:
            raise CheckpointError(
                f"Can't find a valid checkpoint at {folder}: {problem}. "  # transformers' words first
                f"`train(resume_from_checkpoint={folder!r})` cannot resume from this folder. "
                "Pass a complete `checkpoint-N` folder written during training (or `True` for the newest "
                "complete one in output_dir).",
                folder,
            )
        logger.info("Loading model from %s.", folder)
        load_model_weights(
            model, folder, strict=True
        )  # a model that does not match is named, not half-loaded
        self._resume_checkpoint = folder
        self._resume_rng_pending = "epoch"

    def _load_optimizer_and_scheduler(self, checkpoint: str | None) -> None:
        """Restore optimizer and scheduler; without their files keep the fresh optimizer, continue the schedule.

        transformers restarts the schedule of a ``save_only_model`` checkpoint from step 0; we step it to
        the restored ``global_step`` instead (DESIGN.md, divergence 6).
        """
        if checkpoint is None:
            return
        has = [os.path.isfile(os.path.join(checkpoint, name)) for name in (OPTIMIZER_NAME, SCHEDULER_NAME)]
        if all(has):
            load_optimizer_and_scheduler(checkpoint, self.optimizer, self.lr_scheduler)  # the engine moves it
        else:
            step = self.state.global_step
            absent = " and ".join(
                name for name, here in zip((OPTIMIZER_NAME, SCHEDULER_NAME), has) if not here
            )
            logger.info(
                "`%s` holds no %s: training continues with a fresh optimizer; the learning-rate "
                "schedule continues from step %d.",
                checkpoint,
                absent,
                step,
            )
            fast_forward_scheduler(self.lr_scheduler, step)
        scaler = os.path.join(checkpoint, SCALER_NAME)
        self._pending_scaler_state = safe_torch_load(scaler) if os.path.isfile(scaler) else None
        self._resume_for_state = self.state  # the RNG and scaler wait for this run's first epoch and step

    def _load_rng_state(self, checkpoint: str | None) -> None:
        """Restore this process's python, numpy and torch (CPU/CUDA) generators from ``checkpoint``."""
        if checkpoint is None:
            return
        index, world, _ = self._process_layout()
        if world == 1 and self.args.world_size > 1:
            index, world = self.args.process_index, self.args.world_size
        load_rng_state(checkpoint, process_index=index, world_size=world)

    def _on_resume_point(self, where: str, skipping: bool = False) -> None:
        """Driver hook: ``where`` is "epoch" at each epoch begin (``skipping`` when seen batches will be
        skipped), "step" at each step begin.

        As transformers does, the RNG is restored at the resumed epoch's begin when no batch is skipped,
        else right before the first resumed step (after the skipped batches were drawn). The gradient
        scaler's state waits until the engine that owns the scaler runs.
        """
        pending = getattr(self, "_resume_rng_pending", None)
        checkpoint = getattr(self, "_resume_checkpoint", None)
        if (
            checkpoint is None
            or pending is None
            or getattr(self, "_resume_for_state", None) is not self.state
        ):
            return
        scaler_state = getattr(self, "_pending_scaler_state", None)
        if scaler_state is not None and self._grad_scaler() is not None:
            self._grad_scaler().load_state_dict(scaler_state)
            self._pending_scaler_state = None
        if where == "epoch" and pending == "epoch" and skipping:
            self._resume_rng_pending = "step"
        elif where == pending:
            self._load_rng_state(checkpoint)
            self._resume_rng_pending = None

    def _load_callback_state(self) -> None:
        """With ``restore_callback_states_from_checkpoint``, rebuild the saved stateful callbacks and control."""
        if not self.args.restore_callback_states_from_checkpoint:
            return
        self.control = _restore_callbacks(self.callback_handler, self.control, self.state.stateful_callbacks)
        logger.info("Continuing training from checkpoint, restoring any callbacks that were passed in")

    # --- the end of training -----------------------------------------------------------------
    def _after_training_checkpoints(self, trial: Any) -> None:
        """Load the best model (``load_best_model_at_end``); with ``save_total_limit=1`` keep only the best."""
        self._resume_checkpoint = self._resume_rng_pending = self._resume_for_state = None
        best = self.state.best_model_checkpoint
        if self.args.load_best_model_at_end and best is not None:
            self._load_best_model()
        if self.args.should_save and best is not None and self.args.save_total_limit == 1:
            rotate_checkpoints(self._get_output_dir(trial), 1, best, at_train_end=True)

    def _load_best_model(self) -> None:
        """Load the weights of ``state.best_model_checkpoint`` into the model."""
        best = self.state.best_model_checkpoint
        logger.info("Loading best model from %s (score: %s).", best, self.state.best_metric)
        try:
            load_model_weights(self.model, best, strict=True)
        except CheckpointError as exc:
            if exc.path != os.fspath(best) or os.path.isdir(best):
                raise
            logger.warning(
                "Could not locate the best model at %s, if you are running a distributed training "
                "on multiple nodes, you should activate `--save_on_each_node`.",
                best,
            )
