"""Values `TrainingArguments` derives from the process it runs in: batch sizes, ranks, device, log level.

Ranks and world size are read from the standard launcher variables (``WORLD_SIZE``, ``RANK``,
``LOCAL_RANK``; an ``srun`` task's ``SLURM_*`` variables stand for them: ``args/launcher.py``) each time they are asked for, falling back to an initialised ``torch.distributed``.
Nothing here starts a process group or touches accelerate; torch is imported only when a property
needs it, so building the arguments stays cheap.

Each function takes the arguments as its first parameter and is bound in the body of `TrainingArguments`
(a method as ``name = runtime.name``, a property as ``name = property(runtime.name)``), so the class stays
one flat dataclass whose every method has its home named here.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import math
import os
from collections.abc import Iterator
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from hf_lightning.args.deepspeed_config import load_deepspeed_config, zero_stage
from hf_lightning.args.enums import ParallelMode
from hf_lightning.args.launcher import launcher_variables
from hf_lightning.utils import logging as hf_logging

if TYPE_CHECKING:
    import torch

    from hf_lightning.args.training_args import TrainingArguments

__all__ = [
    "LOG_LEVELS",
    "announce_devices",
    "compile_tf32",
    "DeepSpeedPlugin",
    "DistributedState",
    "DistributedType",
    "ddp_timeout_delta",
    "deepspeed_plugin",
    "distributed_state",
    "distributed_type_enum",
    "device",
    "devices_unannounced",
    "eval_batch_size",
    "get_process_log_level",
    "get_warmup_steps",
    "local_process_index",
    "main_process_first",
    "n_gpu",
    "parallel_mode",
    "place_model_on_device",
    "process_index",
    "is_whole_or_ratio",
    "resolve_steps",
    "sampler_seed",
    "should_log",
    "should_save",
    "train_batch_size",
    "world_size",
]

logger = hf_logging.get_logger(__name__)

# Names accepted by ``log_level``; "passive" (-1) leaves the level the application set.
LOG_LEVELS = {
    "detail": logging.DEBUG,
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
    "passive": -1,
}


def is_whole_or_ratio(value: float) -> bool:
    """Whether a ``*_steps`` value reads as steps: a ratio (< 1) of the run, or whole when above 1 (not 1.5)."""
    return not value > 1 or value == int(value)


def resolve_steps(value: float, max_steps: float) -> int:
    """A ``*_steps`` value as a step count: a ratio < 1 becomes ``ceil(max_steps * value)``."""
    if value < 1:
        return math.ceil(max_steps * value)
    return int(value)


def sampler_seed(seed: int, data_seed: int | None) -> int:
    """The seed of the data samplers' generator: ``data_seed``, else ``seed`` (every sampler, both paths)."""
    return seed if data_seed is None else data_seed


def _torch():
    import torch

    return torch


def _distributed() -> bool:
    torch = _torch()
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def _open_process_group(args: TrainingArguments) -> bool:
    from hf_lightning.process_group import ensure_process_group

    return ensure_process_group(args.ddp_backend, args.ddp_timeout, args.device.type)


def _env_int(name: str) -> int | None:
    value = os.environ.get(name)
    if value in (None, "") and "SLURM_NTASKS" in os.environ:  # an srun task's variables stand for torchrun's
        value = launcher_variables(os.environ).get(name)
    return int(value) if value not in (None, "") else None


def world_size(args: TrainingArguments) -> int:
    """Number of processes taking part in training."""
    env = _env_int("WORLD_SIZE")
    if env is not None:
        return env
    return _torch().distributed.get_world_size() if _distributed() else 1


def process_index(args: TrainingArguments) -> int:
    """Global rank of this process."""
    env = _env_int("RANK")
    if env is not None:
        return env
    return _torch().distributed.get_rank() if _distributed() else 0


def local_process_index(args: TrainingArguments) -> int:
    """Rank of this process on its node."""
    env = _env_int("LOCAL_RANK")
    if env is not None:
        return env
    return max(args.local_rank, 0)


def n_gpu(args: TrainingArguments) -> int:
    """GPUs this process drives: 0 on CPU, 1 per process when distributed, else every visible GPU."""
    if args.use_cpu or not _torch().cuda.is_available():
        return 0
    return 1 if args.world_size > 1 else _torch().cuda.device_count()


class _Quiet:
    depth = 0


@contextlib.contextmanager
def devices_unannounced() -> Iterator[None]:
    """Build ``TrainingArguments`` for the library's own use (the defaults it compares against) without
    transformers' "PyTorch: setting up devices" line."""
    _Quiet.depth += 1
    try:
        yield
    finally:
        _Quiet.depth -= 1


