"""Implements ``TrainingArguments.enable_jit_checkpoint`` on Lightning: on SIGTERM, finish the optimizer step
in progress, write ``checkpoint-{global_step}``, stop cleanly (exit status 0).

Lightning installs its own SIGTERM handler when ``fit`` starts (``_SignalConnector``): it marks the
trainer, which then raises ``SIGTERMException`` at the end of the batch, before any HF-style save can
happen (``hf_lightning.Trainer``'s fit keeps that handler out, as transformers leaves signals alone; a
Lightning user's fit has it). While training runs, this callback owns SIGTERM instead::

    setup              remember the handler the process had before fit
    on_train_start     (after Lightning registered its handler) take SIGTERM over: SigtermWatch.install
    each step          on_train_batch_start: start the clock
                       on_train_batch_end (the optimizer step, its logging, evaluation and saving are done):
                           stop = any rank has a request   (strategy.reduce_boolean_decision, all=False)
                           if stop: save checkpoint-{global_step}; trainer.should_stop = True; log timings
    on_train_end       give SIGTERM back (Lightning then restores the pre-fit handler itself)
    on_exception / teardown    the same, whatever happened

Every rank takes the same decision at the same step, so all ranks stop after the same step and save it
together. The checkpoint is written by ``save`` (``hf_lightning.Trainer`` passes its own HF save); by
default, in transformers' folder format into ``output_dir`` (see ``HFCheckpoint``). The log reports the
measured step and save times and the grace period the orchestrator needs: step + save + ``kill_wait``.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable
from typing import Any, cast

import lightning as L

from hf_lightning.checkpoint.jit import DEFAULT_KILL_WAIT, JITTimings, SigtermWatch, should_stop

from ..protocols import TrainerFacade

__all__ = ["JITCheckpoint", "jit_checkpoint_for"]

logger = logging.getLogger(__name__)

SaveFn = Callable[[L.Trainer, L.LightningModule], Any]


class JITCheckpoint(L.Callback):
    """Checkpoint and stop after the optimizer step in progress when SIGTERM arrives.

    Args:
        output_dir: where ``checkpoint-{global_step}`` goes when ``save`` is not given.
        kill_wait: seconds between SIGTERM and the checkpoint request (transformers uses 3).
        save: ``save(trainer, pl_module)`` writes the checkpoint (every rank calls it); the default writes
            transformers' folder format with ``save_hf_checkpoint``.
        save_time_hint: returns the duration of the last regular save, so the grace period can be reported
            at the end of a run that was not interrupted.
    """

    def __init__(
        self,
        output_dir: str | os.PathLike[str] | None = None,
        *,
        kill_wait: float = DEFAULT_KILL_WAIT,
        save: SaveFn | None = None,
        save_time_hint: Callable[[], float | None] | None = None,
    ) -> None:
        if save is None and output_dir is None:
            raise ValueError(
                "`JITCheckpoint()` needs `output_dir` (or a `save` function) to write the checkpoint."
            )
        self.output_dir = None if output_dir is None else os.fspath(output_dir)
        self.watch = SigtermWatch(kill_wait)
        self.timings = JITTimings(kill_wait=self.watch.kill_wait)
        self._save = save
        self._save_time_hint = save_time_hint
        self._original: Any = None
        self._step_started: float | None = None
        self.stopped_at: int | None = None
        """The global step after which a SIGTERM stopped the run (None when it was not stopped)."""

    # --- signal ownership ---------------------------------------------------------------------------
    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._original = signal.getsignal(signal.SIGTERM)
        self.watch = SigtermWatch(self.watch.kill_wait)
        self.stopped_at = None

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.watch.install():
            logger.info("JIT checkpointing: SIGTERM is handled by hf_lightning while training runs.")

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.watch.uninstall()
        if self.stopped_at is None and trainer.is_global_zero:
            hint = self._save_time_hint() if self._save_time_hint is not None else None
            if hint is not None and self.timings.last_save is None:
                self.timings.record_save(hint)
            logger.info(self.timings.report())

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        self.watch.uninstall()

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self.watch.installed:  # Lightning already restored its pre-fit handlers: put that one back
            self.watch.uninstall()
            signal.signal(signal.SIGTERM, self._original if self._original is not None else signal.SIG_DFL)

    # --- the decision after each optimizer step ---------------------------------------------------------
    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self._step_started = time.perf_counter()

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self._step_started is not None:
            self.timings.record_step(time.perf_counter() - self._step_started)
        agree = None
        if trainer.world_size > 1:

            def agree(local: bool) -> bool:
                return bool(trainer.strategy.reduce_boolean_decision(local, all=False))

        if should_stop(self.watch.requested, agree):
            self.checkpoint_and_stop(trainer, pl_module)

    def checkpoint_and_stop(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Write the checkpoint of the step just completed and ask Lightning to stop (every rank calls it)."""
        self.watch.clear()
        started = time.perf_counter()
        if self._save is not None:
            where = self._save(trainer, pl_module)
        else:
            from .checkpointing import save_hf_checkpoint

            where = save_hf_checkpoint(trainer, pl_module, cast(str, self.output_dir))  # given: __init__
        seconds = time.perf_counter() - started
        if where is None and self._save_time_hint is not None:  # the schedule had saved this step already
            seconds = self._save_time_hint() or seconds
        self.timings.record_save(seconds)
        self.stopped_at = trainer.global_step
        trainer.should_stop = True
        if trainer.is_global_zero:
            logger.warning(
                "JIT checkpoint after step %d: %s. %s",
                trainer.global_step,
                where or "already saved by the save schedule",
                self.timings.report(),
            )


def jit_checkpoint_for(facade: TrainerFacade, trial: Any = None) -> JITCheckpoint:
    """The ``JITCheckpoint`` of an ``hf_lightning.Trainer`` run: saves through the facade's checkpoint policy."""
    checkpoints = facade.checkpoints

    def save(trainer: L.Trainer, pl_module: L.LightningModule) -> Any:
        return checkpoints.save_jit_checkpoint(trial)

    return JITCheckpoint(
        kill_wait=facade.jit_kill_wait,
        save=save,
        save_time_hint=lambda: checkpoints.last_save_seconds,
    )
