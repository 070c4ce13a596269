"""``transformers.training_args_seq2seq``'s path: ``Seq2SeqTrainingArguments`` (home: ``hf_lightning.args``)."""

from __future__ import annotations

from hf_lightning.args.seq2seq import *  # noqa: F403
from hf_lightning.args.seq2seq import __all__ as _seq2seq_all
from hf_lightning.args.training_args import TrainingArguments

__all__ = [*_seq2seq_all, "TrainingArguments"]
