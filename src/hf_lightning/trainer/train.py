"""``TrainLauncher`` (``trainer.launcher``): ``train()`` and the run-length arithmetic, as transformers
computes them.

The loop itself runs on Lightning (``hf_lightning.adapters.fit``); this part prepares the state, the
optimizer and scheduler (through the Trainer's overridable methods), hands the run over with a
``TrainLoopDriver``, then writes the final metrics::

    Trainer.train -> launch: hyperparameters of a trial, model_init, resume weights
        -> Trainer._inner_training_loop -> inner_loop:
            get_train_dataloader, set_initial_training_values, init_training_state,
            create_optimizer_and_scheduler, _load_optimizer_and_scheduler, NEFTune, run.begin
            run_fit(FitRequest(trainer, TrainLoopDriver(trainer), ...))   # the engine
            finalize: train metrics, Trainer.log, best model, on_train_end
"""

from __future__ import annotations

import math
import os
import sys
from typing import TYPE_CHECKING, Any, cast

import torch

from hf_lightning.activation_checkpointing import enable_activation_checkpointing
from hf_lightning.args.translate import module_settings, run_length
from hf_lightning.callbacks import ExportableState, TrainerState
from hf_lightning.checkpoint.lock import claim_output_dir
from hf_lightning.checkpoint.resume_args import compare_trainer_and_checkpoint_args, report_resume_changes
from hf_lightning.debug_utils import debug_for_training
from hf_lightning.kernels import apply_liger_kernel
from hf_lightning.special_tokens import align_special_tokens
from hf_lightning.train_data_checks import check_train_dataloader
from hf_lightning.trainer.engine_door import ENGINE
from hf_lightning.trainer.surface import check_parts
from hf_lightning.trainer_jit_checkpoint import release_sigterm
from hf_lightning.trainer_utils import (
    TrainOutput,
    enable_full_determinism,
    get_last_checkpoint,
    has_length,
    set_seed,
    speed_metrics,
)
from hf_lightning.trainer_utils_memory import find_executable_batch_size
from hf_lightning.utils.logging import get_logger
from hf_lightning.utils.trainer_logs import log_train_header

if TYPE_CHECKING:
    from torch.utils.hooks import RemovableHandle

    from hf_lightning.trainer.trainer import Trainer

__all__ = ["TrainLauncher"]

logger = get_logger(__name__)


