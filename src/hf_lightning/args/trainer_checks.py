"""The argument combinations ``Trainer(...)`` refuses at construction, with transformers' exception types
and words: an ``output_dir`` that cannot be a folder, and what FSDP and DeepSpeed cannot do.

They read the arguments only; ``hf_lightning.trainer.init_checks`` calls them with what the Trainer
knows (whether optimizers were given, the engine's reader of the DeepSpeed ZeRO stage).
"""

from __future__ import annotations

import errno
import os
from typing import Any

from hf_lightning.args.deepspeed_config import load_deepspeed_config, zero_stage

__all__ = ["check_output_dir", "check_sharding_arguments"]


def check_output_dir(args: Any) -> None:
    """Refuse an ``output_dir`` that is a file, or lies below one, on the saving process; else create it.

    transformers creates ``output_dir`` in ``Trainer.__init__`` (``os.makedirs``; a script that only
    evaluates or predicts writes its results there) and so fails there with a bare ``FileExistsError`` /
    ``NotADirectoryError``; the same types are raised here, naming the argument.
    """
    if not args.should_save or args.output_dir is None:
        return
    path = os.path.abspath(os.fspath(args.output_dir))
    call = f"`TrainingArguments(output_dir={os.fspath(args.output_dir)!r})`"
    if os.path.exists(path) and not os.path.isdir(path):
        raise FileExistsError(
            errno.EEXIST,
            f"{call} is an existing file, not a folder: the Trainer writes its checkpoints, model and logs "
            "into output_dir. Pass the path of a folder (created when missing)",
        )
    parent = os.path.dirname(path)
    while not os.path.exists(parent) and os.path.dirname(parent) != parent:
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise NotADirectoryError(
            errno.ENOTDIR,
            f"{call} lies inside `{parent}`, which is a file, not a folder: the Trainer cannot create "
            "output_dir there. Pass the path of a folder",
        )
    os.makedirs(path, exist_ok=True)


def check_sharding_arguments(args: Any, *, given_optimizers: bool) -> None:
    """What transformers refuses at construction under FSDP and DeepSpeed, with its words."""
    fsdp, deepspeed = bool(args.fsdp), bool(args.deepspeed)
    config = args.fsdp_config or {}
    if fsdp and config.get("activation_checkpointing") and args.activation_checkpointing:
        raise ValueError(
            "`fsdp_config['activation_checkpointing']` (FSDP's own activation checkpointing) and the "
            "`activation_checkpointing` training argument can't both be set to True. Use FSDP's activation "
            "checkpointing when using FSDP."
        )
    if args.save_only_model and (deepspeed or fsdp) and args.load_best_model_at_end:
        wrapper = "DeepSpeed" if deepspeed else "FSDP"
        raise ValueError(
            f"{wrapper} can't be used with `save_only_model` along with `load_best_model_at_end`."
        )
    if deepspeed and args.auto_find_batch_size and zero_stage(load_deepspeed_config(args.deepspeed)) == 3:
        raise ValueError(
            "`auto_find_batch_size` isn't supported yet with DeepSpeed Zero-3. Please consider using Zero-2, "
            "Zero-1, or FSDP"
        )
    if (
        args.save_only_model
        and fsdp
        and "SHARDED_STATE_DICT" in str(config.get("state_dict_type", "")).upper()
    ):
        raise ValueError(
            "save_only_model option is not compatible with FSDP state dict type 'SHARDED_STATE_DICT'"
        )
    if fsdp and given_optimizers:
        raise RuntimeError(
            "Passing `optimizers` is not allowed if PyTorch FSDP is enabled. "
            "You should subclass `Trainer` and override the `create_optimizer_and_scheduler` method."
        )
