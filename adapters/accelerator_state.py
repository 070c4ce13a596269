"""``trainer.accelerator.state`` and the settings behind it: accelerate's names, answered from Lightning.

accelerate's ``AcceleratorState`` describes the processes (``num_processes``, ``process_index``,
``local_process_index``, ``device``, ``distributed_type``, ``mixed_precision``, ``backend``) and the
engine plugins (``deepspeed_plugin``, ``fsdp_plugin``). :class:`AcceleratorStateView` gives the same
names, read live: inside a fit from the running ``lightning.Trainer``, otherwise from the launcher's
variables and the arguments, translated once into :class:`AcceleratorSettings` when the Trainer is
built (as transformers' Accelerator reads them once). Every name can be patched for a test, as
transformers' own tests do with ``patch.object(trainer.accelerator.state, "num_processes", 2)``: a
value set on the object wins until it is deleted again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from hf_lightning.args.accelerator import AcceleratorSettings, accelerator_settings
from hf_lightning.args.distributed import DistributedSettings
from hf_lightning.args.runtime import DistributedType, distributed_type_enum

__all__ = [
    "AcceleratorSettings",
    "AcceleratorStateView",
    "DeepSpeedPluginView",
    "DistributedType",
    "FSDPPluginView",
    "accelerator_settings",
    "distributed_type_enum",
    "not_carried",
]


class DeepSpeedPluginView:
    """``state.deepspeed_plugin`` under ``TrainingArguments(deepspeed=...)``: the configuration DeepSpeed runs.

    ``deepspeed_config`` is the configuration with the "auto" values the arguments fill (those that need
    the model, such as ``reduce_bucket_size``, are filled when training starts), ``zero_stage`` its stage.
    """

    def __init__(self, config: Mapping[str, Any], stage: int) -> None:
        self.deepspeed_config = dict(config)
        self.zero_stage = stage

    def __repr__(self) -> str:
        return f"DeepSpeedPluginView(zero_stage={self.zero_stage})"


class FSDPPluginView:
    """``state.fsdp_plugin`` under ``TrainingArguments(fsdp=...)``: the version and state-dict type in use."""

    def __init__(self, version: int, state_dict_type: str) -> None:
        self.fsdp_version = version
        self.state_dict_type = state_dict_type

    def set_state_dict_type(self, state_dict_type: str = "FULL_STATE_DICT") -> None:
        """accelerate's call before ``save_model``; ``save_model`` here always writes full weights."""
        if str(state_dict_type).upper() not in ("FULL_STATE_DICT", "STATEDICTTYPE.FULL_STATE_DICT"):
            raise NotImplementedError(
                f"`trainer.accelerator.state.fsdp_plugin.set_state_dict_type({state_dict_type!r})`: "
                "hf_lightning's save_model gathers full weights; set fsdp_config['state_dict_type'] "
                "for checkpoints instead"
            )

    def __repr__(self) -> str:
        return f"FSDPPluginView(fsdp_version={self.fsdp_version}, state_dict_type={self.state_dict_type!r})"


# The names AcceleratorStateView answers live (a value set on the view wins, as mock.patch sets it).
_LIVE_NAMES = frozenset(
    {
        "num_processes",
        "process_index",
        "local_process_index",
        "device",
        "distributed_type",
        "mixed_precision",
        "backend",
        "deepspeed_plugin",
        "fsdp_plugin",
        "parallelism_config",
        "use_distributed",
        "is_main_process",
        "is_local_main_process",
        "is_last_process",
        "initialized",
        "fork_launched",
        "debug",
        "is_fsdp2",
        "torch_tp_plugin",
        "device_mesh",
        "deepspeed_plugins",
        "dynamo_plugin",
    }
)