class TrainLauncher:
    """Prepares each ``train()`` call, hands it to the engine and finishes it; owns the NEFTune hook."""

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer
        self.neftune_handle: RemovableHandle | None = None

    def launch(
        self, resume_from_checkpoint: str | bool | None, trial: Any, ignore_keys_for_eval: list[str] | None
    ) -> TrainOutput:
        """``Trainer.train``: apply the trial, build the model, load the weights, run (with batch-size search)."""
        t, current = self.trainer, self.trainer.run
        check_parts(t)  # a subclass that reused a part's attribute name is told so, by name
        if resume_from_checkpoint is False:
            resume_from_checkpoint = None
        t._memory_tracker.start("train")
        current.is_in_train = True
        t._hp_search_setup(trial)  # a trial's hyperparameters (the seed included) apply before model_init
        args = t.args
        main, saver = args.process_index == 0 and args.should_save, args.should_save
        # one job per output_dir (a second one is refused by name), and what a killed save left is removed
        with claim_output_dir(t._get_output_dir(trial), lock=main, clean=saver):  # checkpoint/lock.py
            return self._launch(resume_from_checkpoint, trial, ignore_keys_for_eval)

    def _launch(
        self, resume_from_checkpoint: str | bool | None, trial: Any, ignore_keys_for_eval: list[str] | None
    ) -> TrainOutput:
        t, current = self.trainer, self.trainer.run
        args, runtime = t.args, t.plan.runtime
        if resume_from_checkpoint is False:
            resume_from_checkpoint = None
        if t.model_init is not None:  # a fresh model at every train(), seeded as transformers seeds it
            enable_full_determinism(runtime.seed) if runtime.full_determinism else set_seed(runtime.seed)
            t.model = current.model_wrapped = t.call_model_init(trial)
            t._inspect_model()
            t.optimizer, t.lr_scheduler = None, None
        if runtime.use_liger_kernel:  # before any step: without a CUDA GPU this raises, naming the argument
            apply_liger_kernel(t.model, runtime.liger_kernel_config)
        if t.processing_class is not None:  # the tokenizer's PAD/BOS/EOS ids into the model's configs (its
            align_special_tokens(t.model, t.processing_class)  # warning before the data and the checkpoint's)
        debug_for_training(
            args.debug, t.model, args.n_gpu
        )  # debug="underflow_overflow": hooks stay on the model
        if isinstance(resume_from_checkpoint, bool) and resume_from_checkpoint:
            resume_from_checkpoint = get_last_checkpoint(t._get_output_dir(trial))
            if resume_from_checkpoint is None:
                raise ValueError(
                    f"No valid checkpoint found in output directory ({t.plan.checkpoint.output_dir})"
                )
            t.checkpoints.verified(resume_from_checkpoint)  # its files were just verified
        if resume_from_checkpoint is not None:
            t._load_from_checkpoint(resume_from_checkpoint)
            # the RNG (and scaler) restore follows the resumed run, whoever loaded the weights (a subclass's
            # _load_from_checkpoint, as sentence-transformers' is), as in transformers
            t.checkpoints.resume_at(os.fspath(resume_from_checkpoint))
        current.train_batch_size = args.train_batch_size
        run = dict(
            args=args,
            resume_from_checkpoint=resume_from_checkpoint,
            trial=trial,
            ignore_keys_for_eval=ignore_keys_for_eval,
        )
        if not t.plan.length.auto_find_batch_size:
            return t._inner_training_loop(batch_size=current.train_batch_size, **run)
        if resume_from_checkpoint is not None:  # continue with the batch size the checkpointed run found
            path = os.path.join(resume_from_checkpoint, "trainer_state.json")
            found = TrainerState.load_from_json(path).train_batch_size if os.path.isfile(path) else None
            current.train_batch_size = found or t._train_batch_size
        return self._train_with_batch_size_search(run)

    def _train_with_batch_size_search(self, run: dict[str, Any]) -> TrainOutput:
        """``auto_find_batch_size``: after an out-of-memory error, retry with 90% of the batch size.

        transformers retries through accelerate's ``find_executable_batch_size`` (``int(0.9 × size)``,
        the "exponential decay" its documentation names); ours does the same and logs each retry.
        """
        t, current = self.trainer, self.trainer.run

        def attempt(batch_size: int) -> TrainOutput:
            current.train_batch_size = batch_size
            return t._inner_training_loop(batch_size=batch_size, **run)

        return find_executable_batch_size(attempt, t._train_batch_size, auto_find_batch_size=True)()

    def inner_loop(
        self,
        batch_size: int | None = None,
        args: Any = None,
        resume_from_checkpoint: str | None = None,
        trial: Any = None,
        ignore_keys_for_eval: list[str] | None = None,
    ) -> TrainOutput:
        """``Trainer._inner_training_loop`` (transformers' parameters): prepare this run, fit it, finish it."""
        t, current = self.trainer, self.trainer.run
        if batch_size is not None and t.plan.length.auto_find_batch_size:  # transformers reads it only then
            current.train_batch_size = batch_size
        args = t.args if args is None else args
        train_dataloader = t.get_train_dataloader()
        t.callback_handler.train_dataloader = train_dataloader  # passed to every callback event
        check_train_dataloader(
            train_dataloader, t.train_dataset, args
        )  # empty data: an error before any step
        epochs, steps_per_epoch, num_examples, num_train_samples, total_batch, steps_in_epoch, max_steps = (
            t.set_initial_training_values(args, train_dataloader)
        )
        epochs_trained, steps_trained = self.init_training_state(
            max_steps, steps_per_epoch, epochs, resume_from_checkpoint, trial
        )
        t.optim.forget_created_scheduler()
        t.optim.forget_created_optimizer()
        t.create_optimizer_and_scheduler(num_training_steps=max_steps)
        t._load_optimizer_and_scheduler(
            resume_from_checkpoint
        )  # None: nothing to load (a stale request dropped)
        t._activate_neftune()
        self.apply_runtime_options()
        log_train_header(
            logger,
            t,
            epochs,
            steps_per_epoch,
            num_examples,
            total_batch,
            max_steps,
            epochs_trained,
            steps_trained,
            resume_from_checkpoint,
        )
        t.run.begin(trial, ignore_keys_for_eval)
        self._fit(
            args,
            train_dataloader,
            max_steps=max_steps,
            epochs=epochs,
            steps_per_epoch=steps_per_epoch,
            steps_in_epoch=steps_in_epoch,
            epochs_trained=epochs_trained,
            steps_trained=steps_trained,
        )
        return self._finalize(trial, num_train_samples)

    def _fit(
        self,
        args: Any,
        train_dataloader: Any,
        *,
        max_steps: int,
        epochs: int,
        steps_per_epoch: int,
        steps_in_epoch: int,
        epochs_trained: int,
        steps_trained: int,
    ) -> None:
        """Hand the prepared run to Lightning: the loop driver (HF events) and one ``run_fit``."""
        t = self.trainer
        driver = ENGINE.TrainLoopDriver(
            t,
            steps_in_epoch=steps_in_epoch,
            epochs_trained=epochs_trained,
            steps_trained_in_current_epoch=steps_trained,
        )
        request = ENGINE.FitRequest(
            trainer=t,
            driver=driver,
            dataloader=train_dataloader,
            max_steps=max_steps,
            num_train_epochs=epochs,
            num_update_steps_per_epoch=steps_per_epoch,
            initial_global_step=t.state.global_step,
            epochs_trained=epochs_trained,
            skip_windows=steps_trained // max(t.plan.module.gradient_accumulation_steps, 1),
        )
        try:
            ENGINE.run_fit(request)
        finally:
            t.accelerator.bind(None)
            release_sigterm(
                t.callback_handler.callbacks
            )  # enable_jit_checkpoint: SIGTERM is the process's again

    def init_training_state(
        self,
        max_steps: int,
        num_update_steps_per_epoch: int,
        num_train_epochs: int,
        resume_from_checkpoint: str | None,
        trial: Any,
    ) -> tuple[int, int]:
        """A fresh ``TrainerState`` (or the checkpoint's); returns (epochs_trained, micro-batches to skip)."""
        t, run = self.trainer, self.trainer.run
        run.open()  # a new run number: the parts tell this run from an earlier one by it
        run.state = TrainerState(
            stateful_callbacks=[
                cb for cb in t.callback_handler.callbacks + [t.control] if isinstance(cb, ExportableState)
            ]
        )
        run.state.is_hyper_param_search = trial is not None
        run.state.train_batch_size = t._train_batch_size
        t.state.compute_steps(t.args, max_steps)
        epochs_trained, steps_trained = 0, 0
        if resume_from_checkpoint is not None:
            path = os.path.join(resume_from_checkpoint, "trainer_state.json")
            if os.path.isfile(path):
                run.state = TrainerState.load_from_json(path)
                compare_trainer_and_checkpoint_args(t.args, t.state)  # warn about changed step intervals
                # ... and (beyond transformers) a length already reached, another schedule or process layout
                report_resume_changes(t.args, t.state, resume_from_checkpoint, max_steps, t._train_batch_size)
                if t.state.best_model_checkpoint and not os.path.isdir(t.state.best_model_checkpoint):
                    logger.warning(
                        f"The best checkpoint {t.state.best_model_checkpoint} recorded in the resumed state "
                        "does not exist anymore. Ignoring it for this run."
                    )
                    run.state.best_model_checkpoint = None
                t._load_callback_state()
                epochs_trained = int(t.state.global_step // num_update_steps_per_epoch)
                if not t.plan.length.ignore_data_skip:
                    steps_trained = (
                        t.state.global_step % num_update_steps_per_epoch
                    ) * t.plan.module.gradient_accumulation_steps
        t.state.init_training_references(t, max_steps, num_train_epochs, trial)
        run.state.is_local_process_zero = t.is_local_process_zero()
        run.state.is_world_process_zero = t.is_world_process_zero()
        return epochs_trained, steps_trained

    def initial_training_values(self, args: Any, dataloader: Any) -> tuple[int, int, int, int, int, int, int]:
        """``Trainer.set_initial_training_values``: (num_train_epochs, num_update_steps_per_epoch,
        num_examples, num_train_samples, total_train_batch_size, steps_in_epoch, max_steps)."""
        t = self.trainer
        length = run_length(args)  # of the arguments given, as transformers' set_initial_training_values
        max_steps = length.max_steps
        len_dataloader = len(dataloader) if has_length(dataloader) else None
        total_train_batch_size = t.get_total_train_batch_size(args)
        ga = module_settings(args).gradient_accumulation_steps
        num_update_steps_per_epoch = 0
        if len_dataloader is not None:
            num_update_steps_per_epoch = max(len_dataloader // ga + int(len_dataloader % ga > 0), 1)
            if max_steps < 0:  # epoch-based
                max_steps = math.ceil(length.num_train_epochs * num_update_steps_per_epoch)
        if len_dataloader:
            num_examples = t.num_examples(dataloader)
            if length.max_steps > 0:
                num_train_epochs = max_steps // num_update_steps_per_epoch + int(
                    max_steps % num_update_steps_per_epoch > 0
                )
                num_train_samples = max_steps * total_train_batch_size
            else:
                num_train_epochs = math.ceil(length.num_train_epochs)
                num_train_samples = num_examples * length.num_train_epochs
        elif length.max_steps > 0:
            num_train_epochs = sys.maxsize
            num_update_steps_per_epoch = max_steps
            num_examples = total_train_batch_size * length.max_steps
            num_train_samples = length.max_steps * total_train_batch_size
        else:
            raise ValueError(
                "`TrainingArguments(max_steps=...)` must be set to a positive value when the "
                f"training dataloader has no length, got {length.max_steps}"
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

    def num_examples(self, dataloader: Any) -> int:
        """The number of samples behind ``dataloader`` (its dataset's length, else batches × batch size)."""
        try:
            dataset = dataloader.dataset
            return len(dataset)
        except (NameError, AttributeError, TypeError):
            return len(dataloader) * self.trainer.plan.data.per_device_train_batch_size

    def _finalize(self, trial: Any, num_train_samples: int) -> TrainOutput:
        logger.info(
            "\n\nTraining completed. Do not forget to share your model on huggingface.co/models =)\n\n"
        )
        t = self.trainer
        train_loss, steps_run = t.run.train_loss()
        t.run.report_ignored_labels()  # steps whose labels were all -100, when there were some
        metrics = speed_metrics(
            "train",
            t.run.start_time,
            num_samples=num_train_samples * steps_run / max(t.state.max_steps, 1),  # type: ignore[arg-type]
            num_steps=steps_run,
        )
        t.store_flos()
        metrics["total_flos"] = t.state.total_flos
        metrics["train_loss"] = train_loss
        t._memory_tracker.stop_and_update_metrics(metrics, stage="train")
        t.log(metrics)
        t.checkpoints.after_training(trial)
        run = t.run
        run.control = t.callback_handler.on_train_end(t.args, t.state, t.control)
        t._finish_current_push()  # wait for the checkpoint pushes in flight
        t._deactivate_neftune()
        run.is_in_train = False
        return TrainOutput(t.state.global_step, train_loss, metrics)

    def output_dir(self, trial: Any) -> str:
        """``Trainer._get_output_dir``: ``output_dir/<trial run name>`` during a search, else ``output_dir``."""
        t = self.trainer
        output_dir, run_name = str(t.plan.checkpoint.output_dir), t.search.trial_run_name
        return os.path.join(output_dir, run_name) if trial is not None and run_name else output_dir

    def apply_runtime_options(self) -> None:
        """``activation_checkpointing`` on the model and ``tf32`` on CUDA matmuls, as transformers."""
        t = self.trainer
        plan, model = t.plan, cast(Any, t.model)  # an HF model (PreTrainedModel) has these methods
        if plan.module.activation_checkpointing:
            enable_activation_checkpointing(model, plan.module.activation_checkpointing_kwargs)
        if plan.runtime.tf32 is not None and torch.cuda.is_available():
            torch.backends.cuda.matmul.allow_tf32 = bool(plan.runtime.tf32)
            torch.backends.cudnn.allow_tf32 = bool(plan.runtime.tf32)

    # --- NEFTune ---------------------------------------------------------------------------
    def activate_neftune(self, model: Any = None) -> Any:
        """``Trainer._activate_neftune([model])``: noise on the input embeddings while training.

        Returns the model, as transformers 4.x's ``trainer.model = trainer._activate_neftune(trainer.model)``.
        """
        target = self.trainer.model if model is None else model
        alpha = self.trainer.neftune_noise_alpha
        if alpha is None:
            return target
        from hf_lightning.neftune import activate_neftune

        self.neftune_handle = activate_neftune(target, alpha)
        return target

    def deactivate_neftune(self, model: Any = None) -> Any:
        """``Trainer._deactivate_neftune([model])``: remove the hook; returns the model."""
        if self.neftune_handle is not None:
            self.neftune_handle.remove()
            self.neftune_handle = None
        return self.trainer.model if model is None else model
