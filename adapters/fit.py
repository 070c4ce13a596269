"""Run ``hf_lightning.Trainer.train()`` on a ``lightning.Trainer``.

The facade hands over the loop driver (its HF state machine), the training DataLoader and the
run's length; this module turns the arguments into a ``lightning.Trainer`` through
``to_lightning`` and fits an ``HFModule`` on accumulation windows of the DataLoader.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import lightning as L
import torch

from hf_lightning.process_group import close_process_group_at_exit, note_failed_run

from .allocator import retain_freed_memory
from .module import HFModule
from .plan import to_lightning
from .strategy import build_strategy
from .windows import AccumulationWindows

__all__ = ["FitRequest", "run_fit"]


@dataclass
class FitRequest:
    """What one ``train()`` call needs from the engine."""

    trainer: Any  # the hf_lightning.Trainer facade (duck-typed: args, model, optimizer, ...)
    driver: Any  # its loop driver (HF events, log_history)
    dataloader: Any
    max_steps: int  # total optimizer steps of the whole run (as transformers computes them)
    num_train_epochs: int
    num_update_steps_per_epoch: int
    initial_global_step: int = 0
    epochs_trained: int = 0
    skip_windows: int = 0


# Lightning's warnings a transformers user cannot act on, dropped during the Trainer's own fit:
_DROPPED = (
    ".*does not have many workers.*",
    ".*LeafSpec.*",
    # The Trainer's training_step puts the model in training mode before every micro-batch, as transformers'
    # does, so a model left in eval mode by an evaluate() before train() trains in training mode: Lightning's
    # start-of-fit check is a false alarm here. (Not model.train() before the fit: a model's own train()
    # override must be called as often as transformers calls it.)
    r".*module\(s\) in eval mode at the start of training.*",
    # HFModule's validation_step serves plain Lightning users; the Trainer evaluates itself.
    ".*defined a `validation_step` but have no `val_dataloader`.*",
)
_DROPPED_RE = re.compile("|".join(f"(?:{pattern})" for pattern in _DROPPED), re.DOTALL)


@contextlib.contextmanager
def _dropped_warnings() -> Iterator[None]:
    """Drop the ``_DROPPED`` warnings at display, leaving the warning filters alone: changing them (as
    ``catch_warnings`` does) makes Python forget which warnings it has shown, so every once-shown warning of the
    user's would show again after each ``train()``. Where a filter turns warnings into errors, the dropped ones
    are filtered instead (they must not raise)."""
    if any(entry[0] == "error" for entry in warnings.filters):
        with warnings.catch_warnings():
            for pattern in _DROPPED:
                warnings.filterwarnings("ignore", message=pattern)
            yield
        return
    previous = warnings.showwarning

    def show(
        message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None
    ) -> None:
        if _DROPPED_RE.match(str(message)) is None:
            previous(message, category, filename, lineno, file, line)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = previous


@contextlib.contextmanager
def _quiet_lightning(level: int) -> Iterator[None]:
    """Lightning's banner lines (devices, tips, "fit stopped") below ``level`` (the plan's log level); HF logs speak instead."""
    import lightning_utilities.core.rank_zero as rank_zero

    names = ("lightning.pytorch", "lightning.fabric", "lightning.pytorch.utilities.rank_zero")
    loggers = [logging.getLogger(name) for name in names] + [rank_zero.log]
    previous = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(max(level, logging.WARNING))
    try:
        with _dropped_warnings():
            yield
    finally:
        for lg, lvl in zip(loggers, previous):
            lg.setLevel(lvl)


def _module_class(plan: Any) -> type[HFModule]:
    """``HFModule``, or its FSDP or DeepSpeed form."""
    deepspeed = plan.distributed.deepspeed
    if deepspeed is not None:
        from .deepspeed_module import DeepSpeedModule

        return DeepSpeedModule
    fsdp = plan.distributed.fsdp
    if fsdp is None:
        return HFModule
    if fsdp.version == 1:
        from .fsdp1_module import FSDP1Module, check_fsdp1

        check_fsdp1(fsdp, plan)
        return FSDP1Module
    from .fsdp_module import FSDP2Module

    return FSDP2Module


def _deepspeed_strategy(plan: Any, facade: Any, max_steps: int) -> Any:
    from .deepspeed import build_deepspeed_strategy, engine_config

    distributed = plan.distributed
    config = engine_config(distributed.deepspeed, model=facade.model, num_training_steps=max_steps)
    return build_deepspeed_strategy(
        config, distributed.process_group_backend, cpu=distributed.deepspeed.cpu, devices=distributed.devices
    )


def _sharding(plan: Any) -> dict[str, Any]:
    """The FSDP or DeepSpeed settings the module class of ``plan`` takes."""
    distributed = plan.distributed
    if distributed.fsdp is not None:
        return {"fsdp": distributed.fsdp}
    return {"deepspeed": distributed.deepspeed} if distributed.deepspeed is not None else {}


def _ddp_strategy(plan: Any, model: torch.nn.Module) -> Any:
    """The plan's strategy; under DDP with ``ddp_find_unused_parameters`` unset, transformers' rule, which needs the
    model: a model that is not a ``PreTrainedModel`` (a ``PeftModel``, a plain module) looks for unused parameters,
    a ``PreTrainedModel`` unless activation checkpointing is on (in the arguments or on the model)."""
    settings = plan.distributed
    if settings.find_unused_parameters_given or not settings.uses_ddp or settings.fsdp is not None:
        return plan.strategy
    from hf_lightning.checkpoint.conversion import is_pretrained_model  # noqa: PLC0415

    find_unused = not getattr(model, "is_activation_checkpointing", False) and settings.find_unused_parameters
    if not is_pretrained_model(model):
        find_unused = True
    if find_unused == settings.find_unused_parameters:
        return plan.strategy
    return build_strategy(dataclasses.replace(settings, find_unused_parameters=find_unused))


def run_fit(request: FitRequest) -> HFModule:
    """Fit the facade's model for the remaining steps; return the fitted module."""
    facade = request.trainer
    plan = to_lightning(
        facade.args,
        env=dict(os.environ),
        cuda_available=torch.cuda.is_available(),
        num_update_steps_per_epoch=request.num_update_steps_per_epoch,
        by_trainer=True,
    )
    # report_to's loggers live in the Trainer's reporting callbacks (adapters/callbacks/reporting.py)
    if plan.distributed.deepspeed is not None:  # the "auto" values that need the model and the run's length
        strategy = _deepspeed_strategy(plan, facade, request.max_steps)
    else:
        strategy = _ddp_strategy(plan, facade.model)
    kwargs = {**plan.trainer_settings, "strategy": strategy, "plugins": list(plan.plugins) or None}
    remaining = request.max_steps - request.initial_global_step
    kwargs["max_steps"] = max(remaining, 0)
    kwargs["max_epochs"] = max(request.num_train_epochs - request.epochs_trained, 1)
    kwargs["enable_progress_bar"] = False  # HF's ProgressCallback draws the bar
    kwargs["logger"] = False
    kwargs["limit_val_batches"] = 0
    module = _module_class(plan)(
        facade.model,
        driver=request.driver,
        optimizers=(facade.optimizer, facade.lr_scheduler),
        shift_labels=getattr(facade, "loss_shifts_labels", None),
        compute_loss_func=facade.compute_loss_func,
        settings=plan.module,
        **_sharding(plan),
    )
    facade.accelerator.bind(module)
    windows = AccumulationWindows(
        request.dataloader, plan.module.gradient_accumulation_steps, skip_windows=request.skip_windows
    )
    if plan.enable_jit_checkpoint:  # owns SIGTERM while fitting (adapters/callbacks/jit_checkpoint.py)
        from .callbacks.jit_checkpoint import jit_checkpoint_for

        kwargs["callbacks"] = [
            *(kwargs.get("callbacks") or []),
            jit_checkpoint_for(facade, request.driver.trial),
        ]
    retain_freed_memory()
    world_size = os.environ.get("WORLD_SIZE")
    try:
        with _quiet_lightning(plan.process_log_level):
            engine = L.Trainer(**kwargs)
            _fit_keeping_interrupts(engine, module, windows)
            if not getattr(request.driver, "began", True):  # a resumed run already at max_steps: Lightning
                request.driver.on_train_begin()  # skips its loop; transformers still begins it (no step runs)
    finally:
        close_process_group_at_exit()  # the group Lightning opened
        # Lightning's LightningEnvironment.teardown deletes WORLD_SIZE; the next train() in this
        # process (and to_lightning) must still see the launcher's world.
        if world_size is not None:
            os.environ["WORLD_SIZE"] = world_size
    return module


