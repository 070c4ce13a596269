"""``transformers.training_args``'s path: ``TrainingArguments`` and its enums (home: ``hf_lightning.args``)."""

from __future__ import annotations

from hf_lightning.args.training_args import *  # noqa: F403
from hf_lightning.args.training_args import __all__ as __all__
