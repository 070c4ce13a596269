"""The facade: ``Trainer`` and ``Seq2SeqTrainer``, composed of named parts; the only part of
``hf_lightning`` (outside ``hf_lightning.adapters``) that imports the engine adapters.

Also ``transformers.trainer``'s module-level names a script or test may import from it
(``DEFAULT_CALLBACKS``, ``TRAINER_STATE_NAME``, ``logger``).
"""

from __future__ import annotations

from hf_lightning.checkpoint.folders import TRAINER_STATE_NAME
from hf_lightning.trainer.binding import TransformersBinding, use_as_transformers_trainer
from hf_lightning.trainer.seq2seq import Seq2SeqTrainer
from hf_lightning.trainer.trainer import DEFAULT_CALLBACKS, DEFAULT_PROGRESS_CALLBACK, Trainer
from hf_lightning.utils.logging import get_logger

logger = get_logger(__name__)
"""The facade's logger for warnings about the run's configuration (transformers.trainer's ``logger``)."""

__all__ = [
    "DEFAULT_CALLBACKS",
    "DEFAULT_PROGRESS_CALLBACK",
    "TRAINER_STATE_NAME",
    "Seq2SeqTrainer",
    "Trainer",
    "TransformersBinding",
    "logger",
    "use_as_transformers_trainer",
]