def announce_devices(args: TrainingArguments) -> None:
    """transformers' INFO line of ``__post_init__`` (its ``_setup_devices``), once per instance; the devices
    themselves are looked up when first asked for."""
    if _Quiet.depth or args.__dict__.get("_devices_announced"):
        return
    args.__dict__["_devices_announced"] = True
    logger.info("PyTorch: setting up devices")


def compile_tf32(args: TrainingArguments) -> None:
    """transformers' ``__post_init__`` step for ``torch_compile``: on an Ampere or newer GPU, TF32 matmuls on
    (unless ``tf32=False`` or fp16 says otherwise; always with bf16), with its INFO line; elsewhere its
    warning that compiling gains little."""
    if not args.torch_compile or _Quiet.depth:
        return
    torch = _torch()
    ampere = torch.cuda.is_available() and torch.version.cuda is not None
    if ampere and torch.cuda.get_device_properties(torch.cuda.current_device()).major >= 8:
        if (args.tf32 is None and not args.fp16) or args.bf16:
            logger.info(
                "Setting TF32 in CUDA backends to speedup torch compile, you won't see any improvement otherwise."
            )
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True
        return
    logger.warning(
        "The speedups for torchdynamo mostly come with GPU Ampere or higher and which is not detected here."
    )


def device(args: TrainingArguments) -> torch.device:
    """``cpu`` with use_cpu or without CUDA, else ``cuda:<local rank>``."""
    torch = _torch()
    if args.use_cpu or not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device("cuda", args.local_process_index)


class DeepSpeedPlugin:
    """What ``TrainingArguments.deepspeed_plugin`` tells a Trainer subclass: the ``deepspeed`` configuration
    as given (``deepspeed_config``, before the "auto" values are filled) and its ZeRO stage (``zero_stage``)."""

    def __init__(self, config: dict) -> None:
        self.deepspeed_config = config
        self.zero_stage = zero_stage(config)

    def __repr__(self) -> str:
        return f"DeepSpeedPlugin(zero_stage={self.zero_stage})"


def deepspeed_plugin(args: TrainingArguments) -> DeepSpeedPlugin | None:
    """transformers' ``args.deepspeed_plugin``: None without ``deepspeed`` (TRL reads its ``zero_stage``)."""
    if not args.deepspeed:
        return None
    return DeepSpeedPlugin(load_deepspeed_config(args.deepspeed))


class DistributedType(str, enum.Enum):
    """accelerate's ``DistributedType`` values (used when accelerate is not installed)."""

    NO = "NO"
    MULTI_CPU = "MULTI_CPU"
    MULTI_GPU = "MULTI_GPU"
    DEEPSPEED = "DEEPSPEED"
    FSDP = "FSDP"


def distributed_type_enum() -> Any:
    """accelerate's own ``DistributedType`` when it is installed (``is`` and ``==`` with it hold), else ours."""
    try:
        from accelerate.utils import DistributedType as accelerate_type
    except ImportError:
        return DistributedType
    return accelerate_type


