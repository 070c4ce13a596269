"""``Trainer``: transformers' Trainer API, carried out on PyTorch Lightning.

This is the facade: it keeps transformers' constructor, attributes and overridable methods, and
delegates the loop itself to ``hf_lightning.adapters`` (``HFModule`` fitted by a ``lightning.Trainer``).
The work is done by named parts the Trainer owns, each in its own file and owning its state; a part
calls the Trainer's overridable methods through the Trainer, so a user's override runs::

    trainer.launcher     TrainLauncher      train.py          train(), the run-length arithmetic, NEFTune
    trainer.steps        BatchSteps         steps.py          loss settings, get_batch_samples (training_step,
                                                              compute_loss: Trainer methods written in steps.py)
    trainer.run          TrainingRun        run.py            the run object, fresh at each train(): state,
                                                              control, loss sum, clock (the Trainer's
                                                              names read it); log / evaluate / save
    trainer.optim        OptimizerSetup     optim.py          optimizer and scheduler creation
    trainer.loaders      DataLoaderBuilder  data.py           train / eval / test DataLoaders, samplers
    trainer.evaluations  Evaluator          evaluation.py     evaluate, predict, best metric
    trainer.eval_loop    EvaluationLoop     eval_loop.py      the loop over evaluation batches
    trainer.checkpoints  CheckpointPolicy   checkpointing.py  save, resume, best model, rotation
    trainer.search       SearchRunner       hpsearch.py       hyperparameter_search and its trials
    trainer.hub          HubPublisher       hub.py            init_hf_repo, push_to_hub, pushes at each save

Most of transformers' methods are one line here: ``name = delegate("part", Part.method)`` (see
``delegation.py``): same signature and docstring, overridable as any method. The engine
(``hf_lightning.adapters``) sees only the public surface typed by
``hf_lightning.adapters.protocols.TrainerFacade``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from hf_lightning import optim as _optim
from hf_lightning.args.accelerator import accelerator_settings
from hf_lightning.args.training_args import TrainingArguments
from hf_lightning.callbacks import (
    CallbackHandler,
    DefaultFlowCallback,
    ExportableState,
    PrinterCallback,
    ProgressCallback,
    TrainerCallback,
    TrainerControl,
    TrainerState,
)
from hf_lightning.loss import model_accepts_loss_kwargs
from hf_lightning.plan import TrainerPlan, current_plan
from hf_lightning.trainer import metrics as _metrics
from hf_lightning.trainer import model_card as _model_card
from hf_lightning.trainer import steps, surface
from hf_lightning.trainer.checkpointing import CheckpointPolicy
from hf_lightning.trainer.data import DataLoaderBuilder, find_labels
from hf_lightning.trainer.delegation import delegate, held_by
from hf_lightning.trainer.engine_door import ENGINE
from hf_lightning.trainer.eval_loop import EvaluationLoop
from hf_lightning.trainer.evaluation import Evaluator
from hf_lightning.trainer.hpsearch import SearchRunner
from hf_lightning.trainer.hub import HubPublisher
from hf_lightning.trainer.init_checks import (
    build_label_smoother,
    check_trainer_arguments,
    warn_overrides_not_called,
)
from hf_lightning.trainer.optim import OptimizerSetup
from hf_lightning.trainer.run import RUN_ATTRIBUTES, TrainingRun
from hf_lightning.trainer.steps import BatchSteps
from hf_lightning.trainer.train import TrainLauncher
from hf_lightning.trainer_jit_checkpoint import jit_callbacks
from hf_lightning.trainer_utils import TrainerMemoryTracker, TrainOutput, enable_full_determinism, set_seed
from hf_lightning.utils import constructor_inputs as _inputs
from hf_lightning.utils.logging import get_logger
from hf_lightning.utils.trainer_logs import configure_trainer_logging

__all__ = ["Trainer"]

logger = get_logger(__name__)

DEFAULT_CALLBACKS: list[type[TrainerCallback]] = [DefaultFlowCallback]
"""The callbacks every ``Trainer`` starts with (before the ``report_to`` ones), as in transformers."""
DEFAULT_PROGRESS_CALLBACK: type[TrainerCallback] = ProgressCallback
"""The progress callback unless ``disable_tqdm`` (then ``PrinterCallback``)."""


class Trainer:
    """Train, evaluate and predict with an HF-convention model, on Lightning.

    The constructor takes transformers' arguments, with the same meaning and defaults.
    """

    # transformers' run attributes, held by the run object (run.py): read and assigned as transformers' are
    state, control, _train_batch_size, current_flos, is_in_train = held_by.views("run", 5, RUN_ATTRIBUTES)
    current_gradient_accumulation_steps, _trial, model_wrapped, deepspeed, _memory_tracker = held_by.views(
        "run", 5, RUN_ATTRIBUTES
    )
    _globalstep_last_logged, _total_loss_scalar = held_by.views("run", 2, RUN_ATTRIBUTES)  # TRL reads them
    hp_search_backend, hp_space, hp_name, compute_objective, objective = held_by.views("search", 5)
    hub_model_id = held_by("hub")  # the repository init_hf_repo created (hub.py)
    _signature_columns = held_by("loaders", {"_signature_columns": "columns"})  # the model's inputs (data.py)
    loss_is_scaled_for_ga: bool | None = None
    """Whether ``compute_loss`` already scales for gradient accumulation (None: decided from the model);
    a class attribute, as in transformers, so a subclass (TRL's) sets it in its body."""
    _constructor_inputs: _inputs.ConstructorInputs  # the outermost constructor call, recorded by __new__
    jit_kill_wait: float = 3.0
    """Seconds between SIGTERM and the JIT checkpoint request (transformers' ``kill_wait``); counted in the
    grace period the log reports."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        warn_overrides_not_called(cls)

    def __new__(cls, *args: Any, **kwargs: Any) -> Trainer:  # a search trial rebuilds the class from the call
        trainer = super().__new__(cls)
        _inputs.record_inputs(trainer, args, kwargs)
        return trainer

    def __init__(
        self,
        model: nn.Module | None = None,
        args: TrainingArguments | None = None,
        data_collator: Callable | None = None,
        train_dataset: Any = None,
        eval_dataset: Any = None,
        processing_class: Any = None,
        model_init: Callable[..., nn.Module] | None = None,
        compute_loss_func: Callable | None = None,
        compute_metrics: Callable | None = None,
        callbacks: list[TrainerCallback] | None = None,
        optimizers: tuple[Any, Any] = (None, None),
        optimizer_cls_and_kwargs: tuple[type[torch.optim.Optimizer], dict[str, Any]] | None = None,
        preprocess_logits_for_metrics: Callable | None = None,
    ) -> None:
        if args is None:
            logger.info("No `TrainingArguments` passed, using `output_dir=tmp_trainer`.")
            args = TrainingArguments(output_dir="tmp_trainer")
        self.args = args
        plan = self.plan  # the arguments translated once (hf_lightning.plan)
        self._build_parts()
        runtime = plan.runtime
        enable_full_determinism(runtime.seed) if runtime.full_determinism else set_seed(runtime.seed)
        self._memory_tracker = TrainerMemoryTracker(runtime.skip_memory_metrics)
        self._memory_tracker.start()
        configure_trainer_logging(args)  # log_level / log_level_replica, as transformers' __init__
        ENGINE.check_supported(args)
        self.create_accelerator_and_postprocess()
        self.model_init = model_init
        if model is None:
            if model_init is None:
                raise RuntimeError("`Trainer` requires either a `model` or `model_init` argument")
            model = self.call_model_init()
        elif model_init is not None:
            raise ValueError("`Trainer` requires either a `model` or `model_init` argument, but not both.")
        self.model = self.model_wrapped = model
        for name, value in surface.init_model_attributes(self, model).items():  # is_model_parallel, ...
            setattr(self, name, value)
        self.processing_class = processing_class
        self.data_collator = surface.default_collator(processing_class, given=data_collator)
        self.train_dataset, self.eval_dataset = train_dataset, eval_dataset
        self.compute_loss_func = compute_loss_func
        self.compute_metrics = compute_metrics
        self.preprocess_logits_for_metrics = preprocess_logits_for_metrics
        self.optimizer, self.lr_scheduler = optimizers
        self.optimizer_cls_and_kwargs = optimizer_cls_and_kwargs
        check_trainer_arguments(self)  # what transformers refuses at construction (init_checks.py)
        self.neftune_noise_alpha = plan.module.neftune_noise_alpha
        self._inspect_model()
        self._init_callbacks(callbacks)
        self.hub.open_repository()  # init_hf_repo when push_to_hub, as transformers' __init__
        self._init_bookkeeping()
        self.control = self.callback_handler.on_init_end(self.args, self.state, self.control)
        if getattr(self.model, "config", None) is not None:  # any config, as transformers: config.json has it
            self.model.config.use_cache = self.plan.runtime.use_cache  # type: ignore[union-attr]
        self._memory_tracker.stop_and_update_metrics()

    def _build_parts(self) -> None:
        """The named parts (see the module docstring), each with fresh state."""
        self.launcher = TrainLauncher(self)
        self.steps = BatchSteps(self)
        self.run = TrainingRun(self)
        self.optim = OptimizerSetup(self)
        self.loaders = DataLoaderBuilder(self)
        self.evaluations = Evaluator(self)
        self.eval_loop = EvaluationLoop(self)
        self.checkpoints = CheckpointPolicy(self)
        self.search = SearchRunner(self)
        self.hub = HubPublisher(self)

    def _init_callbacks(self, callbacks: list[TrainerCallback] | None) -> None:
        """The default callbacks (report_to, JIT checkpoints), the user's callbacks, then the progress bar."""
        defaults = [*DEFAULT_CALLBACKS, *ENGINE.reporting_callbacks(self.args), *jit_callbacks(self)]
        handed = (self.model, self.processing_class, self.optimizer, self.lr_scheduler)
        self.callback_handler = CallbackHandler([*defaults, *(callbacks or [])], *handed)
        self.add_callback(PrinterCallback if self.plan.runtime.disable_tqdm else DEFAULT_PROGRESS_CALLBACK)

    def _inspect_model(self) -> None:
        """Decide once how the model's loss is computed (transformers' model_accepts_loss_kwargs etc.)."""
        model = self.model
        self.label_smoother = build_label_smoother(self.plan.module, model)
        self.model_accepts_loss_kwargs: bool = model_accepts_loss_kwargs(model)
        # None: the model's loss is asked at its first batch (hf_lightning.loss_rule); True/False overrides
        self.loss_shifts_labels: bool | None = None
        self.label_names = self.args.label_names if self.args.label_names is not None else find_labels(model)
        self.current_gradient_accumulation_steps = 1

    def _init_bookkeeping(self) -> None:
        self.control = TrainerControl()
        self.state = TrainerState(
            is_local_process_zero=self.is_local_process_zero(),
            is_world_process_zero=self.is_world_process_zero(),
            stateful_callbacks=[
                cb
                for cb in self.callback_handler.callbacks + [self.control]
                if isinstance(cb, ExportableState)
            ],
        )
        self.is_in_train = False
        self.current_flos = 0
        self._train_batch_size = self.args.train_batch_size

    # --- model_init and callbacks ----------------------------------------------------------
    def call_model_init(self, trial: Any = None) -> nn.Module:
        """Build a fresh model with ``model_init`` (passing ``trial`` when it takes one argument)."""
        return _inputs.call_model_init(self.model_init, trial)

    add_callback = delegate("callback_handler", CallbackHandler.add_callback)
    pop_callback = delegate("callback_handler", CallbackHandler.pop_callback)
    remove_callback = delegate("callback_handler", CallbackHandler.remove_callback)

    # --- training: trainer.launcher, trainer.run ----------------------------------------------
    def train(
        self,
        resume_from_checkpoint: str | bool | None = None,
        trial: Any = None,
        ignore_keys_for_eval: list[str] | None = None,
    ) -> TrainOutput:
        """Train the model; resume from a checkpoint folder (or the newest one when True)."""
        self.run = self.run.successor()  # a fresh run object; transformers' attributes keep their values
        return self.launcher.launch(resume_from_checkpoint, trial, ignore_keys_for_eval)

    _inner_training_loop = delegate("launcher", TrainLauncher.inner_loop)
    set_initial_training_values = delegate("launcher", TrainLauncher.initial_training_values)
    num_examples = delegate("launcher", TrainLauncher.num_examples)
    _get_output_dir = delegate("launcher", TrainLauncher.output_dir)
    _activate_neftune = delegate("launcher", TrainLauncher.activate_neftune)
    _deactivate_neftune = delegate("launcher", TrainLauncher.deactivate_neftune)
    log = delegate("run", TrainingRun.log)
    _maybe_log_save_evaluate = delegate("run", TrainingRun.maybe_log_save_evaluate)
    floating_point_ops = delegate("run", TrainingRun.floating_point_ops)
    store_flos = delegate("run", TrainingRun.store_flos)

    @property
    def plan(self) -> TrainerPlan:
        """``self.args`` translated once (``hf_lightning.plan``); rebuilt when ``args`` is replaced or set."""
        return current_plan(self)

    def get_total_train_batch_size(self, args: Any) -> int:
        """per-device batch × gradient accumulation × data-parallel world size."""
        return self._train_batch_size * args.gradient_accumulation_steps * max(args.world_size, 1)

    def end(self) -> None:
        """Release what training held (loggers are finalised after each fit)."""
        self.accelerator.bind(None)

    # --- the per-batch work users override: written in steps.py (no forwarding hop), and trainer.steps ---
    training_step = steps.training_step
    compute_loss = steps.compute_loss
    compute_loss_context_manager = steps.compute_loss_context_manager
    autocast_smart_context_manager = steps.autocast_smart_context_manager
    _prepare_input = steps.prepare_input
    _prepare_inputs = steps.prepare_inputs
    _label_smoother = delegate("steps", BatchSteps.label_smoother)
    get_batch_samples = delegate("steps", BatchSteps.batch_samples)
    _get_num_items_in_batch = delegate("steps", BatchSteps.num_items)

    # --- optimizer and scheduler: trainer.optim -----------------------------------------------
    def create_optimizer_and_scheduler(self, num_training_steps: int) -> None:
        """Create the optimizer and the scheduler unless the user passed them (``optimizers=``)."""
        self.create_optimizer()
        self.create_scheduler(num_training_steps=num_training_steps, optimizer=self.optimizer)

    create_optimizer = delegate("optim", OptimizerSetup.create_optimizer)
    create_scheduler = delegate("optim", OptimizerSetup.create_scheduler)
    get_learning_rates = delegate("optim", OptimizerSetup.learning_rates)
    get_optimizer_group = delegate("optim", OptimizerSetup.optimizer_group)
    _get_learning_rate = delegate("optim", OptimizerSetup.learning_rate)

    @staticmethod
    def get_optimizer_cls_and_kwargs(args: Any, model: nn.Module | None = None) -> tuple[Any, dict[str, Any]]:
        """The optimizer class and its keyword arguments for ``args.optim`` and ``args.optim_args``."""
        return _optim.get_optimizer_cls_and_kwargs(args, model)

    def get_decay_parameter_names(self, model: nn.Module) -> list[str]:
        """Names of the parameters that get weight decay (not biases, not normalisation weights)."""
        return _optim.get_decay_parameter_names(model)

    def get_num_trainable_parameters(self) -> int:
        """The number of parameters that require gradients."""
        return sum(p.numel() for p in self.model.parameters() if p.requires_grad)

    # --- data: trainer.loaders ----------------------------------------------------------------
    get_train_dataloader = delegate("loaders", DataLoaderBuilder.train_dataloader)
    get_eval_dataloader = delegate("loaders", DataLoaderBuilder.eval_dataloader)
    get_test_dataloader = delegate("loaders", DataLoaderBuilder.test_dataloader)
    _get_dataloader = delegate("loaders", DataLoaderBuilder.build)
    _get_train_sampler = delegate("loaders", DataLoaderBuilder.train_sampler)
    _set_signature_columns_if_needed = delegate("loaders", DataLoaderBuilder.set_signature_columns)
    _remove_unused_columns = delegate("loaders", DataLoaderBuilder.remove_unused_columns)
    _get_collator_with_removed_columns = delegate("loaders", DataLoaderBuilder.collator_with_removed_columns)
    _get_eval_sampler = delegate("loaders", DataLoaderBuilder.eval_sampler)

    # --- evaluation and prediction: trainer.evaluations, trainer.eval_loop ----------------------
    evaluate = delegate("evaluations", Evaluator.evaluate)
    predict = delegate("evaluations", Evaluator.predict)
    _evaluate = delegate("evaluations", Evaluator.evaluate_in_training)
    _determine_best_metric = delegate("evaluations", Evaluator.determine_best_metric)
    evaluation_loop = delegate("eval_loop", EvaluationLoop.run)
    prediction_step = delegate("eval_loop", EvaluationLoop.predict_step)

    def _predictions_padding_index(self) -> int:
        """The value that pads predictions of different lengths (-100; Seq2SeqTrainer: the pad token)."""
        return -100

    def metrics_format(self, metrics: dict[str, Any]) -> dict[str, Any]:
        """``metrics`` formatted for reading (memory in MB, runtimes as H:MM:SS.cc, floats rounded)."""
        return _metrics.metrics_format(metrics)

    def log_metrics(self, split: str, metrics: dict[str, Any]) -> None:
        """Print ``metrics`` of ``split`` as an aligned table, keys sorted (world-zero process only; the
        memory keys are explained in ``hf_lightning.trainer.metrics``)."""
        if self.is_world_process_zero():
            _metrics.print_metrics(split, metrics)

    def save_metrics(self, split: str, metrics: dict[str, Any], combined: bool = True) -> None:
        """Write ``metrics`` (unformatted) to ``{output_dir}/{split}_results.json``; with ``combined``, also
        merge them into ``all_results.json``. Only on the world-zero process."""
        if self.is_world_process_zero():
            _metrics.write_metrics(str(self.plan.checkpoint.output_dir), split, metrics, combined)

    # --- checkpoints: trainer.checkpoints -----------------------------------------------------
    save_model = delegate("checkpoints", CheckpointPolicy.save_model)
    _save = surface.save_model_files  # the files save_model writes (surface.py); overridable
    save_state = delegate("checkpoints", CheckpointPolicy.save_state)
    _save_checkpoint = delegate("checkpoints", CheckpointPolicy.save)
    _load_from_checkpoint = delegate("checkpoints", CheckpointPolicy.load_from_checkpoint)
    _load_optimizer_and_scheduler = delegate("checkpoints", CheckpointPolicy.load_optimizer_and_scheduler)
    _load_rng_state = delegate("checkpoints", CheckpointPolicy.load_rng_state)
    _load_callback_state = delegate("checkpoints", CheckpointPolicy.load_callback_state)
    _load_best_model = delegate("checkpoints", CheckpointPolicy.load_best_model)

    # --- hyperparameter search: trainer.search ------------------------------------------------
    hyperparameter_search = delegate("search", SearchRunner.run)
    _hp_search_setup = delegate("search", SearchRunner.setup_trial)
    _report_to_hp_search = delegate("search", SearchRunner.report)
    _tune_save_checkpoint = delegate("search", SearchRunner.save_tune_checkpoint)

    def _use_args(self, args: TrainingArguments) -> None:
        """A search trial's copy of the arguments in place of ``self.args`` (the original back when it ends)."""
        self.args = args

    # --- engine and processes -----------------------------------------------------------------
    def create_accelerator_and_postprocess(self) -> None:
        """(Re)create ``self.accelerator`` (accelerate's API on Lightning) and the engine flags (``surface.py``)."""
        self.accelerator = ENGINE.accelerator(
            accelerator_settings(self.args, os.environ, cuda_available=torch.cuda.is_available())
        )
        for name, value in surface.init_engine_attributes(self).items():  # is_deepspeed_enabled, ...
            setattr(self, name, value)

    def get_tp_size(self) -> int:
        """Tensor-parallel degree: the model's ``_tp_size``, else ``accelerator.parallelism_config``'s (1: none)."""
        return surface.parallel_size(self, "tp")

    def get_cp_size(self) -> int:
        """Context-parallel degree: ``accelerator.parallelism_config``'s (1: none; not supported yet)."""
        return surface.parallel_size(self, "cp")

    def get_sp_size(self) -> int:
        """Sequence-parallel degree: ``accelerator.parallelism_config``'s (1: none; not supported yet)."""
        return surface.parallel_size(self, "sp")

    push_in_progress, neftune_hook_handle, model_preparation_time = surface.PART_VIEWS  # read-only views

    init_hf_repo = delegate("hub", HubPublisher.init_repo)
    push_to_hub = delegate("hub", HubPublisher.push)
    _push_from_checkpoint = delegate("hub", HubPublisher.push_from_checkpoint)
    _finish_current_push = delegate("hub", HubPublisher.finish_current_push)

    create_model_card = _model_card.create_model_card

    def is_local_process_zero(self) -> bool:
        """Whether this process is the main one on its machine."""
        return self.args.local_process_index == 0

    def is_world_process_zero(self) -> bool:
        """Whether this process is the main one across all machines."""
        return self.args.process_index == 0