class AcceleratorStateView:
    """accelerate's ``AcceleratorState`` names for one ``LightningAccelerator`` (see the module docstring)."""

    def __init__(self, accelerator: Any) -> None:
        object.__setattr__(self, "_accelerator", accelerator)

    def __getattr__(self, name: str) -> Any:
        if name in _LIVE_NAMES:
            return self._live(name)
        raise AttributeError(not_carried("AcceleratorState", name, type(self).__name__))

    def _live(self, name: str) -> Any:
        acc = self._accelerator
        if name in ("num_processes", "process_index", "local_process_index"):
            return acc.live_world()[("num_processes", "process_index", "local_process_index").index(name)]
        if name in ("is_main_process", "is_local_main_process", "is_last_process", "use_distributed"):
            return _process_flag(name, self.num_processes, self.process_index, self.local_process_index)
        settings = acc.settings
        if name == "device":
            return acc.live_device()
        if name == "distributed_type":
            return _distributed_type(settings.distributed, self.num_processes, self.device)
        if name == "mixed_precision":
            return settings.mixed_precision
        if name == "backend":
            return _backend(settings.distributed, self.num_processes, self.device)
        if name == "deepspeed_plugin":
            ds = settings.distributed.deepspeed
            return DeepSpeedPluginView(ds.config, ds.stage) if ds is not None else None
        if name == "fsdp_plugin":
            fsdp = settings.distributed.fsdp
            return FSDPPluginView(fsdp.version, fsdp.state_dict_type) if fsdp is not None else None
        if name == "is_fsdp2":
            return settings.distributed.fsdp is not None and settings.distributed.fsdp.version == 2
        if name == "initialized":
            return True
        if name in ("fork_launched", "debug"):
            return False
        if name == "deepspeed_plugins":
            plugin = self.deepspeed_plugin
            return {"default": plugin} if plugin is not None else None
        return None  # parallelism_config, torch_tp_plugin, device_mesh, dynamo_plugin: none in use

    # accelerate's AcceleratorState methods
    def wait_for_everyone(self) -> None:
        self._accelerator.wait_for_everyone()

    def print(self, *args: Any, **kwargs: Any) -> None:
        self._accelerator.print(*args, **kwargs)

    def main_process_first(self) -> Any:
        return self._accelerator.main_process_first()

    def local_main_process_first(self) -> Any:
        return self._accelerator.local_main_process_first()

    def split_between_processes(self, inputs: Any, apply_padding: bool = False) -> Any:
        return self._accelerator.split_between_processes(inputs, apply_padding=apply_padding)

    def __repr__(self) -> str:  # accelerate's layout (scripts print or log it)
        return (
            f"Distributed environment: {self.distributed_type}{'  Backend: ' + self.backend if self.backend else ''}\n"
            f"Num processes: {self.num_processes}\nProcess index: {self.process_index}\n"
            f"Local process index: {self.local_process_index}\nDevice: {self.device}\n\n"
            f"Mixed precision type: {self.mixed_precision}\n"
        )


def _process_flag(name: str, world: int, rank: int, local_rank: int) -> bool:
    if name == "is_main_process":
        return rank == 0
    if name == "is_local_main_process":
        return local_rank == 0
    if name == "is_last_process":
        return rank == world - 1
    return world > 1  # use_distributed


def _distributed_type(settings: DistributedSettings, world: int, device: torch.device) -> Any:
    kinds = distributed_type_enum()
    if settings.deepspeed is not None:
        return kinds.DEEPSPEED
    if settings.fsdp is not None:
        return kinds.FSDP
    if world <= 1:
        return kinds.NO
    return kinds.MULTI_GPU if device.type == "cuda" else kinds.MULTI_CPU


def _backend(settings: DistributedSettings, world: int, device: torch.device) -> str | None:
    if world <= 1 and settings.deepspeed is None and settings.fsdp is None:
        return None
    if settings.process_group_backend is not None:
        return settings.process_group_backend
    return "nccl" if device.type == "cuda" else "gloo"


def not_carried(owner: str, name: str, type_name: str) -> str:
    """The message of the ``AttributeError`` for a name hf_lightning's accelerator does not offer."""
    if _is_accelerate_name(owner, name):
        return (
            f"`trainer.accelerator{'.state' if owner == 'AcceleratorState' else ''}.{name}`: accelerate's "
            f"`{owner}.{name}` is not carried by hf_lightning's Lightning-backed accelerator "
            "(docs/subclassing.md lists what it offers)"
        )
    return f"'{type_name}' object has no attribute '{name}'"


def _is_accelerate_name(owner: str, name: str) -> bool:
    if name.startswith("__"):
        return False
    try:
        if owner == "AcceleratorState":
            from accelerate.state import AcceleratorState as cls
        else:
            from accelerate import Accelerator as cls
    except ImportError:
        return not name.startswith("_")
    return hasattr(cls, name) or name in _INSTANCE_NAMES.get(owner, ())


# Names accelerate sets on instances (so not found on the class).
_INSTANCE_NAMES = {
    "Accelerator": ("scaler", "native_amp", "rng_types", "autocast_handler", "project_configuration",
                    "deepspeed_engine_wrapped", "step", "trackers", "log_with", "flag_tensor",
                    "device_placement", "gradient_state", "fp8_recipe_handler", "ddp_handler"),
    "AcceleratorState": ("deepspeed_plugins", "torch_tp_plugin", "megatron_lm_plugin", "dynamo_plugin",
                         "device_mesh", "parallelism_config", "fsdp_plugin"),
}  # fmt: skip
