"""The Trainer's log lines that take more than one call, worded as transformers' Trainer words them.

The facade calls these at the moments transformers logs them (``docs/logging.md``); keeping the text
here keeps each call site one line.
"""

from __future__ import annotations

import importlib.util
import logging
import sys
from typing import Any

from hf_lightning.utils import logging as hf_logging
from hf_lightning.utils.transformers_bridge import install_twin_filters, transformers_library_root

__all__ = ["configure_trainer_logging", "log_eval_header", "log_train_header"]


def configure_trainer_logging(args: Any) -> int:
    """What transformers' ``Trainer.__init__`` does with ``log_level`` / ``log_level_replica``.

    The level of this process (``args.get_process_log_level()``) becomes the library verbosity: of
    transformers when it is loaded (which governs its own records, e.g. ``save_pretrained``'s, and
    ours, which follow it), else of hf_lightning. "passive" changes nothing: hf_lightning's
    verbosity keeps following the script's settings. Returns the process's level.
    """
    _set_up_transformers_logging()
    install_twin_filters()
    level = args.get_process_log_level()
    name = args.log_level if args.should_log else args.log_level_replica
    if name == "passive":
        return level
    transformers_logging = sys.modules.get("transformers.utils.logging")
    if transformers_logging is not None:
        transformers_logging.set_verbosity(level)  # sets up transformers' logging if it was not yet
    # with transformers loaded, ours follows its verbosity from now on, as its Trainer's lines do
    hf_logging.set_verbosity(logging.NOTSET if transformers_library_root() is not None else level)
    return level


def _set_up_transformers_logging() -> None:
    """With transformers installed, its logging is set up from the Trainer's first line, as under transformers'
    Trainer: the lines print as ``[transformers] ...`` throughout. (A script that never imports transformers
    itself otherwise saw ``[hf_lightning]`` lines until the first fit imported it, through torchmetrics.)"""
    if "transformers.utils.logging" in sys.modules or importlib.util.find_spec("transformers") is None:
        return
    try:
        from transformers.utils import logging as transformers_logging  # noqa: PLC0415
    except Exception:  # a broken install: hf_lightning's own handler prints
        return
    transformers_logging.get_logger()  # its library root logger and stderr handler


def log_train_header(
    logger: logging.Logger,
    trainer: Any,
    epochs: int,
    steps_per_epoch: int,
    num_examples: int,
    total_batch: int,
    max_steps: int,
    epochs_trained: int,
    steps_trained_in_current_epoch: int,
    resume_from_checkpoint: Any,
) -> None:
    """The "***** Running training *****" block, then the resume lines when resuming."""
    from hf_lightning.trainer_utils import get_model_param_count

    args = trainer.args
    logger.info("***** Running training *****")
    logger.info(f"  Num examples = {num_examples:,}")
    logger.info(f"  Num Epochs = {epochs:,}")
    logger.info(f"  Num update steps per epoch = {steps_per_epoch:,}")
    logger.info(f"  Instantaneous batch size per device = {args.per_device_train_batch_size:,}")
    if args.per_device_train_batch_size != trainer._train_batch_size:
        logger.info(
            f"  Training with DataParallel so batch size has been adjusted to: {trainer._train_batch_size:,}"
        )
    logger.info(f"  Total train batch size (w. parallel, distributed & accumulation) = {total_batch:,}")
    logger.info(f"  Gradient Accumulation steps = {args.gradient_accumulation_steps}")
    logger.info(f"  Total optimization steps = {max_steps:,}")
    trainable = get_model_param_count(trainer.model, trainable_only=True)
    logger.info(f"  Number of trainable parameters = {trainable:,}")
    if resume_from_checkpoint is None:
        return
    logger.info(
        f"  Resuming training from checkpoint with epoch {epochs_trained} "
        f"and global step {trainer.state.global_step}"
    )
    if not args.ignore_data_skip:
        logger.info(
            f"  Fast-forwarding the dataloader past {epochs_trained} epochs and"
            f" {steps_trained_in_current_epoch} batches to resume from the exact training state."
        )


def log_eval_header(
    logger: logging.Logger, description: str, num_examples: int | None, batch_size: int
) -> None:
    """The "***** Running Evaluation *****" block (``num_examples`` None: a loader without length)."""
    logger.info(f"\n***** Running {description} *****")
    if num_examples is None:
        logger.info("  Num examples: Unknown")
    else:
        logger.info(f"  Num examples = {num_examples}")
    logger.info(f"  Batch size = {batch_size}")
