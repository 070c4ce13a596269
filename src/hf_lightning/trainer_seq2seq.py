"""``transformers.trainer_seq2seq``'s path: ``Seq2SeqTrainer`` (home: the facade ``hf_lightning.trainer``)."""

from __future__ import annotations

from hf_lightning.trainer import Seq2SeqTrainer, Trainer

__all__ = ["Seq2SeqTrainer", "Trainer"]
