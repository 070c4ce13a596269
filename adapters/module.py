"""``HFModule``: a real ``LightningModule`` around any model that follows the HF conventions.

The model's ``forward`` takes the batch dict as keyword arguments and returns a ``ModelOutput``,
a dict or a tuple with the loss first when labels are given. ``HFModule`` trains it with
transformers' semantics under a plain ``lightning.Trainer``:

- Manual optimization. Each Lightning batch is one gradient-accumulation window (a list of
  micro-batches, see ``AccumulationWindows``; a plain dict batch is a window of one), so the loss of
  every micro-batch is normalised by ``num_items_in_batch`` of the whole window before the first
  backward, and ``trainer.global_step`` counts optimizer updates.
- ``max_grad_norm`` clipping after mixed-precision unscaling, with the pre-clip norm kept as
  ``grad_norm``; the learning-rate scheduler steps once per optimizer update.
- Validation and test batches log the model's loss as ``eval_loss`` / ``test_loss`` (mean over
  samples, as ``Trainer.evaluate``); ``predict_step`` returns the model's outputs.
- A Lightning ``.ckpt`` carries the HF learning-rate scheduler's state, so ``fit(ckpt_path=...)``
  resumes the schedule; ``HFModule.load_from_checkpoint(path, model=...)`` loads the weights.
- What happens around each step (HF callback events, ``log_history``) is the job of a *driver*:
  ``hf_lightning.Trainer`` passes its own; alone, ``StandaloneDriver`` logs the loss to Lightning.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import lightning as L
import torch
from torch import nn

from hf_lightning.args.runtime import resolve_steps
from hf_lightning.args.training_args import TrainingArguments
from hf_lightning.args.translate import module_settings
from hf_lightning.loss import LossSettings, compute_model_loss
from hf_lightning.optim.factory import OptimizerFactory
from hf_lightning.optim.optimizers import current_learning_rate
from hf_lightning.optim.schedulers import steps_per_update
from hf_lightning.plan.groups import ModuleSettings

from . import speedups
from .argument_table import check_supported
from .grad_clipping import ClipOrder
from .module_checks import (
    batch_rows,
    check_engine_module,
    check_eval_labels,
    check_windows_are_sharded,
    refuse_lightning_accumulation,
)
from .protocols import LoopDriver
from .skipped_steps import step_reporting_skip, unscale_for_clipping
from .standalone_driver import StandaloneDriver
from .windows import Window

__all__ = ["HFModule", "StandaloneDriver"]


class HFModule(L.LightningModule):
    """Implements transformers' training step on Lightning for an HF-convention ``model``.

    Args:
        model: the model to train (``forward(**batch)`` returns the loss first when labels are given).
        args: the ``TrainingArguments`` whose optimizer, scheduler, clipping and accumulation settings
            apply (defaults to ``TrainingArguments()``); one that sets an argument hf_lightning does not
            carry yet raises ``NotImplementedError`` naming it; translated once, at construction, into
            :class:`~hf_lightning.adapters.plan.ModuleSettings` (``self.settings``), which is all the
            module reads afterwards (its ``optimizer_factory`` builds the optimizer); the module keeps
            no reference to ``args``.
        driver: who receives the step events (``hf_lightning.Trainer`` passes its own).
        optimizers: ``(optimizer, lr_scheduler)`` to use instead of building them from ``args``.
        shift_labels: whether the model's loss predicts ``labels[..., 1:]``; inferred when None.
        compute_loss_func: ``compute_loss_func(outputs, labels, num_items_in_batch)`` replacing the
            model's own loss.
        settings: the module's group of a plan (``to_lightning(args).module``), when already built.
    """

    def __init__(
        self,
        model: nn.Module,
        args: TrainingArguments | None = None,
        *,
        driver: LoopDriver | None = None,
        optimizers: tuple[Any, Any] = (None, None),
        shift_labels: bool | None = None,
        compute_loss_func: Any = None,
        settings: ModuleSettings | None = None,
    ) -> None:
        super().__init__()
        self.model = model
        if settings is None:
            if args is not None:
                check_supported(args)  # a "not yet" argument is refused here too, never silently dropped
            settings = module_settings(args if args is not None else TrainingArguments())
        self.settings: ModuleSettings = settings
        self.automatic_optimization = False
        self.driver: LoopDriver = driver if driver is not None else StandaloneDriver()
        self.driver.bind(self)
        self._optimizers_given = optimizers
        self._shift_labels = shift_labels
        self._compute_loss_func = compute_loss_func
        self.loss_settings = self._loss_settings(world_size=1)
        self.window_size = 1
        self.window_items: Any = None  # the current window's item count (num_items_in_batch)
        self.last_grad_norm: float | None = None
        self.step_skipped = False  # whether the fp16 gradient scaler skipped the last update (inf/NaN grads)
        self.hf_lr_scheduler: Any = None
        self.train_model: nn.Module = model
        self._plain_backward: bool | None = None  # decided once per fit (see manual_backward)
        self._clip_order = ClipOrder()  # max_grad_norm clips in the model's parameter order
        self._scheduler_state: dict[str, Any] | None = None  # from a Lightning checkpoint, until restored

    def _loss_settings(self, world_size: int) -> LossSettings:
        return LossSettings.for_model(
            self.model,
            label_smoothing_factor=self.settings.label_smoothing_factor,
            compute_loss_func=self._compute_loss_func,
            average_tokens_across_devices=self.settings.average_tokens_across_devices,
            world_size=world_size,
            shift_labels=self._shift_labels,
        )

    def forward(self, *batch: Mapping[str, Any], **inputs: Any) -> Any:
        """The model on a batch given as keyword arguments or as one dict (Lightning's ``self(batch)``)."""
        if batch:
            if len(batch) != 1 or not isinstance(batch[0], Mapping):
                raise TypeError("HFModule.forward takes one batch dict or the batch as keyword arguments")
            inputs = {**batch[0], **inputs}
        return self.model(**inputs)

    @classmethod
    def load_from_checkpoint(cls, checkpoint_path: Any, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        """Lightning's ``load_from_checkpoint``; ``model=`` is required (a ``.ckpt`` holds weights only)."""
        if "model" not in kwargs:
            raise TypeError(
                "`HFModule.load_from_checkpoint(path, model=...)` needs the model to load the weights into (a "
                "`.ckpt` holds no class or config): build it as for training and pass `model=` (and `args=`)"
            )
        return super().load_from_checkpoint(checkpoint_path, *args, **kwargs)

    if TYPE_CHECKING:  # any value may be set on the module (``speedups.install`` puts the fast path here)

        def __setattr__(self, name: str, value: Any) -> None: ...

    # --- Lightning hooks -------------------------------------------------------------------
    def configure_callbacks(self) -> Any:
        """No callbacks; refuses ``accumulate_grad_batches`` (called before Lightning's own check), naming the fix."""
        if self._trainer is not None and self.trainer.state.fn == "fit":
            refuse_lightning_accumulation(self.trainer)
        return []

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Add the HF learning-rate scheduler (Lightning is not given it) to a Lightning checkpoint."""
        scheduler = self.hf_lr_scheduler
        if scheduler is not None and hasattr(scheduler, "state_dict"):
            checkpoint[_SCHEDULER_KEY] = scheduler.state_dict()

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Keep the scheduler state of a ``fit(ckpt_path=...)`` until the scheduler exists."""
        self._scheduler_state = checkpoint.get(_SCHEDULER_KEY) if self._trainer is not None else None
        if self._scheduler_state is not None and self.hf_lr_scheduler is not None:
            self._restore_scheduler()  # strategies that restore after setup (configure_optimizers ran)

    def _restore_scheduler(self) -> None:
        state, self._scheduler_state = self._scheduler_state, None
        if state is not None and hasattr(self.hf_lr_scheduler, "load_state_dict"):
            self.hf_lr_scheduler.load_state_dict(state)

    def setup(self, stage: str) -> None:
        self._plain_backward = None
        self.loss_settings = self._loss_settings(world_size=self.trainer.world_size)

        self.train_model = self.model
        settings = self.settings
        if settings.torch_compile:
            # transformers compiles the model it trains; the saved weights keep the plain names.
            backend = settings.torch_compile_backend or "inductor"  # transformers' default
            compiled = torch.compile(self.model, backend=backend, mode=settings.torch_compile_mode)
            self.train_model = cast(nn.Module, compiled)

    def build_optimizer(self) -> torch.optim.Optimizer:
        """The plan's optimizer (``settings.optimizer_factory``) over the model; transformers' default
        optimizer for a ``ModuleSettings`` built without one."""
        factory = self.settings.optimizer_factory or OptimizerFactory(TrainingArguments())
        return factory(self.model)

    def configure_optimizers(self) -> Any:
        """The optimizer for Lightning; the HF scheduler is kept here and stepped once per update.

        Lightning is not given the scheduler: transformers' metric-driven schedules
        (``reduce_lr_on_plateau``, ``greedy``) are stepped with the evaluation metric by the trainer.
        """
        optimizer, scheduler = self._optimizers_given
        from hf_lightning.optim import get_trainer_scheduler

        if optimizer is None:
            optimizer = self.build_optimizer()
        if scheduler is None:
            total = int(self.trainer.estimated_stepping_batches)
            scheduler = get_trainer_scheduler(
                self.settings.lr_scheduler_type,
                optimizer,
                num_warmup_steps=resolve_steps(self.settings.warmup_steps, total),
                num_training_steps=total,
                scheduler_specific_kwargs=dict(self.settings.lr_scheduler_kwargs),
            )
        self.hf_lr_scheduler = scheduler
        self._restore_scheduler()
        return optimizer

    def on_train_start(self) -> None:
        if isinstance(self.driver, StandaloneDriver):
            check_windows_are_sharded(self.trainer)
        check_engine_module(self, self.trainer)
        self.driver.on_train_begin()

    def on_train_epoch_start(self) -> None:
        self.driver.on_epoch_begin()

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> int | None:
        return -1 if self.driver.should_stop_epoch() else None

    def on_train_epoch_end(self) -> None:
        self.driver.on_epoch_end()

    def on_train_end(self) -> None:
        self.driver.on_train_end()

    def training_step(self, batch: Any, batch_idx: int) -> None:
        window = self._as_window(batch)
        optimizer = cast(Any, self.optimizers())  # one optimizer, not a list
        given = self.driver.batch_samples(window)  # a Trainer subclass's get_batch_samples, else None
        window, num_items = given if given is not None else (window, self.count_items(window))
        self.window_size, self.window_items = len(window), num_items
        self.driver.on_step_begin()
        for index, inputs in enumerate(window):
            loss = self.driver.training_step(self.train_model, inputs, num_items)
            self.driver.on_micro_batch_end(inputs, loss)
            if index < len(window) - 1:
                self.driver.on_substep_end()
        self.step_skipped = self._optimizer_step(optimizer)  # clipping: on_before_optimizer_step
        self.after_optimizer_step()
        self.driver.on_optimizer_step()
        learning_rate = self.step_scheduler()
        for param in self._optimized_parameters():  # model.zero_grad(), without walking the module tree
            param.grad = None
        self.driver.on_step_end(self.last_grad_norm, learning_rate)

    def manual_backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        """Lightning's ``manual_backward``; a direct ``loss.backward()`` when nothing else would run (the
        ``backward`` speed trick, ``adapters/speedups.py``)."""
        if self._backward_is_plain():
            loss.backward(*args, **kwargs)
        else:
            super().manual_backward(loss, *args, **kwargs)

    def _backward_is_plain(self) -> bool:
        plain = self._plain_backward
        if plain is None:
            trainer = self._trainer
            if trainer is None:
                return False  # Lightning's path raises its own error
            plain = self._plain_backward = speedups.plain_backward_setup(self, trainer)
        return plain

    def teardown(self, stage: str) -> None:
        self._plain_backward = None  # the next fit (another trainer, other callbacks) decides again
        self._clip_order = ClipOrder()

    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        """Lightning's transfer, skipped on the CPU when the driver places each micro-batch itself.

        ``hf_lightning.Trainer``'s ``_prepare_inputs`` moves every micro-batch to the device, as in
        transformers; on the CPU Lightning's pass over the window would only rebuild its containers.
        """
        if device.type == "cpu" and getattr(self.driver, "places_inputs", False):
            return batch
        return super().transfer_batch_to_device(batch, device, dataloader_idx)

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> torch.Tensor | None:
        """The model's loss on a validation batch, logged as ``eval_loss`` (its name in transformers).

        As in ``Trainer.evaluate``, the epoch's value is the mean over samples: each batch's loss
        weighs by its number of rows, over every rank's batches under DDP. With several validation
        loaders Lightning suffixes the name with ``/dataloader_idx_N``. A batch without ``labels``
        logs nothing.
        """
        return self._log_eval_loss("eval_loss", batch)

    def test_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> torch.Tensor | None:
        """As ``validation_step``, logged as ``test_loss`` (transformers' ``predict`` prefix)."""
        return self._log_eval_loss("test_loss", batch)

    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> Any:
        """The model's outputs on a prediction batch (a list of them for a window of micro-batches)."""
        window = [batch] if isinstance(batch, Mapping) else self._as_window(batch)
        outputs = [self.train_model(**inputs) for inputs in window]
        return outputs[0] if len(outputs) == 1 else outputs

    def _log_eval_loss(self, name: str, batch: Any) -> torch.Tensor | None:
        window = self._as_window(batch) if not isinstance(batch, Mapping) else [batch]
        if not any("labels" in inputs for inputs in window):
            return None
        losses, rows = [], []
        for inputs in window:
            check_eval_labels(inputs, name.split("_")[0])
            losses.append(compute_model_loss(self.train_model, inputs, self.loss_settings).detach().float())
            rows.append(batch_rows(inputs))
        weights = torch.tensor(rows, dtype=torch.float32, device=losses[0].device)
        loss = (torch.stack(losses) * weights).sum() / weights.sum()
        self.log(
            name,
            loss,
            on_step=False,
            on_epoch=True,
            batch_size=int(sum(rows)),
            sync_dist=self.trainer.world_size > 1,
        )
        return loss

    def after_optimizer_step(self) -> None:
        """Called right after each optimizer step (an engine that clips inside its step reads the norm here)."""

    def step_scheduler(self) -> float:
        """Step the scheduler once per update; return the learning rate to log (the one the update used).

        An update the mixed-precision scaler skipped (inf/NaN gradients) does not step it, as transformers.
        """
        learning_rate = self.current_learning_rate()
        if steps_per_update(self.hf_lr_scheduler) and not self.step_skipped:
            self.hf_lr_scheduler.step()
        return learning_rate

    def _optimizer_step(self, optimizer: Any) -> bool:
        """``optimizer.step()``; True when the fp16 gradient scaler skipped the update (``skipped_steps.py``)."""
        return step_reporting_skip(self._trainer, optimizer)

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        max_norm = self.settings.max_grad_norm
        limit = max_norm if max_norm is not None and max_norm > 0 else math.inf
        if limit < math.inf:  # clip the true gradients (Lightning leaves a fused optimizer's scaled)
            unscale_for_clipping(self._trainer, optimizer)
        ordered = self._clip_order.parameters(self.model, self._optimized_parameters())
        params = [p for p in ordered if p.grad is not None]
        norm = torch.nn.utils.clip_grad_norm_(params, limit) if params else torch.tensor(0.0)
        self.last_grad_norm = float(norm)
        self.driver.on_pre_optimizer_step()

    # --- helpers ---------------------------------------------------------------------------
    def _optimized_parameters(self) -> list[torch.nn.Parameter]:
        """The parameters the optimizer updates (clipped and zeroed each step).

        Read from the optimizer's param groups, which are flat lists: walking ``model.parameters()``
        costs ~0.5 ms per step on a small model. Layers unfrozen mid-training join the optimizer, so
        they are included from then on.
        """
        optimizer: Any = self.optimizers()
        optimizer = getattr(optimizer, "optimizer", optimizer)
        return [p for group in optimizer.param_groups for p in group["params"]]

    def _as_window(self, batch: Any) -> list[Any]:
        if isinstance(batch, Window):  # AccumulationWindows' own: each item is a micro-batch, as collated
            return list(batch)
        if isinstance(batch, Mapping):
            if self.settings.gradient_accumulation_steps > 1:
                raise ValueError(
                    f"HFModule got a single batch but `args.gradient_accumulation_steps="
                    f"{self.settings.gradient_accumulation_steps}`: wrap the training DataLoader in "
                    "`hf_lightning.adapters.AccumulationWindows(loader, steps)` so each Lightning batch "
                    "holds the micro-batches of one optimizer step"
                )
            return [batch]
        if isinstance(batch, Sequence) and batch and all(isinstance(b, Mapping) for b in batch):
            return list(batch)
        raise TypeError(
            "HFModule expects a batch dict or a list of batch dicts (one gradient-accumulation window), "
            f"got {type(batch).__name__}"
        )

    def count_items(self, window: Sequence[Mapping[str, Any]]) -> torch.Tensor | None:
        """``num_items_in_batch`` of a window (summed over ranks when averaging tokens); probes the loss rule."""
        probe = self.model if self.settings.torch_compile else self.train_model  # compiled: the plain model
        strategy = self.trainer.strategy
        reduce_sum = (
            (lambda count: strategy.reduce(count, reduce_op="sum")) if self.trainer.world_size > 1 else None
        )
        return self.loss_settings.step_items(probe, window, reduce_sum, device=self.device)

    def current_learning_rate(self) -> float:
        """The learning rate of the first parameter group as the scheduler last set it."""
        optimizer: Any = self.optimizers()
        return current_learning_rate(getattr(optimizer, "optimizer", optimizer), self.hf_lr_scheduler)


_SCHEDULER_KEY = "hf_lr_scheduler"  # the HF scheduler's state in a Lightning checkpoint

# For a Lightning user the transfer is Lightning's own (the skip serves hf_lightning.Trainer's driver):
# marked so, Lightning sees no overridden data hook and does not warn at every fit with a DataModule.
HFModule.transfer_batch_to_device.__wrapped__ = L.LightningModule.transfer_batch_to_device  # type: ignore[attr-defined]

speedups.install(HFModule)  # the step's speed tricks (adapters/speedups.py)