class _Interrupted(BaseException):
    """Carries a ``KeyboardInterrupt`` through Lightning's entry point, which would turn it into ``exit(1)``."""


def _fit_keeping_interrupts(engine: L.Trainer, module: Any, windows: Any) -> None:
    """``engine.fit``, with Ctrl+C raised to the caller as transformers' loop raises it (exit code 130, the
    user's ``except KeyboardInterrupt`` runs) and the other signals left to the process's own handlers.
    Lightning's cleanup of an exception (callbacks' ``on_exception``, teardown) still runs."""
    fit_impl = engine._fit_impl
    # transformers' loop leaves the process's signal handlers alone: a SIGTERM ends the process (or runs the
    # script's handler). Lightning's connector would turn it into a graceful stop that exits with status 0,
    # and requeue SLURM jobs on SIGUSR1; JITCheckpoint takes SIGTERM itself when asked for.
    engine._signal_connector.register_signal_handlers = lambda: None  # type: ignore[method-assign]

    def fit_impl_passing_interrupts(*args: Any, **kwargs: Any) -> Any:
        try:
            return fit_impl(*args, **kwargs)
        except KeyboardInterrupt as interrupt:
            raise _Interrupted(interrupt) from interrupt

    engine._fit_impl = fit_impl_passing_interrupts  # type: ignore[method-assign]
    try:
        engine.fit(module, train_dataloaders=windows)
    except BaseException as failure:
        note_failed_run()  # the other ranks may be left in a collective: no barrier at exit
        if isinstance(failure, _Interrupted):
            raise failure.args[0] from None
        raise
