"""The engine side of ``Trainer.evaluate`` / ``predict``: where the model runs and how ranks share results.

The HF evaluation loop (``hf_lightning.trainer.evaluation``) asks this module three things:

- **where to run**: during ``train()`` the model already sits on the Lightning device, inside the
  running ``lightning.Trainer`` (its precision plugin's autocast applies); standalone, the model is
  moved to the arguments' ``device`` (cast to bfloat16 / float16 with ``bf16_full_eval`` / ``fp16_full_eval``)
  and runs under a Lightning ``MixedPrecision`` plugin when ``bf16`` / ``fp16`` is set;
- **which batches this rank evaluates**: with several data-parallel processes, `EvalShardSampler`
  deals whole batches round-robin (batch ``i`` to rank ``i % world_size``), padding the last round
  with samples from the start so that every rank runs the same number of full batches;
- **how to gather**: `EvalCollective` pads each rank's tensors to a common sequence length, gathers
  them in rank order — which, with that sampler, is dataset order — and drops the padding samples.

A standalone evaluation launched with ``WORLD_SIZE > 1`` (torchrun) initialises the default process
group if nobody did (backend ``ddp_backend``, else nccl on CUDA and gloo on CPU).
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Iterator, Mapping
from typing import Any, Literal, cast

import torch
import torch.distributed as dist
from torch.utils.data import BatchSampler

from hf_lightning.checkpoint.sharded import fsdp_root
from hf_lightning.eval_utils import IGNORE_INDEX, nested_truncate, pad_to_length
from hf_lightning.plan.groups import EvalSettings
from hf_lightning.process_group import ensure_process_group

__all__ = [
    "AccelerateShardRule",
    "EvalCollective",
    "EvalEngine",
    "EvalShardSampler",
    "eval_shard_rule",
]


class EvalShardSampler(BatchSampler):
    """The evaluation batches of one data-parallel rank: batch ``i`` of the dataset goes to rank ``i % W``.

    Every rank yields ``ceil(batches / W)`` batches of exactly ``batch_size`` samples; the missing
    samples of the last round repeat the dataset from its start (the gatherer drops them again).
    With ``drop_last`` only complete rounds of full batches are kept and nothing is repeated.
    """

    deals_processes = True  # the Trainer's loader is not dealt to the processes a second time

    def __init__(
        self, num_samples: int, batch_size: int, num_replicas: int, rank: int, drop_last: bool = False
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"`EvalShardSampler(batch_size={batch_size})` must be at least 1")
        if not 0 <= rank < num_replicas:
            raise ValueError(f"`EvalShardSampler(rank={rank})` must be in [0, {num_replicas})")
        self.num_samples, self.batch_size = num_samples, batch_size
        self.num_replicas, self.rank, self.drop_last = num_replicas, rank, drop_last
        round_size = batch_size * num_replicas
        rounds = num_samples // round_size if drop_last else math.ceil(num_samples / round_size)
        self.rounds = rounds

    def __iter__(self) -> Iterator[list[int]]:
        size = max(self.num_samples, 1)
        for step in range(self.rounds):
            start = (step * self.num_replicas + self.rank) * self.batch_size
            yield [index % size for index in range(start, start + self.batch_size)]

    def __len__(self) -> int:
        return self.rounds

    def real_rows(self, step: int) -> int:
        """How many rows of the gathered batch of round ``step`` are real samples (not repeats)."""
        round_size = self.batch_size * self.num_replicas
        return max(0, min(round_size, self.num_samples - step * round_size))


class AccelerateShardRule:
    """The rows ``gather_for_metrics`` keeps of a loader accelerate's ``prepare`` sharded (one built on a
    subclass's ``_get_eval_sampler``, ``accelerator_data.ShardedBatchSampler``): every round whole, the last
    one cut to ``len(dataset) % (batch_size * world)`` when that is not 0."""

    def __init__(self, dataset_length: int, batch_size: int, world_size: int, steps: int) -> None:
        self.batch_size, self.steps = batch_size, steps
        self.remainder = dataset_length % (batch_size * world_size)
        self.round_size = batch_size * world_size

    def real_rows(self, step: int) -> int:
        return self.remainder if step == self.steps - 1 and self.remainder else self.round_size


def eval_shard_rule(dataloader: Any) -> EvalShardSampler | AccelerateShardRule | None:
    """What says which gathered rows of an evaluation loader's rounds are real: its ``EvalShardSampler``, the
    accelerate rule of a loader accelerate sharded, or None (not sharded: each rank keeps its own)."""
    from .accelerator_data import ShardedBatchSampler  # noqa: PLC0415

    sampler = getattr(dataloader, "batch_sampler", None)
    if isinstance(sampler, EvalShardSampler):
        return sampler
    dataset: Any = getattr(dataloader, "dataset", None)
    if isinstance(sampler, ShardedBatchSampler) and sampler.batch_size and hasattr(dataset, "__len__"):
        return AccelerateShardRule(len(dataset), sampler.batch_size, sampler.num_processes, len(sampler))
    return None


class EvalCollective:
    """Pads, gathers and truncates one rank's evaluation outputs so every rank sees all of them in order.

    ``sampler`` is the loader's `EvalShardSampler` or `AccelerateShardRule` (:func:`eval_shard_rule`; None when
    the loader was not sharded: then every rank keeps its own outputs). ``use_gather_object`` gathers pickled objects instead of tensors
    (``eval_use_gather_object``); non-tensor outputs are always gathered that way.
    """

    def __init__(
        self,
        world_size: int,
        sampler: EvalShardSampler | AccelerateShardRule | None,
        use_gather_object: bool = False,
    ) -> None:
        self.world_size = world_size if sampler is not None else 1
        self.sampler = sampler
        self.use_gather_object = use_gather_object

    @property
    def active(self) -> bool:
        return self.world_size > 1

    def pad_across_processes(self, data: Any, pad_index: int = IGNORE_INDEX, dim: int = 1) -> Any:
        """Every tensor in ``data`` padded along ``dim`` to the longest length over all ranks."""
        if not self.active:
            return data
        if isinstance(data, (list, tuple)):
            return type(data)(self.pad_across_processes(t, pad_index, dim) for t in data)
        if isinstance(data, Mapping):
            return cast(Any, type(data))(
                {k: self.pad_across_processes(t, pad_index, dim) for k, t in data.items()}
            )
        if not isinstance(data, torch.Tensor) or data.ndim <= dim:
            return data
        size = torch.tensor([data.shape[dim]], device=data.device)
        dist.all_reduce(size, op=dist.ReduceOp.MAX)
        return pad_to_length(data, int(size.item()), pad_index, dim=dim)

    def gather(self, data: Any, step: int) -> Any:
        """``data`` of all ranks, concatenated in rank order, without the repeated samples of round ``step``.

        As accelerate's ``gather_for_metrics``: a full round is kept whole, however many entries a rank gives
        (transformers repeats a batch's loss once per row of its first input, which a preference batch holds
        twice; ``eval_batch_size`` times under ``split_batches``); only a partial last round is cut, to its
        real samples."""
        if not self.active:
            return data
        sampler = cast(EvalShardSampler, self.sampler)  # active implies a sampler
        keep: int | None = sampler.real_rows(step)
        if keep == sampler.batch_size * self.world_size:
            keep = None
        if self.use_gather_object or not _all_tensors(data):
            gathered = self._gather_objects(data)  # one flat list, an entry per sample
            return gathered if keep is None else gathered[:keep]
        gathered = self._gather_tensors(data)
        return gathered if keep is None else nested_truncate(gathered, keep)

    def _gather_tensors(self, data: Any) -> Any:
        if isinstance(data, (list, tuple)):
            return type(data)(self._gather_tensors(t) for t in data)
        if isinstance(data, Mapping):
            return cast(Any, type(data))({k: self._gather_tensors(t) for k, t in data.items()})
        tensor = data.reshape(1) if data.ndim == 0 else data.contiguous()
        parts = [torch.empty_like(tensor) for _ in range(self.world_size)]
        dist.all_gather(parts, tensor)
        return torch.cat(parts, dim=0)

    def _gather_objects(self, data: Any) -> list[Any]:
        parts: list[Any] = [None] * self.world_size
        dist.all_gather_object(parts, data)
        return [item for part in parts for item in part]


def _all_tensors(data: Any) -> bool:
    if isinstance(data, (list, tuple)):
        return all(_all_tensors(t) for t in data)
    if isinstance(data, Mapping):
        return all(_all_tensors(t) for t in data.values())
    return isinstance(data, torch.Tensor)


class _DeviceTarget:
    """What ``Trainer.accelerator`` is bound to during a standalone evaluation: a device, no Lightning trainer."""

    def __init__(self, device: torch.device) -> None:
        self.device = device


class EvalEngine:
    """Where one evaluation runs: inside the running ``lightning.Trainer``, or standalone on ``args.device``.

    ``accelerator`` is the facade's ``LightningAccelerator``; ``settings`` the plan's
    :class:`~hf_lightning.plan.groups.EvalSettings` (``plan.eval_placement``), which is all the engine reads.
    """

    def __init__(self, accelerator: Any, *, settings: EvalSettings) -> None:
        self.accelerator = accelerator
        self.settings = settings
        self.lightning_trainer = getattr(accelerator.module, "_trainer", None) if accelerator.module else None

    @property
    def in_lightning(self) -> bool:
        """Whether a ``lightning.Trainer`` is running (an evaluation during ``train()``)."""
        return self.lightning_trainer is not None

    def world(self) -> tuple[int, int]:
        """``(world_size, rank)`` of the data-parallel group the evaluation is sharded over."""
        if self.in_lightning:
            trainer = cast(Any, self.lightning_trainer)  # not None: in_lightning
            return trainer.world_size, trainer.global_rank
        if int(os.environ.get("WORLD_SIZE", "1")) > 1 or (dist.is_available() and dist.is_initialized()):
            settings = self.settings
            if ensure_process_group(settings.process_group_backend, settings.timeout_s, settings.device.type):
                return dist.get_world_size(), dist.get_rank()
        return 1, 0

    def prepare_model(self, model: torch.nn.Module, in_train: bool) -> tuple[torch.nn.Module, float]:
        """Put ``model`` where a standalone evaluation runs it (cast for full fp16/bf16 evaluation);
        return it and the seconds that took. During training the model stays as it is; a model FSDP1
        wrapped runs through its wrapper (transformers' ``model_wrapped``), its shards where they are."""
        start = time.time()
        root = fsdp_root(model)
        if self.in_lightning or root is not None:
            return root or model, 0.0
        # full fp16/bf16 evaluation casts a model evaluated outside training, as transformers
        dtype = None if in_train else self.settings.eval_dtype
        device = self.settings.device
        model = model.to(device=device, dtype=dtype) if dtype else model.to(device)
        return model, round(time.time() - start, 4)

    @contextlib.contextmanager
    def session(self, model: torch.nn.Module) -> Iterator[None]:
        """The context one evaluation loop runs in: the accelerator bound to the model's device and the
        precision plugin's autocast."""
        bound_here = self.accelerator.module is None
        if bound_here:
            device = next((p.device for p in model.parameters()), self.settings.device)
            self.accelerator.bind(_DeviceTarget(device))
        try:
            with self._precision_context(), torch.no_grad():
                yield
        finally:
            if bound_here:
                self.accelerator.bind(None)

    def _precision_context(self) -> contextlib.AbstractContextManager:
        if self.in_lightning:
            trainer = cast(Any, self.lightning_trainer)  # not None: in_lightning
            return trainer.precision_plugin.forward_context()
        precision = cast(Literal["bf16-mixed", "16-mixed"] | None, self.settings.mixed_precision)
        if precision is None:
            return contextlib.nullcontext()
        from lightning.pytorch.plugins.precision import MixedPrecision

        return MixedPrecision(precision, device=self.settings.device.type).forward_context()
