"""The facade: ``Trainer`` and ``Seq2SeqTrainer``, composed of named parts; the only part of
``hf_lightning`` (outside ``hf_lightning.adapters``) that imports the engine adapters."""

from __future__ import annotations

from hf_lightning.trainer.seq2seq import Seq2SeqTrainer
from hf_lightning.trainer.trainer import Trainer

__all__ = ["Seq2SeqTrainer", "Trainer"]
