"""``Trainer``: transformers' Trainer API, carried out on PyTorch Lightning.

This is the facade: it keeps transformers' constructor, attributes and overridable methods, and
delegates the loop itself to ``hf_lightning.adapters`` (``HFModule`` fitted by a
``lightning.Trainer``). Each group of methods lives in a mixin of its own file:
optimizers (``trainer_optim``), data (``trainer_data``), logging and the step bookkeeping
(``trainer_logging``), evaluation (``trainer_eval``) and checkpoints (``trainer_checkpoint``).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import Any, cast

import torch
from torch import nn

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
from hf_lightning.data.collators import DataCollatorWithPadding, default_data_collator
from hf_lightning.loss import LossSettings, compute_model_loss, loss_shifts_labels, model_accepts_loss_kwargs
from hf_lightning.trainer.checkpointing import TrainerCheckpointMixin
from hf_lightning.trainer.data import TrainerDataMixin
from hf_lightning.trainer.evaluation import TrainerEvalMixin
from hf_lightning.trainer.hpsearch import TrainerHPSearchMixin
from hf_lightning.trainer.logs import TrainerLoggingMixin
from hf_lightning.trainer.optim import TrainerOptimMixin
from hf_lightning.trainer.train import TrainerTrainMixin
from hf_lightning.trainer_utils import (
    TrainerMemoryTracker,
    enable_full_determinism,
    ensure_training_mode,
    set_seed,
)
from hf_lightning.utils.trainer_logs import configure_trainer_logging

__all__ = ["Trainer"]

logger = logging.getLogger(__name__)


class Trainer(
    TrainerHPSearchMixin,
    TrainerTrainMixin,
    TrainerOptimMixin,
    TrainerDataMixin,
    TrainerLoggingMixin,
    TrainerEvalMixin,
    TrainerCheckpointMixin,
):
    """Train, evaluate and predict with an HF-convention model, on Lightning.

    The constructor takes transformers' arguments, with the same meaning and defaults.
    """

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
        enable_full_determinism(args.seed) if args.full_determinism else set_seed(args.seed)
        self._memory_tracker = TrainerMemoryTracker(args.skip_memory_metrics)
        self._memory_tracker.start()
        configure_trainer_logging(args)  # log_level / log_level_replica, as transformers' __init__
        if args.max_steps > 0 and args.num_train_epochs > 0:
            logger.info("max_steps is given, it will override any value given in num_train_epochs")
        from hf_lightning.adapters.argument_table import check_supported

        check_supported(args)
        self.create_accelerator_and_postprocess()
        self.model_init = model_init
        if model is None:
            if model_init is None:
                raise RuntimeError("`Trainer` requires either a `model` or `model_init` argument")
            model = self.call_model_init()
        elif model_init is not None:
            raise ValueError("`Trainer` requires either a `model` or `model_init` argument, but not both.")
        self.model = self.model_wrapped = model
        self.processing_class = processing_class
        self.data_collator = data_collator if data_collator is not None else self._default_collator()
        self.train_dataset, self.eval_dataset = train_dataset, eval_dataset
        self.compute_loss_func = compute_loss_func
        self.compute_metrics = compute_metrics
        self.preprocess_logits_for_metrics = preprocess_logits_for_metrics
        if optimizer_cls_and_kwargs is not None and optimizers[0] is not None:
            raise ValueError(
                "Passing both `optimizers` and `optimizer_cls_and_kwargs` arguments is incompatible."
            )
        self.optimizer, self.lr_scheduler = optimizers
        self.optimizer_cls_and_kwargs = optimizer_cls_and_kwargs
        self.neftune_noise_alpha = args.neftune_noise_alpha
        self._inspect_model()
        default_callbacks: list[Any] = [DefaultFlowCallback]
        self.callback_handler = CallbackHandler(
            default_callbacks + list(callbacks or []),
            self.model,
            self.processing_class,
            self.optimizer,
            self.lr_scheduler,
        )
        self.add_callback(PrinterCallback if args.disable_tqdm else ProgressCallback)
        self._init_bookkeeping()
        self.control = self.callback_handler.on_init_end(self.args, self.state, self.control)
        if getattr(self.model, "config", None) is not None and hasattr(self.model.config, "use_cache"):
            self.model.config.use_cache = args.use_cache
        self._memory_tracker.stop_and_update_metrics()

    def _default_collator(self) -> Callable:
        if self.processing_class is not None and hasattr(self.processing_class, "pad"):
            return DataCollatorWithPadding(self.processing_class)
        return default_data_collator

    def _inspect_model(self) -> None:
        """Decide once how the model's loss is computed (transformers' model_accepts_loss_kwargs etc.)."""
        from hf_lightning.trainer.data import find_labels

        model = self.model
        self.model_accepts_loss_kwargs = model_accepts_loss_kwargs(model)
        self.loss_shifts_labels = loss_shifts_labels(model)
        self.label_names = self.args.label_names if self.args.label_names is not None else find_labels(model)
        self.loss_is_scaled_for_ga: bool | None = None
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
        self.hp_name = None
        self.hp_search_backend = None
        self.current_flos = 0
        self._train_batch_size = self.args.train_batch_size
        self._created_lr_scheduler = False
        self._signature_columns = None
        self._tr_loss = torch.tensor(0.0)
        self._total_loss_scalar = 0.0
        self._globalstep_last_logged = 0
        self._initial_num_input_tokens_seen = 0

    # --- model_init and callbacks ----------------------------------------------------------
    def call_model_init(self, trial: Any = None) -> nn.Module:
        """Build a fresh model with ``model_init`` (passing ``trial`` when it takes one argument)."""
        from hf_lightning.trainer_utils import number_of_arguments

        n_args = number_of_arguments(self.model_init)
        if n_args == 0:
            model = cast(Callable[..., nn.Module], self.model_init)()  # None fails in number_of_arguments
        elif n_args == 1:
            model = cast(Callable[..., nn.Module], self.model_init)(trial)
        else:
            raise RuntimeError("model_init should have 0 or 1 argument.")
        if model is None:
            raise RuntimeError("model_init should not return None.")
        return model

    def add_callback(self, callback: type[TrainerCallback] | TrainerCallback) -> None:
        """Add a callback (a class is instantiated) to the current list."""
        self.callback_handler.add_callback(callback)

    def pop_callback(self, callback: type[TrainerCallback] | TrainerCallback) -> TrainerCallback | None:
        """Remove a callback and return it (the first of that class when a class is given)."""
        return self.callback_handler.pop_callback(callback)

    def remove_callback(self, callback: type[TrainerCallback] | TrainerCallback) -> None:
        """Remove a callback (the first of that class when a class is given)."""
        self.callback_handler.remove_callback(callback)

    # --- the per-batch work users override -------------------------------------------------
    def training_step(
        self, model: nn.Module, inputs: dict[str, Any], num_items_in_batch: torch.Tensor | int | None = None
    ) -> torch.Tensor:
        """Forward and backward on one micro-batch; returns the detached loss for logging."""
        ensure_training_mode(model)  # model.train(), without the walk when nothing would change
        inputs = self._prepare_inputs(inputs)
        with self.compute_loss_context_manager():
            loss = self.compute_loss(model, inputs, num_items_in_batch=num_items_in_batch)
        del inputs
        steps = self.args.torch_empty_cache_steps
        if steps is not None and self.state.global_step % steps == 0 and torch.cuda.is_available():
            torch.cuda.empty_cache()
        if self.loss_is_scaled_for_ga is not None:
            scaled = self.loss_is_scaled_for_ga
        else:
            scaled = (self.model_accepts_loss_kwargs and num_items_in_batch is not None) or (
                self.compute_loss_func is not None
            )
        if not scaled:
            loss = loss / self.current_gradient_accumulation_steps
        self.accelerator.backward(loss)
        return loss.detach()

    def compute_loss(
        self,
        model: nn.Module,
        inputs: dict[str, Any],
        return_outputs: bool = False,
        num_items_in_batch: torch.Tensor | int | None = None,
    ) -> Any:
        """The loss of ``model`` on ``inputs`` (its first output, or ``compute_loss_func``'s result)."""
        settings = LossSettings(
            accepts_loss_kwargs=self.model_accepts_loss_kwargs,
            shift_labels=self.loss_shifts_labels,
            label_smoother=self._label_smoother(),
            compute_loss_func=self.compute_loss_func,
            average_tokens_across_devices=self.args.average_tokens_across_devices,
            world_size=self.accelerator.num_processes,
        )
        return compute_model_loss(
            model, inputs, settings, num_items_in_batch=num_items_in_batch, return_outputs=return_outputs
        )

    def _label_smoother(self) -> Any:
        from hf_lightning.loss import LabelSmoother

        factor = self.args.label_smoothing_factor
        if not factor:
            return None
        if getattr(getattr(self.model, "config", None), "problem_type", None) == "multi_label_classification":
            return None
        return LabelSmoother(epsilon=factor)

    def compute_loss_context_manager(self) -> contextlib.ExitStack:
        """The context ``compute_loss`` runs in (autocast is Lightning's precision plugin's job)."""
        stack = contextlib.ExitStack()
        ctx = self.autocast_smart_context_manager()
        if not isinstance(ctx, contextlib.nullcontext):
            stack.enter_context(ctx)
        return stack

    def autocast_smart_context_manager(
        self, cache_enabled: bool | None = True
    ) -> contextlib.AbstractContextManager:
        """A null context: Lightning's precision plugin already autocasts the training step."""
        return contextlib.nullcontext()

    def _prepare_inputs(self, inputs: dict[str, Any]) -> dict[str, Any]:
        """Move ``inputs`` to the model's device (Lightning has usually done it already)."""
        device = self.accelerator.device
        return _to_device(inputs, device)

    def get_batch_samples(
        self, epoch_iterator: Any, num_batches: int, device: Any = None
    ) -> tuple[list, Any]:
        """Take up to ``num_batches`` micro-batches and count their target tokens (``num_items_in_batch``).

        The Lightning module does this once per window (``AccumulationWindows``); this method is the
        same computation for code that drives batches itself.
        """
        from hf_lightning.loss import count_items_in_batch

        batches = []
        for _ in range(num_batches):
            try:
                batches.append(next(epoch_iterator))
            except StopIteration:
                break
        if not (self.model_accepts_loss_kwargs or self.compute_loss_func is not None):
            return batches, None
        count = count_items_in_batch(batches, shift_labels=self.loss_shifts_labels)
        if count is not None and self.args.average_tokens_across_devices:
            count = self.accelerator.reduce(count, "sum")
        return batches, count if count is None or device is None else count.to(device)

    def create_accelerator_and_postprocess(self) -> None:
        """(Re)create ``self.accelerator``: the Lightning-backed shim bound to the module during train()."""
        from hf_lightning.adapters.accelerator import LightningAccelerator

        self.accelerator = LightningAccelerator()

    def get_tp_size(self) -> int:
        """Tensor-parallel degree: 1 (tensor parallelism is not supported yet)."""
        return 1

    def get_cp_size(self) -> int:
        """Context-parallel degree: 1 (context parallelism is not supported yet)."""
        return 1

    def get_sp_size(self) -> int:
        """Sequence-parallel degree: 1 (sequence parallelism is not supported yet)."""
        return 1

    def init_hf_repo(self, token: str | None = None, private: bool | None = None) -> None:
        raise NotImplementedError(
            "Pushing to the Hugging Face Hub (`init_hf_repo`) is not supported by hf_lightning yet"
        )

    def push_to_hub(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError("`Trainer.push_to_hub` is not supported by hf_lightning yet")

    def create_model_card(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError("`Trainer.create_model_card` is not supported by hf_lightning yet")

    # --- processes -------------------------------------------------------------------------
    def is_local_process_zero(self) -> bool:
        """Whether this process is the main one on its machine."""
        return self.args.local_process_index == 0

    def is_world_process_zero(self) -> bool:
        """Whether this process is the main one across all machines."""
        return self.args.process_index == 0


def _to_device(data: Any, device: torch.device) -> Any:
    if isinstance(data, Mapping):  # dict, or a mapping such as BatchEncoding
        return cast(Any, type(data))({k: _to_device(v, device) for k, v in data.items()})
    if isinstance(data, (list, tuple)):
        return type(data)(_to_device(v, device) for v in data)
    if isinstance(data, torch.Tensor) and data.device != device:
        return data.to(device)
    return data
