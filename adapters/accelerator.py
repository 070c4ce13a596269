"""``trainer.accelerator``: accelerate's public ``Accelerator`` API, carried out on Lightning.

Trainer subclasses (TRL's, sentence-transformers', a user's ``training_step``) call
``self.accelerator``: ``backward``, ``gather_for_metrics``, ``num_processes``, ``unwrap_model``, ... This
object answers them as accelerate's ``Accelerator`` would, with the same names, signatures and values:
during ``train()`` through the running ``lightning.Trainer`` (its strategy gathers, reduces and waits,
its precision plugin scales and autocasts), before and after it from the launcher's variables and the
arguments (:class:`~hf_lightning.args.accelerator.AcceleratorSettings`, translated once when
the Trainer is built). The process values come from ``accelerator.state``
(:class:`~hf_lightning.adapters.accelerator_state.AcceleratorStateView`), so a test that patches
``trainer.accelerator.state.num_processes`` changes what the Trainer reads, as in transformers.

An accelerate name this object does not offer raises ``AttributeError`` saying that it is not carried
(so ``hasattr`` and ``getattr(accelerator, name, default)`` keep working). docs/subclassing.md lists
every member and its status.
"""

from __future__ import annotations

import builtins
import contextlib
import gc
import os
from collections.abc import Callable, Iterator
from typing import Any, cast

import torch
from torch import nn

from hf_lightning.args.accelerate_state import complete_accelerator_state

from . import accelerator_ops as ops
from .accelerator_data import DataLoaderConfiguration, GradientStateView, prepare_data_loader
from .accelerator_state import (
    AcceleratorSettings,
    AcceleratorStateView,
    not_carried,
)
from .strategy import DistributedSettings

__all__ = ["LightningAccelerator"]


def _single_process_settings() -> AcceleratorSettings:
    distributed = DistributedSettings(
        accelerator="cpu", devices=1, num_nodes=1, world_size=1, process_group_backend=None,
        timeout_s=1800, find_unused_parameters=False,
    )  # fmt: skip
    return AcceleratorSettings(
        distributed=distributed, device=torch.device("cpu"), process_index=0, local_process_index=0,
        mixed_precision="no", save_on_each_node=False,
    )  # fmt: skip


def _do_nothing(*args: Any, **kwargs: Any) -> None:
    return None


