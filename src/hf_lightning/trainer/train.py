"""``Trainer.train()`` and the run-length arithmetic, as transformers computes them.

The loop itself runs on Lightning (``hf_lightning.adapters.fit``); this mixin prepares the state,
the optimizer and scheduler, hands the run over, then writes the final metrics.
"""

from __future__ import annotations

import logging
import math
import os
import sys
from typing import Any

import torch

from hf_lightning.callbacks import ExportableState, TrainerState
from hf_lightning.trainer.base import TrainerBase
from hf_lightning.trainer.loop import TrainLoopDriver
from hf_lightning.trainer_utils import TrainOutput, get_last_checkpoint, has_length, set_seed, speed_metrics
from hf_lightning.trainer_utils_memory import find_executable_batch_size
from hf_lightning.utils.trainer_logs import log_train_header

__all__ = ["TrainerTrainMixin"]

logger = logging.getLogger(__name__)


class TrainerTrainMixin(TrainerBase):
    """``train``, ``set_initial_training_values`` and the bookkeeping around one training run."""

    def train(
        self,
        resume_from_checkpoint: str | bool | None = None,
        trial: Any = None,
        ignore_keys_for_eval: list[str] | None = None,
        **kwargs: Any,
    ) -> TrainOutput:
        """Train the model; resume from a checkpoint folder (or the newest one when True)."""
        if kwargs:
            raise TypeError(f"train() got unexpected keyword arguments: {', '.join(kwargs)}.")
        if resume_from_checkpoint is False:
            resume_from_checkpoint = None
        self._memory_tracker.start()
        self.is_in_train = True
        self._hp_search_setup(trial)  # a trial's hyperparameters (the seed included) apply before model_init
        args = self.args
        if self.model_init is not None and (trial is not None or getattr(self, "_reinit_model", False)):
            set_seed(args.seed)
            self.model = self.model_wrapped = self.call_model_init(trial)
            self._inspect_model()
            self.optimizer, self.lr_scheduler = None, None
        if isinstance(resume_from_checkpoint, bool) and resume_from_checkpoint:
            resume_from_checkpoint = get_last_checkpoint(self._get_output_dir(trial))
            if resume_from_checkpoint is None:
                raise ValueError(f"No valid checkpoint found in output directory ({args.output_dir})")
        if resume_from_checkpoint is not None:
            self._load_from_checkpoint(resume_from_checkpoint)
        self._train_batch_size = args.train_batch_size
        run = dict(
            args=args,
            resume_from_checkpoint=resume_from_checkpoint,
            trial=trial,
            ignore_keys_for_eval=ignore_keys_for_eval,
        )
        if not args.auto_find_batch_size:
            return self._inner_training_loop(**run)
        if resume_from_checkpoint is not None:  # continue with the batch size the checkpointed run found
            path = os.path.join(resume_from_checkpoint, "trainer_state.json")
            found = TrainerState.load_from_json(path).train_batch_size if os.path.isfile(path) else None
            self._train_batch_size = found or self._train_batch_size
        return self._train_with_batch_size_search(run)

    def _train_with_batch_size_search(self, run: dict[str, Any]) -> TrainOutput:
        """``auto_find_batch_size``: after an out-of-memory error, retry with 90% of the batch size.

        transformers retries through accelerate's ``find_executable_batch_size`` (``int(0.9 × size)``,
        the "exponential decay" its documentation names); ours does the same and logs each retry.
        """

        def attempt(batch_size: int) -> TrainOutput:
            self._train_batch_size = batch_size
            return self._inner_training_loop(**run)

        return find_executable_batch_size(attempt, self._train_batch_size, auto_find_batch_size=True)()

    def _hp_search_setup(self, trial: Any) -> None:
        """Apply a trial's hyperparameters (hyperparameter_search overrides this step)."""

    def _inner_training_loop(
        self,
        args: Any,
        resume_from_checkpoint: str | None,
        trial: Any,
        ignore_keys_for_eval: list[str] | None,
    ) -> TrainOutput:
        from hf_lightning.adapters.fit import FitRequest, run_fit

        train_dataloader = self.get_train_dataloader()
        (
            num_train_epochs,
            num_update_steps_per_epoch,
            num_examples,
            num_train_samples,
            total_train_batch_size,
            steps_in_epoch,
            max_steps,
        ) = self.set_initial_training_values(args, train_dataloader)
        epochs_trained, steps_trained = self._init_training_state(
            max_steps, num_update_steps_per_epoch, num_train_epochs, resume_from_checkpoint, trial
        )
        if self._created_lr_scheduler:
            self.lr_scheduler, self._created_lr_scheduler = None, False
        self.create_optimizer_and_scheduler(num_training_steps=max_steps)
        if resume_from_checkpoint is not None:
            self._load_optimizer_and_scheduler(resume_from_checkpoint)
        self._activate_neftune()
        self._apply_runtime_options()
        log_train_header(
            logger,
            self,
            num_train_epochs,
            num_update_steps_per_epoch,
            num_examples,
            total_train_batch_size,
            max_steps,
            epochs_trained,
            steps_trained,
            resume_from_checkpoint,
        )
        self._initial_num_input_tokens_seen = self.state.num_input_tokens_seen
        self._initial_global_step = self.state.global_step
        self._tr_loss = torch.tensor(0.0)
        self._total_loss_scalar = 0.0
        self._globalstep_last_logged = self.state.global_step
        driver = TrainLoopDriver(
            self,
            steps_in_epoch=steps_in_epoch,
            epochs_trained=epochs_trained,
            trial=trial,
            ignore_keys_for_eval=ignore_keys_for_eval,
            steps_trained_in_current_epoch=steps_trained,
        )
        request = FitRequest(
            trainer=self,
            driver=driver,
            dataloader=train_dataloader,
            max_steps=max_steps,
            num_train_epochs=num_train_epochs,
            num_update_steps_per_epoch=num_update_steps_per_epoch,
            initial_global_step=self.state.global_step,
            epochs_trained=epochs_trained,
            skip_windows=steps_trained // max(args.gradient_accumulation_steps, 1),
        )
        try:
            run_fit(request)
        finally:
            self.accelerator.bind(None)
        return self._finalize_training(trial, num_train_samples, driver.start_time)

    def _init_training_state(
        self,
        max_steps: int,
        num_update_steps_per_epoch: int,
        num_train_epochs: int,
        resume_from_checkpoint: str | None,
        trial: Any,
    ) -> tuple[int, int]:
        """A fresh ``TrainerState`` (or the checkpoint's); returns (epochs_trained, micro-batches to skip)."""
        self.state = TrainerState(
            stateful_callbacks=[
                cb
                for cb in self.callback_handler.callbacks + [self.control]
                if isinstance(cb, ExportableState)
            ]
        )
        self.state.is_hyper_param_search = trial is not None
        self.state.train_batch_size = self._train_batch_size
        self.state.compute_steps(self.args, max_steps)
        epochs_trained, steps_trained = 0, 0
        if resume_from_checkpoint is not None:
            path = os.path.join(resume_from_checkpoint, "trainer_state.json")
            if os.path.isfile(path):
                self.state = TrainerState.load_from_json(path)
                if self.state.best_model_checkpoint and not os.path.isdir(self.state.best_model_checkpoint):
                    logger.warning(
                        f"The best checkpoint {self.state.best_model_checkpoint} recorded in the resumed state "
                        "does not exist anymore. Ignoring it for this run."
                    )
                    self.state.best_model_checkpoint = None
                self._load_callback_state()
                epochs_trained = int(self.state.global_step // num_update_steps_per_epoch)
                if not self.args.ignore_data_skip:
                    steps_trained = (
                        self.state.global_step % num_update_steps_per_epoch
                    ) * self.args.gradient_accumulation_steps
        self.state.init_training_references(self, max_steps, num_train_epochs, trial)
        self.state.is_local_process_zero = self.is_local_process_zero()
        self.state.is_world_process_zero = self.is_world_process_zero()
        return epochs_trained, steps_trained

    def set_initial_training_values(
        self, args: Any, dataloader: Any
    ) -> tuple[int, int, int, int, int, int, int]:
        """(num_train_epochs, num_update_steps_per_epoch, num_examples, num_train_samples,
        total_train_batch_size, steps_in_epoch, max_steps), as transformers computes them."""
        max_steps = args.max_steps
        epoch_based = max_steps < 0
        len_dataloader = len(dataloader) if has_length(dataloader) else None
        total_train_batch_size = self.get_total_train_batch_size(args)
        ga = args.gradient_accumulation_steps
        num_update_steps_per_epoch = 0
        if len_dataloader is not None:
            num_update_steps_per_epoch = max(len_dataloader // ga + int(len_dataloader % ga > 0), 1)
            if epoch_based:
                max_steps = math.ceil(args.num_train_epochs * num_update_steps_per_epoch)
        if len_dataloader:
            num_examples = self.num_examples(dataloader)
            if args.max_steps > 0:
                num_train_epochs = max_steps // num_update_steps_per_epoch + int(
                    max_steps % num_update_steps_per_epoch > 0
                )
                num_train_samples = max_steps * total_train_batch_size
            else:
                num_train_epochs = math.ceil(args.num_train_epochs)
                num_train_samples = num_examples * args.num_train_epochs
        elif args.max_steps > 0:
            num_train_epochs = sys.maxsize
            num_update_steps_per_epoch = max_steps
            num_examples = total_train_batch_size * args.max_steps
            num_train_samples = args.max_steps * total_train_batch_size
        else:
            raise ValueError(
                "`TrainingArguments(max_steps=...)` must be set to a positive value when the "
                f"training dataloader has no length, got {args.max_steps}"
            )
        steps_in_epoch = len_dataloader if len_dataloader is not None else max_steps * ga
        return (
            num_train_epochs,
            num_update_steps_per_epoch,
            num_examples,
            num_train_samples,
            total_train_batch_size,
            steps_in_epoch,
            max_steps,
        )

    def get_total_train_batch_size(self, args: Any) -> int:
        """per-device batch × gradient accumulation × data-parallel world size."""
        return self._train_batch_size * args.gradient_accumulation_steps * max(args.world_size, 1)

    def num_examples(self, dataloader: Any) -> int:
        """The number of samples behind ``dataloader`` (its dataset's length, else batches × batch size)."""
        try:
            dataset = dataloader.dataset
            return len(dataset)
        except (NameError, AttributeError, TypeError):
            return len(dataloader) * self.args.per_device_train_batch_size

    def floating_point_ops(self, inputs: dict[str, Any]) -> int:
        """FLOPs of one forward+backward, from the model's own ``floating_point_ops`` when it has one."""
        own = getattr(self.model, "floating_point_ops", None)
        if callable(own):
            return own(inputs)
        main_input = getattr(self.model, "main_input_name", "input_ids")
        if main_input in inputs and hasattr(self.model, "num_parameters"):
            cached = getattr(self, "_non_embedding_params", None)
            if cached is None or cached[0] is not self.model:  # counted once per model, not per micro-batch
                cached = self._non_embedding_params = (
                    self.model,
                    self.model.num_parameters(exclude_embeddings=True),
                )
            return 6 * inputs[main_input].numel() * cached[1]
        return 0

    def store_flos(self) -> None:
        """Add the FLOPs counted since the last call to ``state.total_flos``."""
        flos = self.current_flos
        if self.accelerator.num_processes > 1:
            flos = float(self.accelerator.reduce(torch.tensor(float(flos), device=self.accelerator.device)))
        self.state.total_flos += flos
        self.current_flos = 0

    def _track_num_input_tokens(self, inputs: dict[str, Any]) -> None:
        mode = self.args.include_num_input_tokens_seen
        if mode in (False, "no", None):
            return
        name = getattr(self.model, "main_input_name", "input_ids")
        if mode == "non_padding" and "attention_mask" in inputs:
            count = inputs["attention_mask"].sum()
        elif name in inputs:
            count = torch.tensor(inputs[name].numel())
        else:
            logger.warning("Tried to track the number of tokens seen, but the batch has no %r.", name)
            return
        count = self.accelerator.reduce(count.to(self.accelerator.device), "sum")
        self.state.num_input_tokens_seen += int(count)

    def _finalize_training(self, trial: Any, num_train_samples: int, start_time: float) -> TrainOutput:
        logger.info(
            "\n\nTraining completed. Do not forget to share your model on huggingface.co/models =)\n\n"
        )
        self._total_loss_scalar += self._tr_loss.item()
        steps_run = self.state.global_step - self._initial_global_step
        train_loss = self._total_loss_scalar / max(steps_run, 0.001)
        metrics = speed_metrics(
            "train",
            start_time,
            num_samples=num_train_samples * steps_run / max(self.state.max_steps, 1),
            num_steps=steps_run,
        )
        self.store_flos()
        metrics["total_flos"] = self.state.total_flos
        metrics["train_loss"] = train_loss
        self._memory_tracker.stop_and_update_metrics(metrics)
        self.log(metrics)
        self._after_training_checkpoints(trial)
        self.control = self.callback_handler.on_train_end(self.args, self.state, self.control)
        self._deactivate_neftune()
        self.is_in_train = False
        return TrainOutput(self.state.global_step, train_loss, metrics)

    def end(self) -> None:
        """Release what training held (loggers are finalised after each fit)."""
        self.accelerator.bind(None)

    def _get_output_dir(self, trial: Any) -> str:
        run_name = getattr(self, "_trial_run_name", None)
        return (
            os.path.join(self.args.output_dir, run_name)
            if trial is not None and run_name
            else self.args.output_dir
        )

    def _apply_runtime_options(self) -> None:
        """``activation_checkpointing`` on the model and ``tf32`` on CUDA matmuls, as transformers."""
        args = self.args
        if args.activation_checkpointing:
            kwargs = dict(args.activation_checkpointing_kwargs or {})
            every_n_layers, offload = kwargs.pop("every_n_layers", 1), kwargs.pop("offload", False)
            enable = getattr(self.model, "activation_checkpointing_enable", None)
            if callable(enable):
                enable(
                    activation_checkpointing_kwargs=kwargs or None,
                    every_n_layers=every_n_layers,
                    offload=offload,
                )
            elif callable(getattr(self.model, "gradient_checkpointing_enable", None)):
                self.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs or None)
            else:
                raise ValueError(
                    "`TrainingArguments(activation_checkpointing=True)` needs a model with "
                    f"`activation_checkpointing_enable()` (a PreTrainedModel); {type(self.model).__name__} has none"
                )
        if args.tf32 is not None and torch.cuda.is_available():
            torch.backends.cuda.matmul.allow_tf32 = bool(args.tf32)
            torch.backends.cudnn.allow_tf32 = bool(args.tf32)

    # --- NEFTune ---------------------------------------------------------------------------
    def _activate_neftune(self) -> None:
        if self.neftune_noise_alpha is None:
            return
        from hf_lightning.neftune import activate_neftune

        self._neftune_handle = activate_neftune(self.model, self.neftune_noise_alpha)

    def _deactivate_neftune(self) -> None:
        handle = getattr(self, "_neftune_handle", None)
        if handle is not None:
            handle.remove()
            self._neftune_handle = None
