"""``transformers.training_args``'s path: ``TrainingArguments`` and its enums (home: ``hf_lightning.args``), and
``AcceleratorConfig``, which transformers' module also holds."""

from __future__ import annotations

from hf_lightning.args.normalize import AcceleratorConfig
from hf_lightning.args.training_args import *  # noqa: F403
from hf_lightning.args.training_args import __all__ as _ARGUMENT_NAMES

__all__ = [*_ARGUMENT_NAMES, "AcceleratorConfig"]