class LightningAccelerator:
    """The accelerate ``Accelerator`` surface of ``hf_lightning.Trainer``, backed by Lightning. ``settings``
    describe the launch before a fit (one CPU process when omitted); ``bind(module)`` attaches the
    ``HFModule`` being fitted (or an evaluation's device target), ``bind(None)`` detaches."""

    def __init__(self, settings: AcceleratorSettings | None = None) -> None:
        self.settings = settings if settings is not None else _single_process_settings()
        self.module: Any = None
        self.state = AcceleratorStateView(self)
        s = self.settings
        self.gradient_state = GradientStateView(plugin_kwargs=dict(s.gradient_accumulation_kwargs))
        self.dataloader_config = DataLoaderConfiguration(data_seed=s.data_seed, **s.dataloader)
        if settings is not None:  # accelerate's own AcceleratorState, for code that reads it directly
            complete_accelerator_state(settings)

    def bind(self, module: Any) -> None:
        """Attach the ``HFModule`` being fitted (None detaches)."""
        self.module = module

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(not_carried("Accelerator", name, type(self).__name__))

    # --- where we run -------------------------------------------------------------------------
    @property
    def _trainer(self) -> Any:
        module = self.__dict__.get("module")
        return getattr(module, "_trainer", None) if module is not None else None

    def live_world(self) -> tuple[int, int, int]:
        """``(num_processes, process_index, local_process_index)``: the fit's, else the launch's."""
        trainer = self._trainer
        if trainer is not None:
            return int(trainer.world_size), int(trainer.global_rank), int(trainer.local_rank)
        s = self.settings
        return max(int(s.distributed.world_size), 1), s.process_index, s.local_process_index

    def live_device(self) -> torch.device:
        """The device of the module being fitted (or evaluated), else the arguments' device; several CPU
        processes each name theirs ``cpu:0``, as accelerate does (``local_process_index % cpu count``)."""
        module = self.module
        if module is not None and getattr(module, "device", None) is not None:
            device = torch.device(module.device)
        else:
            device = self.settings.device
        if device.type == "cpu" and self.live_world()[0] > 1:
            return torch.device("cpu", 0)
        return device

    def _comm(self) -> ops.Collective:
        trainer = self._trainer
        d = self.settings.distributed
        return ops.Collective(
            self.num_processes, self.process_index, getattr(trainer, "strategy", None),
            backend=d.process_group_backend, timeout_s=d.timeout_s, device_type=self.device.type,
        )  # fmt: skip

    # --- accelerate's process properties (read from ``state``) --------------------------------
    num_processes = property(lambda self: self.state.num_processes)
    process_index = property(lambda self: self.state.process_index)
    local_process_index = property(lambda self: self.state.local_process_index)
    is_main_process = property(lambda self: self.state.is_main_process)
    is_local_main_process = property(lambda self: self.state.is_local_main_process)
    is_last_process = property(lambda self: self.state.is_last_process)
    use_distributed = property(lambda self: self.state.use_distributed)
    distributed_type = property(lambda self: self.state.distributed_type)
    device = property(lambda self: self.state.device)
    mixed_precision = property(lambda self: self.state.mixed_precision)
    parallelism_config = property(lambda self: self.state.parallelism_config)
    deepspeed_plugin = property(lambda self: self.state.deepspeed_plugin)
    is_fsdp2 = property(lambda self: self.state.is_fsdp2)
    sync_gradients = property(lambda self: self.gradient_state.sync_gradients)
    gradient_accumulation_steps = property(lambda self: self.gradient_state.num_steps)
    """1: the Trainer accumulates itself (transformers gives accelerate ``num_steps=1`` too)."""
    split_batches = property(lambda self: self.dataloader_config.split_batches)
    dispatch_batches = property(lambda self: self.dataloader_config.dispatch_batches)
    use_seedable_sampler = property(lambda self: self.dataloader_config.use_seedable_sampler)
    non_blocking = property(lambda self: self.dataloader_config.non_blocking)

    @property
    def even_batches(self) -> bool:
        return self.dataloader_config.even_batches

    @even_batches.setter
    def even_batches(self, value: bool) -> None:
        self.dataloader_config.even_batches = bool(value)

    @property
    def local_rank(self) -> int | None:
        """This process's rank on its machine during a fit (None outside one)."""
        return getattr(self._trainer, "local_rank", None)

    @property
    def scaler(self) -> Any:
        """The mixed-precision gradient scaler of the running fit, if any (accelerate's ``scaler``)."""
        return getattr(getattr(self._trainer, "precision_plugin", None), "scaler", None)

    @scaler.setter
    def scaler(self, value: Any) -> None:
        msg = (
            "trainer.accelerator.scaler can't be replaced: Lightning's precision plugin builds it (fp16=True)"
        )
        raise AttributeError(msg)

    grad_scaler = scaler

    @property
    def optimizer_step_was_skipped(self) -> bool:
        """Whether the last step was skipped (a float16 overflow); never with bf16 or 32-bit."""
        scaler = self.scaler
        return bool(scaler is not None and getattr(scaler, "_hf_step_skipped", False))

    # --- collectives --------------------------------------------------------------------------
    def gather(self, tensor: Any) -> Any:
        """Each tensor of every process concatenated along dim 0 (one process: ``tensor`` itself)."""
        return ops.gather(self._comm(), tensor)

    def gather_for_metrics(self, input_data: Any, use_gather_object: bool = False) -> Any:
        """``gather`` for tensors; other data (or ``use_gather_object``) is gathered as pickled objects.

        The Trainer's own evaluation loop drops the samples repeated to even out the last batch; for a
        loader of the caller's own nothing is dropped (accelerate drops them for loaders it prepared)."""
        try:
            ops.apply_to_tensors(lambda tensor: tensor, input_data)
            all_tensors = True
        except TypeError:
            all_tensors = False
        if use_gather_object or not all_tensors:
            return ops.gather_object(self._comm(), input_data)
        return self.gather(input_data)

    def reduce(self, tensor: Any, reduction: str = "sum", scale: float = 1.0) -> Any:
        """A clone of each tensor reduced over the processes (``"sum"``, ``"mean"``, ``"max"``; ``scale``
        applies on XLA only, as in accelerate)."""
        return ops.reduce(self._comm(), tensor, reduction)

    def pad_across_processes(
        self, tensor: Any, dim: int = 0, pad_index: int = 0, pad_first: bool = False
    ) -> Any:
        """Each tensor padded along ``dim`` with ``pad_index`` to the longest over the processes."""
        return ops.pad_across_processes(
            self._comm(), tensor, dim=dim, pad_index=pad_index, pad_first=pad_first
        )

    def wait_for_everyone(self) -> None:
        """A barrier across the processes (none on one process)."""
        self._comm().barrier()

    # --- process-aware helpers ----------------------------------------------------------------
    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` on the local main process only."""
        if self.is_local_main_process:
            builtins.print(*args, **kwargs)

    def main_process_first(self) -> contextlib.AbstractContextManager:
        """The main process runs the block first, the others after it."""
        return ops.goes_first(self._comm(), self.is_main_process)

    def local_main_process_first(self) -> contextlib.AbstractContextManager:
        """Each machine's main process runs the block first, the others after it."""
        return ops.goes_first(self._comm(), self.is_local_main_process)

    @contextlib.contextmanager
    def split_between_processes(self, inputs: Any, apply_padding: bool = False) -> Iterator[Any]:
        """This process's share of ``inputs`` (the first ``len % num_processes`` processes get one more);
        with ``apply_padding`` the last item repeats so every share has the same length."""
        comm = self._comm()
        yield inputs if comm.world <= 1 else ops.split_values(comm, inputs, apply_padding, self.device)

    def on_main_process(self, function: Callable[..., Any] | None = None) -> Any:
        """Decorator: ``function`` runs on the main process only."""
        return self._on(function, self.is_main_process)

    def on_local_main_process(self, function: Callable[..., Any] | None = None) -> Any:
        return self._on(function, self.is_local_main_process)

    def on_last_process(self, function: Callable[..., Any]) -> Any:
        return self._on(function, self.is_last_process)

    def on_process(self, function: Callable[..., Any] | None = None, process_index: int | None = None) -> Any:
        if function is None:
            return lambda fn: self.on_process(fn, process_index=process_index)
        return self._on(function, self.process_index == process_index)

    def _on(self, function: Callable[..., Any] | None, here: bool) -> Any:
        if function is None:
            return lambda fn: self._on(fn, here)
        return function if here or not self.use_distributed else _do_nothing

    # --- the model ----------------------------------------------------------------------------
    def unwrap_model(
        self, model: nn.Module, keep_fp32_wrapper: bool = True, keep_torch_compile: bool = True
    ) -> nn.Module:
        """``model`` out of its DDP / DataParallel / DeepSpeed / FSDP1 containers (and out of
        ``torch.compile`` with ``keep_torch_compile=False``), as accelerate unwraps it."""
        inner: Any = getattr(model, "_orig_mod", None)
        compiled = model if isinstance(inner, nn.Module) else None
        if compiled is not None:
            model = inner
        while isinstance(model, _wrapper_types()):
            model = cast(nn.Module, model.module)
        return compiled if compiled is not None and keep_torch_compile else model

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        """Backward through Lightning, so mixed-precision scaling and DDP hooks apply.

        With ``learning_rate`` (transformers passes it for ``optim="lomo"`` / ``"adalomo"``) the LOMO
        optimizer runs the backward and updates the weights as the gradients arrive.
        """
        learning_rate = kwargs.pop("learning_rate", None)
        fused = getattr(self._optimizer(), "fused_backward", None)
        if learning_rate is not None and callable(fused):
            fused(loss, learning_rate)
            return
        if self._trainer is None:
            loss.backward(**kwargs)
        else:
            self.module.manual_backward(loss, **kwargs)

    def _optimizer(self) -> Any:
        optimizer = getattr(self._trainer, "optimizers", None) or [None]
        return getattr(optimizer[0], "optimizer", optimizer[0])

    @contextlib.contextmanager
    def autocast(self, autocast_handler: Any = None) -> Iterator[None]:
        """Mixed-precision autocast in the block when ``bf16`` / ``fp16`` is on (the fit's precision plugin's
        during training); an ``AutocastKwargs`` handler's settings (``enabled=False``: off) apply, as in accelerate."""
        if self.mixed_precision == "no" or (self.mixed_precision == "fp16" and self.device.type == "cpu"):
            yield  # accelerate: no fp16 autocast on the CPU
            return
        trainer = self._trainer
        if autocast_handler is None and trainer is not None:
            with trainer.precision_plugin.forward_context():
                yield
            return
        dtype = torch.float16 if self.mixed_precision == "fp16" else torch.bfloat16
        kwargs = autocast_handler.to_kwargs() if autocast_handler is not None else {}
        with torch.autocast(self.device.type, dtype=dtype, **kwargs):
            yield

    @contextlib.contextmanager
    def no_sync(self, model: nn.Module | None = None) -> Iterator[None]:
        """No gradient synchronisation in the block (DDP's ``no_sync``; nothing to skip on one process)."""
        wrapped = getattr(self._trainer, "model", None)
        target: Any = model if hasattr(model, "no_sync") else wrapped
        with (
            target.no_sync()
            if target is not None and hasattr(target, "no_sync")
            else contextlib.nullcontext()
        ):
            yield

    @contextlib.contextmanager
    def accumulate(self, *models: nn.Module) -> Iterator[None]:
        """Skip the gradient synchronisation of ``models`` unless this micro-batch completes a step."""
        sync = self.sync_gradients or (
            self.use_distributed and self.gradient_state.plugin_kwargs.get("sync_each_batch")
        )
        with contextlib.ExitStack() as stack:
            for model in models:
                stack.enter_context(contextlib.nullcontext() if sync else self.no_sync(model))
            yield

    def clip_grad_norm_(self, parameters: Any, max_norm: float, norm_type: float = 2) -> torch.Tensor | None:
        """Clip the gradients' total norm and return it (under DeepSpeed: the engine's last norm)."""
        if self.settings.distributed.deepspeed is not None:
            engine = getattr(self._trainer, "model", None)
            norm = getattr(engine, "get_global_grad_norm", None)
            return norm() if callable(norm) else None
        return torch.nn.utils.clip_grad_norm_(list(parameters), max_norm, norm_type=norm_type)

    def clip_grad_value_(self, parameters: Any, clip_value: float) -> None:
        torch.nn.utils.clip_grad_value_(parameters, clip_value)

    def get_state_dict(self, model: nn.Module, unwrap: bool = True) -> dict[str, Any]:
        """The model's weights; full weights of an FSDP or ZeRO-3 sharded model (on process 0, like accelerate)."""
        from hf_lightning.checkpoint.sharded import gathered_model_state, needs_gathering

        if needs_gathering(model):
            return gathered_model_state(model, everywhere=False)
        return (self.unwrap_model(model) if unwrap else model).state_dict()

    def save(self, obj: Any, f: Any, safe_serialization: bool = False) -> None:
        """``torch.save`` (or safetensors' ``save_file``) once per run, or once per machine with ``save_on_each_node``."""
        if not (self.is_main_process or (self.settings.save_on_each_node and self.is_local_main_process)):
            return
        if safe_serialization:
            from safetensors.torch import save_file

            save_file(obj, os.fspath(f), metadata={"format": "pt"})
        else:
            torch.save(obj, f)

    def free_memory(self, *objects: Any) -> list[None]:
        """Drop the references given, collect garbage and empty the device cache; returns ``None`` for each."""
        released: list[None] = [None] * len(objects)
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        return released

    clear = free_memory

    def prepare(self, *args: Any, device_placement: list[bool | None] | None = None) -> Any:
        """Each model placed on the device, each DataLoader dealt to this process; optimizers and
        schedulers as given (the fit wraps the model and steps them)."""
        placements = device_placement or [None] * len(args)
        prepared = tuple(self._prepare_one(obj, placement) for obj, placement in zip(args, placements))
        return prepared[0] if len(prepared) == 1 else prepared

    def _prepare_one(self, obj: Any, placement: bool | None) -> Any:
        if isinstance(obj, nn.Module):
            return self.prepare_model(obj, device_placement=placement)
        if isinstance(obj, torch.utils.data.DataLoader):
            return self.prepare_data_loader(obj)
        return obj

    def prepare_model(
        self, model: nn.Module, device_placement: bool | None = None, evaluation_mode: bool = False
    ) -> nn.Module:
        """``model`` on this process's device; the fit wraps the trained model itself (DDP, FSDP, DeepSpeed),
        so a model for evaluation only (a reference model) stays as it is, as with accelerate's ``evaluation_mode``."""
        if device_placement is not False:
            model = model.to(self.device)
        return model

    def prepare_data_loader(self, data_loader: torch.utils.data.DataLoader) -> Any:
        """The DataLoader this process iterates (accelerate's sharding; see ``accelerator_data.py``)."""
        return prepare_data_loader(
            data_loader, self.num_processes, self.process_index, self.dataloader_config
        )


def _wrapper_types() -> tuple[type, ...]:
    types: tuple[type, ...] = (nn.parallel.DistributedDataParallel, nn.DataParallel)
    import sys

    if "deepspeed" in sys.modules:
        types += (sys.modules["deepspeed"].DeepSpeedEngine,)
    from torch.distributed.fsdp import FullyShardedDataParallel

    return (*types, FullyShardedDataParallel)
