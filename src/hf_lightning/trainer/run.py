"""``TrainingRun``: the bookkeeping of one ``train()`` call, and the log / evaluate / save decision.

The loop driver (``hf_lightning.adapters.callbacks.loop_driver``) moves a run forward through the
public methods below; everything the user may override is called through the Trainer::

    begin(trial, ignore_keys_for_eval)     # Trainer._inner_training_loop, before the fit
    start()                                # on_train_begin: the clock starts
    train_micro_batch(model, inputs, n)    # each micro-batch: Trainer.training_step, then add_micro_batch
    log_save_evaluate(grad_norm, epoch, lr)
        -> Trainer._maybe_log_save_evaluate(tr_loss, ...)   # overridable
            -> maybe_log_save_evaluate: Trainer.log / _evaluate / _determine_best_metric / _save_checkpoint
    train_loss()                           # after the fit: the mean loss per optimizer step of this call

It also owns transformers' run attributes (``state``, ``control``, ``_train_batch_size``, ``current_flos``,
``is_in_train``, ``current_gradient_accumulation_steps``, ``_trial``, ``model_wrapped``, ``deepspeed``,
``_memory_tracker``): the
Trainer reads and assigns them through views (``delegation.held_by``), and the parts write them here. Each
``train()`` makes a fresh ``TrainingRun`` (``successor``) that starts from the attributes' current values.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any, cast

import torch

from hf_lightning.callbacks import TrainerControl, TrainerState
from hf_lightning.callbacks.nonfinite import NonFiniteRecord, observe_loss, observe_step
from hf_lightning.train_data_checks import no_batch_error
from hf_lightning.trainer_utils import speed_metrics
from hf_lightning.utils.logging import get_logger

if TYPE_CHECKING:
    from torch import nn

    from hf_lightning.trainer.trainer import Trainer

__all__ = ["RUN_ATTRIBUTES", "TrainingRun"]


def _input_tokens(inputs: dict[str, Any], name: str, mode: str | bool, pad_token_id: int | None) -> Any:
    """The micro-batch's tokens: all, or with "non_padding" the attention mask's ones (else the ids that are
    not the processing class's ``pad_token_id``; else all, with a warning), as transformers counts them."""
    if mode != "non_padding":
        return inputs[name].numel()
    if "attention_mask" in inputs:
        return inputs["attention_mask"].sum()
    if pad_token_id is not None:
        return (inputs[name] != pad_token_id).sum()
    logger.warning(
        "Could not determine method to count non-padding tokens, falling back to counting all tokens."
    )
    return inputs[name].numel()


logger = get_logger(__name__)

RUN_ATTRIBUTES = {
    "state": "state",
    "control": "control",
    "_train_batch_size": "train_batch_size",
    "current_flos": "current_flos",
    "is_in_train": "is_in_train",
    "current_gradient_accumulation_steps": "current_gradient_accumulation_steps",
    "_trial": "trial",
    "model_wrapped": "model_wrapped",
    "deepspeed": "deepspeed",
    "_memory_tracker": "memory_tracker",
    "_globalstep_last_logged": "globalstep_last_logged",
    "_total_loss_scalar": "total_loss_scalar",
}
"""transformers' Trainer attribute -> the ``TrainingRun`` attribute that holds it."""


class TrainingRun:
    """The training-loss accumulator, logged step, initial step and token count, clock of one ``train()``."""

    def __init__(self, trainer: Trainer, previous: TrainingRun | None = None) -> None:
        self.trainer = trainer
        self.trial: Any = None
        """The search trial of this run (transformers' ``trainer._trial``)."""
        self.state = TrainerState()
        self.control = TrainerControl()
        self.train_batch_size: int = trainer.args.train_batch_size
        """The per-device batch size of this run (transformers' ``trainer._train_batch_size``)."""
        self.current_flos: float = 0
        self.is_in_train = False
        self.current_gradient_accumulation_steps = 1
        self.model_wrapped: Any = None
        self.deepspeed: Any = None
        """The DeepSpeed engine once a fit under DeepSpeed wraps the model (None before)."""
        self.memory_tracker: Any = None
        """transformers' ``trainer._memory_tracker`` (made by ``Trainer.__init__``, kept from run to run)."""
        self.ignore_keys_for_eval: list[str] | None = None
        self.tr_loss = torch.tensor(0.0)
        """The training loss summed since the last log."""
        self.total_loss_scalar = 0.0
        self.globalstep_last_logged = 0
        self.initial_global_step = 0
        self.initial_num_input_tokens_seen = 0
        self.start_time = time.time()
        self.started = False
        """Whether a training loop ever started on this Trainer (the engine prepared the model)."""
        self._non_embedding_params: tuple[nn.Module, int] | None = None
        self.nonfinite = NonFiniteRecord()
        """The non-finite losses and weights reported in this run (``callbacks/nonfinite.py``)."""
        self.window_items: Any = None
        """``num_items_in_batch`` of the current step (set by the loop driver; None: the loss counts none)."""
        self.steps_without_targets: list[int] = []
        """The steps of this run whose labels were all ignored (-100)."""
        self.number = 0
        """Which training loop of this Trainer is the current one (0: none yet). Each loop (each ``train()``,
        each batch size ``auto_find_batch_size`` tries) counts one as it makes its ``TrainerState``; the
        parts tell "this run" from an earlier one by it (``checkpoints.last_checkpoint``)."""
        if previous is not None:  # transformers' attributes live on the Trainer: a new run starts from them
            for name in (*RUN_ATTRIBUTES.values(), "started", "number", "_non_embedding_params"):
                setattr(self, name, getattr(previous, name))

    def successor(self) -> TrainingRun:
        """The run object of the next ``train()``: fresh counters, transformers' attributes carried over."""
        return type(self)(self.trainer, previous=self)

    # --- the run's life ------------------------------------------------------------------------
    def open(self) -> int:
        """A training loop starts (its fresh ``TrainerState`` is made): the next run number."""
        self.number += 1
        return self.number

    def begin(self, trial: Any, ignore_keys_for_eval: list[str] | None) -> None:
        """Reset the counters for a training loop starting at ``state.global_step``."""
        state = self.trainer.state
        self.trial, self.ignore_keys_for_eval = trial, ignore_keys_for_eval
        self.initial_num_input_tokens_seen = state.num_input_tokens_seen
        self.initial_global_step = state.global_step
        self.tr_loss = torch.tensor(0.0)
        self.total_loss_scalar = 0.0
        self.globalstep_last_logged = state.global_step
        self.start_time = time.time()
        self.nonfinite = NonFiniteRecord()
        self.window_items, self.steps_without_targets = None, []

    def start(self) -> None:
        """The engine's loop begins (``on_train_begin``): start the clock."""
        self.start_time = time.time()
        self.started = True

    def evaluate_on_start(self) -> None:
        """With ``eval_on_start``: evaluate before the first step (the scheduler is not stepped)."""
        if self.trainer.plan.schedule.eval_on_start:
            self.trainer._evaluate(self.trial, self.ignore_keys_for_eval, skip_scheduler=True)

    def on_resume_point(self, where: str, skipping: bool = False) -> None:
        """At each epoch begin ("epoch") and step begin ("step"): restore a resumed run's RNG and scaler."""
        self.trainer.checkpoints.on_resume_point(where, skipping=skipping)

    def train_micro_batch(
        self, model: nn.Module, inputs: dict[str, Any], num_items_in_batch: Any
    ) -> torch.Tensor:
        """One micro-batch: the overridable ``Trainer.training_step``, then its loss, FLOPs and tokens added to
        the run. The engine's one call into the facade for a micro-batch (the way back is the loss)."""
        loss = self.trainer.training_step(model, inputs, num_items_in_batch)
        self.add_micro_batch(inputs, loss)
        return loss

    def add_micro_batch(self, inputs: dict[str, Any], loss: torch.Tensor) -> None:
        """Add one micro-batch's loss (NaN/inf replaced by the running mean), FLOPs and input tokens."""
        t = self.trainer
        value = float(loss.detach().float().sum())  # one host read for both uses below
        if not ((value == 0.0 or not math.isfinite(value)) and self._without_targets(value)):
            observe_loss(self.nonfinite, t, value)  # the first non-finite loss: warn; StopOnNonFinite raises
        if t.plan.module.logging_nan_inf_filter and not math.isfinite(value):  # NaN or ±inf
            self.tr_loss += self.tr_loss / (1 + t.state.global_step - self.globalstep_last_logged)
        else:
            self.tr_loss += loss.to(self.tr_loss.device)
        self.current_flos += float(t.floating_point_ops(inputs))
        self.track_input_tokens(inputs)

    def _without_targets(self, loss: float) -> bool:
        """Whether the current step has no target (every label -100); the run's first such step is warned.
        transformers trains on such batches without a word (loss NaN or 0, hidden by the NaN filter)."""
        items = self.window_items
        if items is None or int(items) != 0:
            return False
        step = self.trainer.state.global_step + 1
        if step not in self.steps_without_targets:
            if not self.steps_without_targets:
                logger.warning(
                    "Step %d: every label of this step's batch is ignored (-100), so there is no target to learn "
                    "from (its loss is %s). Later such steps are counted, not warned.",
                    step,
                    loss,
                )
            self.steps_without_targets.append(step)
        return True

    def report_ignored_labels(self) -> None:
        """After the fit: warn when the steps without targets were not an exception but every step."""
        steps_run = self.trainer.state.global_step - self.initial_global_step
        if steps_run > 0 and len(self.steps_without_targets) >= steps_run:
            logger.warning(
                "Every one of the %d training steps of this run had only ignored labels (-100): the model "
                "learned nothing. Check how the labels of `train_dataset` are built (the -100 masking, the "
                "data collator).",
                steps_run,
            )
        elif self.steps_without_targets:
            logger.warning(
                "%d of the %d training steps of this run had only ignored labels (-100) (first: step %d).",
                len(self.steps_without_targets),
                steps_run,
                self.steps_without_targets[0],
            )

    def after_optimizer_step(self, grad_norm: float | None) -> None:
        """After each optimizer step: report the run's first non-finite weight (``callbacks/nonfinite.py``)."""
        observe_step(self.nonfinite, self.trainer, grad_norm)

    def log_save_evaluate(self, grad_norm: float | None, epoch: float, learning_rate: float | None) -> None:
        """After a step or an epoch: the Trainer's ``_maybe_log_save_evaluate`` with this run's values."""
        t = self.trainer
        t._maybe_log_save_evaluate(
            self.tr_loss,
            grad_norm,
            t.model,
            self.trial,
            epoch,
            self.ignore_keys_for_eval,
            self.start_time,
            learning_rate=learning_rate,
        )

    def empty_epoch(self) -> None:
        """An epoch yielded no batch (a stream that ended): before this run's first step that is an error
        naming the dataset (transformers: accelerate's "Batch does not contain any data"); later,
        transformers' warning, and training stops."""
        t = self.trainer
        if t.state.global_step == self.initial_global_step:
            raise no_batch_error(t.train_dataset, t.args)
        logger.warning(
            "There seems not to be a single sample in your epoch_iterator, stopping training at step"
            f" {t.state.global_step}! This is expected if you're using an IterableDataset and set"
            f" num_steps ({t.state.max_steps}) higher than the number of available samples."
        )

    def train_loss(self) -> tuple[float, int]:
        """(mean training loss per optimizer step of this call, steps run), once the fit ended."""
        self.total_loss_scalar += self.tr_loss.item()
        steps_run = self.trainer.state.global_step - self.initial_global_step
        return self.total_loss_scalar / max(steps_run, 0.001), steps_run

    # --- log / evaluate / save ------------------------------------------------------------------
    def maybe_log_save_evaluate(
        self,
        tr_loss: torch.Tensor,
        grad_norm: Any,
        model: Any,
        trial: Any,
        epoch: float,
        ignore_keys_for_eval: list[str] | None,
        start_time: float,
        learning_rate: float | None = None,
    ) -> None:
        """``Trainer._maybe_log_save_evaluate``: log when ``control`` says so, then evaluate, then save."""
        t = self.trainer
        if t.control.should_log and t.state.global_step > self.globalstep_last_logged:
            self._log_training_loss(tr_loss, grad_norm, start_time, learning_rate)
        if t.control.should_evaluate:
            metrics = t._evaluate(trial, ignore_keys_for_eval)
            is_new_best = t._determine_best_metric(metrics=metrics, trial=trial)
            if t.plan.schedule.save_strategy == "best":
                self.control.should_save = is_new_best
        if t.control.should_save:
            t._save_checkpoint(model, trial)
            self.control = t.callback_handler.on_save(t.args, t.state, t.control)

    def _log_training_loss(
        self, tr_loss: torch.Tensor, grad_norm: Any, start_time: float, learning_rate: float | None
    ) -> None:
        t = self.trainer
        tr_loss_scalar = t.accelerator.gather(tr_loss.detach()).mean().item()
        tr_loss -= tr_loss
        logs: dict[str, float] = {
            "loss": tr_loss_scalar / (t.state.global_step - self.globalstep_last_logged)
        }
        if grad_norm is not None:
            logs["grad_norm"] = grad_norm.item() if isinstance(grad_norm, torch.Tensor) else grad_norm
        logs["learning_rate"] = learning_rate if learning_rate is not None else t._get_learning_rate()
        self.total_loss_scalar += tr_loss_scalar
        self.globalstep_last_logged = t.state.global_step
        t.store_flos()
        t.log(logs, start_time)

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """Record ``logs`` in ``state.log_history`` (with epoch, step and the tokens seen) and send them to
        the callbacks (``on_log``)."""
        t = self.trainer
        if t.state.epoch is not None:
            logs["epoch"] = t.state.epoch
        if t.plan.module.include_num_input_tokens_seen != "no":
            logs["num_input_tokens_seen"] = t.state.num_input_tokens_seen
            if start_time is not None:
                seen = t.state.num_input_tokens_seen - self.initial_num_input_tokens_seen
                logs.update(speed_metrics("train", start_time, num_tokens=seen))
        output = {**logs, "step": t.state.global_step}
        t.state.log_history.append(output)
        self.control = t.callback_handler.on_log(t.args, t.state, t.control, logs)

    # --- counters ----------------------------------------------------------------------------------
    def floating_point_ops(self, inputs: dict[str, Any]) -> int:
        """``Trainer.floating_point_ops``: the model's own count, else 6 × tokens × non-embedding parameters."""
        model = cast(Any, self.trainer.model)  # an HF model counts its own FLOPs and parameters
        own = getattr(model, "floating_point_ops", None)
        if callable(own):
            return own(inputs)
        main_input = getattr(model, "main_input_name", "input_ids")
        if main_input in inputs and hasattr(model, "num_parameters"):
            cached = self._non_embedding_params
            if cached is None or cached[0] is not model:  # counted once per model, not per micro-batch
                cached = self._non_embedding_params = (model, model.num_parameters(exclude_embeddings=True))
            return 6 * inputs[main_input].numel() * cached[1]
        return 0

    def store_flos(self) -> None:
        """``Trainer.store_flos``: add the FLOPs counted since the last call to ``state.total_flos``."""
        t = self.trainer
        flos = t.current_flos
        if t.accelerator.num_processes > 1:
            flos = float(t.accelerator.reduce(torch.tensor(float(flos), device=t.accelerator.device)))
        self.state.total_flos += flos
        self.current_flos = 0

    def track_input_tokens(self, inputs: dict[str, Any]) -> None:
        """``include_num_input_tokens_seen``: add this micro-batch's tokens (all ranks) to the state."""
        t = self.trainer
        mode = t.plan.module.include_num_input_tokens_seen
        if mode == "no":
            return
        name = getattr(t.model, "main_input_name", "input_ids")
        if name not in inputs:
            logger.warning(
                "Tried to track the number of tokens seen, however the current model is not configured "
                "properly to know what item is the input. To fix this, add a `main_input_name` attribute to "
                "the model class you are using."
            )
            return
        count = torch.as_tensor(
            _input_tokens(inputs, name, mode, getattr(t.processing_class, "pad_token_id", None))
        )
        count = t.accelerator.reduce(count.to(t.accelerator.device), "sum")
        self.state.num_input_tokens_seen += int(count)