class DistributedState:
    """What ``TrainingArguments.distributed_state`` (accelerate's ``PartialState`` in transformers) tells a
    Trainer subclass: the processes, this one's place among them, its device and the kind of launch."""

    def __init__(self, args: TrainingArguments) -> None:
        self.num_processes = max(int(args.world_size), 1)
        self.process_index = int(args.process_index)
        self.local_process_index = int(args.local_process_index)
        self.device = args.device
        kinds = distributed_type_enum()
        if args.deepspeed:
            self.distributed_type = kinds.DEEPSPEED
        elif args.fsdp:
            self.distributed_type = kinds.FSDP
        elif self.num_processes > 1:
            self.distributed_type = kinds.MULTI_GPU if self.device.type == "cuda" else kinds.MULTI_CPU
        else:
            self.distributed_type = kinds.NO
        self.use_distributed = self.num_processes > 1
        self.is_main_process = self.process_index == 0
        self.is_local_main_process = self.local_process_index == 0
        self.is_last_process = self.process_index == self.num_processes - 1
        self._args = args

    @property
    def initialized(self) -> bool:
        """Always True: the state is read from the launcher's variables when asked for."""
        return True

    @property
    def backend(self) -> str | None:
        """The open process group's backend (None on one process, or before the group is opened)."""
        return _torch().distributed.get_backend() if _distributed() else None

    def wait_for_everyone(self) -> None:
        """A barrier over the processes (opening the launcher's group when nobody has); nothing on one."""
        if self.num_processes > 1 and (_distributed() or _open_process_group(self._args)):
            _torch().distributed.barrier()

    def main_process_first(self) -> contextlib.AbstractContextManager[None]:
        """The block on the main process first, then on the others (``args.main_process_first(local=False)``)."""
        return main_process_first(self._args, local=False)

    def local_main_process_first(self) -> contextlib.AbstractContextManager[None]:
        """The block on each node's main process first, then on the node's others."""
        return main_process_first(self._args, local=True)

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` on the local main process only."""
        if self.is_local_main_process:
            print(*args, **kwargs)

    def __repr__(self) -> str:
        return (
            f"Distributed environment: {self.distributed_type}\nNum processes: {self.num_processes}\n"
            f"Process index: {self.process_index}\nLocal process index: {self.local_process_index}\n"
            f"Device: {self.device}\n"
        )


def distributed_state(args: TrainingArguments) -> DistributedState:
    """transformers' ``args.distributed_state``, read from the launcher's variables."""
    return DistributedState(args)


def parallel_mode(args: TrainingArguments) -> ParallelMode:
    """DISTRIBUTED with several processes, NOT_DISTRIBUTED with several GPUs in one, else NOT_PARALLEL."""
    if args.world_size > 1:
        return ParallelMode.DISTRIBUTED
    return ParallelMode.NOT_DISTRIBUTED if args.n_gpu > 1 else ParallelMode.NOT_PARALLEL


def train_batch_size(args: TrainingArguments) -> int:
    """Training batch size of this process (per device × GPUs of this process)."""
    return args.per_device_train_batch_size * max(1, args.n_gpu)


def eval_batch_size(args: TrainingArguments) -> int:
    """Evaluation batch size of this process (per device × GPUs of this process)."""
    return args.per_device_eval_batch_size * max(1, args.n_gpu)


def ddp_timeout_delta(args: TrainingArguments) -> timedelta:
    """``ddp_timeout`` as a timedelta."""
    return timedelta(seconds=args.ddp_timeout)


def should_log(args: TrainingArguments) -> bool:
    """True on the process that logs: local rank 0 with log_on_each_node, else global rank 0."""
    return (args.local_process_index if args.log_on_each_node else args.process_index) == 0


def should_save(args: TrainingArguments) -> bool:
    """True on the process that writes: local rank 0 with save_on_each_node, else global rank 0."""
    return (args.local_process_index if args.save_on_each_node else args.process_index) == 0


def place_model_on_device(args: TrainingArguments) -> bool | None:
    """Hook for subclasses (transformers' contract); None lets the trainer decide."""
    return None


def get_process_log_level(args: TrainingArguments) -> int:
    """Log level of this process: log_level on the logging process, log_level_replica elsewhere.

    "passive" is the library verbosity (``hf_lightning.utils.logging.get_verbosity()``), which follows
    transformers' when a script set that (``docs/logging.md``).
    """
    name = args.log_level if args.should_log else args.log_level_replica
    level = LOG_LEVELS[name]
    return hf_logging.get_verbosity() if level == -1 else level


def get_warmup_steps(args: TrainingArguments, num_training_steps: int) -> int:
    """Warmup steps: ``warmup_steps`` itself when >= 1, else that ratio of ``num_training_steps`` (ceil); the
    rule ``HFModule`` applies to its ``ModuleSettings.warmup_steps`` (:func:`resolve_steps`)."""
    return resolve_steps(args.warmup_steps, num_training_steps)


@contextlib.contextmanager
def main_process_first(args: TrainingArguments, local: bool = True, desc: str = "work") -> Iterator[None]:
    """Run the block on the main process first (of each node when ``local``), the others after it.

    The wait is a ``torch.distributed.barrier``; under a launcher (``WORLD_SIZE`` > 1) the default process
    group is opened for it when nobody has yet, as transformers' arguments have it open by then.
    """
    if args.world_size <= 1 or not (_distributed() or _open_process_group(args)):
        yield
        return
    is_main = (args.local_process_index if local else args.process_index) == 0
    who = "main local process" if local else "main process"  # transformers' debug lines, word for word
    try:
        if not is_main:
            logger.debug("%d: waiting for the %s to perform %s", args.process_index, who, desc)
            _torch().distributed.barrier()
        yield
    finally:
        if is_main:
            logger.debug("%d: %s completed %s, releasing all replicas", args.process_index, who, desc)
            _torch().distributed.barrier()
